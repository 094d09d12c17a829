"""``title_rewrite`` (ecommerce): rewrite a messy seller title into a clean one, same language.

Open-ended, so judged: the verifier spec is ``title_rules``
(compass/gym/verifiers/title_rules.py) with the criteria for the GenRM judge
and the rules checked without one (``must_keep`` brand and noun, ``banned``
seller spam, ``max_chars``).
The (non-thinking) teacher writes the clean title in the language's word
order; ``alt`` is another acceptable rewrite (a true tie), ``wrong`` keeps the
stuffing or drops the brand (a known quality gap).

Difficulty is how messy the title is: level 1 shouts (ALL CAPS) and adds a
promo phrase; 2 repeats the noun and the category; 3 scrambles the word
order; 4 adds a second promo phrase and "!!!"; 5 repeats the brand and
appends a selling point.
"""
from __future__ import annotations

import random

from stages.world.items import Item, verifier_spec
from stages.world.suites import Suite, register_suite
from stages.world.suites.catalog import (BRANDS, CATEGORIES, COLORS, LANGUAGES, MODELS, NOUNS, PROMO_PHRASES,
                                         SELLING_POINTS, color_in_title, draw_noun, has_attributes,
                                         pick_adjective, render_title)

MAX_CHARS = 70
CRITERIA = ["keeps the brand and the product name", "no keyword stuffing, repeated words or promotional phrases",
            "no ALL CAPS words", f"at most {MAX_CHARS} characters on one line",
            "same language as the original title", "reads naturally"]
INSTRUCTIONS = {
    "en": "Rewrite this product title cleanly:",
    "zh-TW": "請精簡這個標題：",
    "id": "Tulis ulang judul produk ini dengan rapi:",
    "vi": "Viết lại tiêu đề cho gọn gàng:",
    "th": "แก้ชื่อ:",
    "pt": "Reescreva este título de produto de forma limpa:",
    "ms": "Tulis semula tajuk produk ini dengan kemas:",
}


def _promo(lang: str, phrase: str) -> str:
    return f"【{phrase}】" if lang == "zh-TW" else phrase


def messy_title(rng: random.Random, lang: str, parts: dict, category: str, level: int) -> str:
    """The clean title's words made messy by ``level`` (see the module doc)."""
    if level >= 3:
        segs = [parts["brand"], parts["adj"], parts["noun"], parts["model"]]
        if parts.get("color"):
            segs.append(color_in_title(parts["color"], lang, parts["noun"]))
        rng.shuffle(segs)
    else:
        segs = [render_title(lang, **parts)]
    promos = rng.sample(PROMO_PHRASES[lang], 2)
    # never right after the instruction: their two template runs would join
    segs.insert(rng.randint(1, len(segs)), _promo(lang, promos[0]))
    if level >= 2:
        segs += [parts["noun"], CATEGORIES[category][lang]]
    if level >= 4:
        segs += [_promo(lang, promos[1]), "!!!"]
    if level >= 5:
        segs += [parts["brand"], rng.choice(SELLING_POINTS[lang])]
    return " ".join(segs).upper()


def make_title_rewrite(rng: random.Random, item_id: str, level: int, lang: str) -> Item:
    cat, idx = draw_noun(rng)
    noun = NOUNS[cat][lang][idx]
    parts = {"brand": rng.choice(BRANDS), "noun": noun, "adj": pick_adjective(rng, lang, noun),
             "model": rng.choice(MODELS), "color": rng.choice(sorted(COLORS)) if has_attributes(cat, idx) else None}
    clean = render_title(lang, **parts)
    spec = verifier_spec("title_rules", criteria=CRITERIA, must_keep=[parts["brand"], noun],
                         banned=PROMO_PHRASES[lang], max_chars=MAX_CHARS)
    prompt = f"{INSTRUCTIONS[lang]}\n{messy_title(rng, lang, parts, cat, level)}"
    return Item(item_id, "ecommerce", "title_rewrite", lang, prompt, clean, spec, level, clean,
                {"parts": parts, "category": cat})


def alt_title(rng: random.Random, item: Item) -> str:
    """Another acceptable rewrite: the same title without its adjective or its model code."""
    parts = dict(item.extra["parts"])
    del parts[rng.choice(["adj", "model"])]
    return render_title(item.language, **parts)


def wrong_title(rng: random.Random, item: Item) -> str:
    """A bad rewrite: the stuffing and spam kept, or the brand dropped."""
    parts = dict(item.extra["parts"])
    if rng.random() < 0.5:
        promo = rng.choice(PROMO_PHRASES[item.language])
        return f"{item.response} {parts['noun'].upper()} {_promo(item.language, promo)}"
    del parts["brand"]
    return render_title(item.language, **parts)


SUITE = register_suite(Suite(
    name="title_rewrite", domain="ecommerce", make=make_title_rewrite, wrong=wrong_title, alt=alt_title,
    languages=LANGUAGES,
    description="messy seller title to a clean one in the same language; scored by the title_rules "
                "verifier (open-ended: criteria for a GenRM judge, not wired in yet)"))
