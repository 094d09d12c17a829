"""``ecommerce_relevance`` (ecommerce): does a product title match a shopper's query?
Options A. Exact, B. Substitute, C. Irrelevant; the teacher answers with the letter.

The labels are defined by construction, so they are never ambiguous:
Exact = the queried product with every attribute the query names (brand,
color); Substitute = the queried product, but one named attribute differs;
Irrelevant = a product of another category. Difficulty: level 1 queries the
bare noun (Exact or Irrelevant only); 2 adds one attribute; 3+ names brand
and color, and Irrelevant comes from a sibling category; 4+ the irrelevant
product shares the query's brand and color; 5 the substitute's brand is a
look-alike (``Lumio`` for ``Lumeo``).
"""
from __future__ import annotations

import random

from stages.world.items import Item
from stages.world.suites import Suite, register_suite
from stages.world.suites.catalog import (BRANDS, COLORS, LANGUAGES, LOOKALIKE, MODELS, NOUNS, color_for,
                                         departments_except, draw_noun, has_attributes, pick_adjective,
                                         render_title, siblings)
from stages.world.suites.ecommerce_category import (mcq_item, render_options, spelled_mcq_response,
                                                    wrong_mcq_response)

LETTERS = "ABC"
# Exact, Substitute, Irrelevant. Thai options quote the query: three fixed Thai labels
# would be one template run of over 13 n-gram tokens (one per Thai character).
LABELS = {
    "en": ("Exact", "Substitute", "Irrelevant"),
    "zh-TW": ("相符", "可替代", "無關"),
    "id": ("Sesuai", "Pengganti", "Tidak relevan"),
    "vi": ("Khớp", "Thay thế", "Không liên quan"),
    "th": ("ตรงกับ “{q}”", "แทน “{q}” ได้", "ไม่ใช่ “{q}”"),
    "pt": ("Exato", "Substituto", "Irrelevante"),
    "ms": ("Tepat", "Pengganti", "Tidak berkaitan"),
}
# Question first, options last; both runs stay under 13 n-gram tokens (Chinese and
# Thai count one per character: the Thai options state the question).
TEMPLATES = {
    "en": "Does the product match the query?\nQuery: {query}\nProduct: {title}",
    "zh-TW": "與搜尋相符嗎？\n搜尋：{query}\n商品：{title}",
    "id": "Apakah produk sesuai pencarian?\nPencarian: {query}\nProduk: {title}",
    "vi": "Mức độ phù hợp?\nTừ khóa: {query}\nSản phẩm: {title}",
    "th": "คำค้น: {query}\nสินค้า: {title}",
    "pt": "O produto corresponde à busca?\nBusca: {query}\nProduto: {title}",
    "ms": "Adakah produk sepadan dengan carian?\nCarian: {query}\nProduk: {title}",
}
# How a shopper types it (lower-cased afterwards): brand first in English and Chinese.
QUERY_ORDER = {
    "en": "{brand} {color} {noun}",
    "zh-TW": "{brand} {color}{noun}",
    "id": "{noun} {color} {brand}",
    "vi": "{noun} {color} {brand}",
    "th": "{noun}{color} {brand}",
    "pt": "{noun} {color} {brand}",
    "ms": "{noun} {color} {brand}",
}
QUERY_COLOR = {"vi": "màu {c}", "th": "สี{c}"}


def render_query(lang: str, noun: str, brand: str | None, color: str | None) -> str:
    col = QUERY_COLOR.get(lang, "{c}").format(c=color_for(color, lang, noun)) if color else ""
    return " ".join(QUERY_ORDER[lang].format(brand=brand or "", color=col, noun=noun).split()).lower()


def _other(rng: random.Random, pool: list[str], not_this: str) -> str:
    return rng.choice([x for x in pool if x != not_this])


def make_relevance(rng: random.Random, item_id: str, level: int, lang: str) -> Item:
    cat, idx = draw_noun(rng, with_attributes=level >= 3 or rng.random() < 0.7)
    noun = NOUNS[cat][lang][idx]
    colored = has_attributes(cat, idx)
    # what the query names
    q_brand = q_color = None
    if level == 2:
        if colored and rng.random() < 0.5:
            q_color = rng.choice(sorted(COLORS))
        else:
            q_brand = rng.choice(BRANDS)
    elif level >= 3:
        q_brand = rng.choice(BRANDS)
        q_color = rng.choice(sorted(COLORS)) if colored else None
    query = render_query(lang, noun, q_brand, q_color)

    label = rng.choice("AC" if level == 1 else "ABC")
    t_cat, t_idx, brand = cat, idx, q_brand or rng.choice(BRANDS)
    color = q_color or (rng.choice(sorted(COLORS)) if colored else None)
    if label == "B":  # one named attribute differs
        if q_color and (not q_brand or rng.random() < 0.5):
            color = _other(rng, sorted(COLORS), q_color)
        else:
            brand = LOOKALIKE[q_brand] if level >= 5 else _other(rng, BRANDS, q_brand)
    elif label == "C":
        t_cat, t_idx = draw_noun(rng, siblings(cat) if level >= 3 else departments_except(cat))
        if level < 4:
            brand = rng.choice(BRANDS)
        color = (color if level >= 4 and color else rng.choice(sorted(COLORS))) if has_attributes(t_cat, t_idx) \
            else None
    t_noun = NOUNS[t_cat][lang][t_idx]
    parts = {"brand": brand, "noun": t_noun, "model": rng.choice(MODELS), "color": color if level >= 2 else None}
    if level >= 2:
        parts["adj"] = pick_adjective(rng, lang, t_noun)
    title = render_title(lang, **parts)

    options = [text.format(q=query) for text in LABELS[lang]]
    prompt = f"{TEMPLATES[lang].format(query=query, title=title)}\n{render_options(options, LETTERS)}"
    # the teacher's plausible slips: miss the differing attribute, or the changed noun
    confusable = {"A": ["B"], "B": ["A"], "C": ["B"] if level >= 4 else ["A"]}[label]
    return mcq_item(item_id, "mcq_relevance", lang, prompt, label, level, options, letters=LETTERS,
                    confusable=confusable, query=query, title=title)


SUITE = register_suite(Suite(
    name="ecommerce_relevance", domain="ecommerce", make=make_relevance, wrong=wrong_mcq_response,
    alt=spelled_mcq_response, languages=LANGUAGES,
    description="query-product relevance, A. Exact / B. Substitute / C. Irrelevant; the answer is the letter"))
