"""``ecommerce_category`` (ecommerce): the category of a synthetic product title, options A-D.

The (non-thinking) domain teacher answers with the letter alone. Difficulty
moves the distractors closer (level 1: three other departments; 3: one
sibling category; 4-5: two siblings) and makes the title noisier (model,
adjective, color, a selling point).

The multiple-choice helpers here (options, the answer said in each
language, the teacher's plausible mistake) serve the other MCQ suites too.
"""
from __future__ import annotations

import random

from compass.gym.mcq_choice.keywords import LATIN_LABELS
from stages.world.items import Item, verifier_spec
from stages.world.suites import Suite, register_suite
from stages.world.suites.catalog import (BRANDS, CATEGORIES, COLORS, DEPARTMENT_OF, LANGUAGES, MODELS, NOUNS,
                                         SELLING_POINTS, departments_except, draw_noun, has_attributes,
                                         pick_adjective, render_title, siblings)

LETTERS = "ABCD"
# "The answer is B." in each language: a second correct response in other words,
# which the mcq verifier must read (compass/gym/mcq_choice/extract.py: extract_choice).
ANSWER_PHRASES = {
    "en": "The answer is {letter}.",
    "zh-TW": "答案是 {letter}。",
    "id": "Jawabannya adalah {letter}.",
    "vi": "Đáp án là {letter}.",
    "th": "คำตอบคือ {letter}",
    "pt": "A resposta é {letter}.",
    "ms": "Jawapannya ialah {letter}.",
}
# The question comes first and the options last: neither template run reaches
# 13 n-gram tokens (one per character in Chinese and Thai), so every 13-gram of a
# prompt holds words of its title.
QUESTIONS = {
    "en": "Which category does this product belong to?",
    "zh-TW": "商品屬於哪個類別？",
    "id": "Produk ini termasuk kategori apa?",
    "vi": "Sản phẩm này thuộc danh mục nào?",
    "th": "หมวดไหน?",
    "pt": "A qual categoria este produto pertence?",
    "ms": "Produk ini tergolong dalam kategori apa?",
}


# -- shared multiple-choice helpers ---------------------------------------------------
def render_options(options: list[str], letters: str = LETTERS) -> str:
    return "\n".join(f"{letters[i]}. {o}" for i, o in enumerate(options))


def place_answer(rng: random.Random, answer: str, distractors: list[str], letters: str = LETTERS
                 ) -> tuple[list[str], str]:
    """Options with ``answer`` at a random position among ``distractors``; (options, its letter)."""
    pos = rng.randrange(len(letters))
    return distractors[:pos] + [answer] + distractors[pos:], letters[pos]


def mcq_item(item_id: str, task: str, language: str, prompt: str, letter: str, level: int, options: list[str],
             letters: str = LETTERS, confusable: list[str] | None = None, **extra) -> Item:
    """An MCQ item answered by the letter; ``confusable``: the letters a teacher would mistake for it.

    The verifier spec carries the option texts (labelled A, B, C... in order), so an answer that names its
    option by text ("Livros") is read as that option, not scored "no answer"."""
    if letters != LATIN_LABELS[:len(options)]:   # the labels the verifier gives a list of texts, by position
        raise ValueError(f"{item_id}: letters {letters!r} do not label {len(options)} options A, B, C...")
    spec = verifier_spec("mcq", options=list(options))
    return Item(item_id, "ecommerce", task, language, prompt, letter, spec, level, letter,
                {"options": options, "letters": letters, "confusable": confusable or [], **extra})


def wrong_mcq_response(rng: random.Random, item: Item) -> str:
    """A plausible mistake: a confusable option when there is one, else any other letter."""
    pool = [c for c in item.extra.get("confusable", []) if c != item.reference]
    return rng.choice(pool or [c for c in item.extra.get("letters", LETTERS) if c != item.reference])


def spelled_mcq_response(rng: random.Random, item: Item) -> str:
    """The same answer in other words: ``B. Audio`` or "the answer is B" in the item's language."""
    letter = item.reference
    if rng.random() < 0.5:
        return f"{letter}. {item.extra['options'][item.extra.get('letters', LETTERS).index(letter)]}"
    return ANSWER_PHRASES[item.language].format(letter=letter)


# -- the category suite ---------------------------------------------------------------
def _distractors(rng: random.Random, cat: str, level: int) -> list[str]:
    n_sib = {1: 0, 2: 0, 3: 1, 4: 2, 5: 2}[level]
    picked = rng.sample(siblings(cat), n_sib)
    far = departments_except(cat)
    if level == 1:  # one category from each of three other departments: easy to tell apart
        deps = rng.sample(sorted({DEPARTMENT_OF[c] for c in far}), 3 - n_sib)
        return picked + [rng.choice([c for c in far if DEPARTMENT_OF[c] == d]) for d in deps]
    return picked + rng.sample(far, 3 - n_sib)


def category_title(rng: random.Random, lang: str, cat: str, idx: int, level: int) -> str:
    noun = NOUNS[cat][lang][idx]
    parts = {"brand": rng.choice(BRANDS), "noun": noun}
    if level >= 2:
        parts["model"] = rng.choice(MODELS)
    if level >= 3:
        parts["adj"] = pick_adjective(rng, lang, noun)
    if level >= 4 and has_attributes(cat, idx):
        parts["color"] = rng.choice(sorted(COLORS))
    title = render_title(lang, **parts)
    if level >= 5:
        title += (" | " if lang in ("zh-TW", "th") else ", ") + rng.choice(SELLING_POINTS[lang])
    return title


def make_mcq(rng: random.Random, item_id: str, difficulty: int, language: str) -> Item:
    cat, idx = draw_noun(rng)
    title = category_title(rng, language, cat, idx, difficulty)
    distractors = _distractors(rng, cat, difficulty)
    rng.shuffle(distractors)
    cats, letter = place_answer(rng, cat, distractors)
    options = [CATEGORIES[c][language] for c in cats]
    prompt = f"{QUESTIONS[language]}\n{title}\n{render_options(options)}"
    confusable = [LETTERS[i] for i, c in enumerate(cats) if c in siblings(cat)]
    return mcq_item(item_id, "mcq_category", language, prompt, letter, difficulty, options,
                    confusable=confusable, title=title, category=cat)


SUITE = register_suite(Suite(
    name="ecommerce_category", domain="ecommerce", make=make_mcq, wrong=wrong_mcq_response,
    alt=spelled_mcq_response, languages=LANGUAGES,
    description="category of a product title, multiple choice A-D; the answer is the letter; "
                "difficulty brings sibling categories in as distractors"))
