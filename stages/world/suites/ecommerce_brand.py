"""``ecommerce_brand`` (ecommerce): which brand a product listing names, options A-D.

The teacher answers with the letter. Difficulty: level 1 is a short title
among unrelated brands; 2 a full title (in Vietnamese, Thai and Portuguese
the brand sits after the noun); 3 adds a selling point and the brand's
look-alike (``Lumio``/``Lumeo``) to the options; 4 mentions a second brand
("Compatible with Zenta") that is also an option; 5 puts that mention first.
"""
from __future__ import annotations

import random

from stages.world.items import Item
from stages.world.suites import Suite, register_suite
from stages.world.suites.catalog import (BRANDS, COLORS, DEPARTMENT_OF, LANGUAGES, LOOKALIKE, MODELS, NOUNS,
                                         OTHER_BRAND_PHRASES, SELLING_POINTS, draw_noun, has_attributes,
                                         pick_adjective, render_title)
from stages.world.suites.ecommerce_category import (LETTERS, mcq_item, place_answer, render_options,
                                                    spelled_mcq_response, wrong_mcq_response)

# The question sits between the listing and the options (brand names, which vary):
# a question first would join the fixed "Compatible with" of level 5 into one long
# template run in Thai and Chinese (one n-gram token per character).
QUESTIONS = {
    "en": "Which brand is this product from?",
    "zh-TW": "是哪個品牌？",
    "id": "Produk ini dari merek apa?",
    "vi": "Sản phẩm này của thương hiệu nào?",
    "th": "แบรนด์ไหน?",
    "pt": "De qual marca é este produto?",
    "ms": "Produk ini daripada jenama apa?",
}


def render_listing(parts: list[str]) -> str:
    """The listing as bullet lines ("- Lumeo ..."), so a brand always follows a space.

    The world's byte-level BPE makes a word a different token after a space (" Lumeo", as every option
    writes it after "C. ") than at a line's start or after "。" ("Lumeo"). Written as sentences, the
    product's brand had the options' token in 62% of the prompts only (levels 1-2 in English, Indonesian,
    Malay, Thai and Chinese, and every Chinese level, did not): no copying could answer the rest.
    """
    return "\n".join(f"- {p}" for p in parts)


def make_brand(rng: random.Random, item_id: str, level: int, lang: str) -> Item:
    cat, idx = draw_noun(rng)
    noun = NOUNS[cat][lang][idx]
    brand = rng.choice(BRANDS)
    parts = {"brand": brand, "noun": noun}
    if level >= 2:
        parts.update(model=rng.choice(MODELS), adj=pick_adjective(rng, lang, noun))
        if has_attributes(cat, idx):
            parts["color"] = rng.choice(sorted(COLORS))
    # the listing ends in the title or a brand, never in fixed wording: the question follows
    text = [render_title(lang, **parts)]
    confusable = []
    if level >= 3:
        confusable.append(LOOKALIKE[brand])
        text.insert(0, rng.choice(SELLING_POINTS[lang]))
    if level >= 4:  # a second brand in the text, not the product's: last (4) or first (5)
        other = rng.choice([b for b in BRANDS if b not in (brand, LOOKALIKE[brand])])
        phrase = OTHER_BRAND_PHRASES[lang][0 if DEPARTMENT_OF[cat] == "tech" else 1].format(x=other)
        text.insert(0 if level >= 5 else len(text), phrase)
        confusable.append(other)
    fill = [b for b in BRANDS if b not in (brand, LOOKALIKE[brand], *confusable)]
    distractors = confusable + rng.sample(fill, len(LETTERS) - 1 - len(confusable))
    rng.shuffle(distractors)
    options, letter = place_answer(rng, brand, distractors)
    prompt = f"{render_listing(text)}\n{QUESTIONS[lang]}\n{render_options(options)}"
    return mcq_item(item_id, "mcq_brand", lang, prompt, letter, level, options,
                    confusable=[LETTERS[options.index(b)] for b in confusable], brand=brand)


SUITE = register_suite(Suite(
    name="ecommerce_brand", domain="ecommerce", make=make_brand, wrong=wrong_mcq_response,
    alt=spelled_mcq_response, languages=LANGUAGES,
    description="the brand a product listing names, multiple choice A-D; distractors are look-alike "
                "brands and brands the text mentions but does not sell"))
