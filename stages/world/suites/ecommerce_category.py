"""``ecommerce_category`` (ecommerce): the category of a synthetic product title, options A-D.

The (non-thinking) domain teacher answers with the letter alone.
"""
from __future__ import annotations

import random

from stages.world.items import Item, verifier_spec
from stages.world.suites import Suite, register_suite
from stages.world.suites.catalog import ADJECTIVES, BRANDS, CATEGORIES, MODELS, NOUNS

MCQ_VERIFIER = verifier_spec("mcq")
LETTERS = "ABCD"
# The template after the title is 10 n-gram tokens ("category ? a x b y c z d w",
# see data_filter): every 13-gram of an item holds at least 3 tokens of its title.
MCQ_TEMPLATES = {"en": "Product: {title}\nCategory?\n{options}",
                 "id": "Produk: {title}\nKategori?\n{options}"}


def mcq_prompt(language: str, title: str, options: list[str]) -> str:
    opts = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))
    return MCQ_TEMPLATES[language].format(title=title, options=opts)


def make_mcq(rng: random.Random, item_id: str, difficulty: int, language: str) -> Item:
    cat = rng.choice(sorted(CATEGORIES))
    title = " ".join([rng.choice(BRANDS), rng.choice(ADJECTIVES[language]),
                      rng.choice(NOUNS[cat][language]), rng.choice(MODELS)])
    others = rng.sample([c for c in sorted(CATEGORIES) if c != cat], len(LETTERS) - 1)
    pos = rng.randrange(len(LETTERS))
    cats = others[:pos] + [cat] + others[pos:]
    options = [CATEGORIES[c][language] for c in cats]
    letter = LETTERS[pos]
    return Item(item_id, "ecommerce", "mcq_category", language, mcq_prompt(language, title, options), letter,
                MCQ_VERIFIER, None, letter, {"title": title, "options": options, "category": cat})


def wrong_mcq_response(rng: random.Random, item: Item) -> str:
    return rng.choice([c for c in LETTERS if c != item.reference])


def spelled_mcq_response(rng: random.Random, item: Item) -> str:
    return f"{item.reference}. {item.extra['options'][LETTERS.index(item.reference)]}"


SUITE = register_suite(Suite(
    name="ecommerce_category", domain="ecommerce", make=make_mcq, wrong=wrong_mcq_response,
    alt=spelled_mcq_response, languages=("en", "id"),
    description="category of a product title, multiple choice A-D; the answer is the letter"))
