"""Synthetic task suites with programmatic teachers (pure Python, seeded).

Two suites for now:

- ``math/arithmetic``: integer expressions with ``+ - *`` and the usual
  precedence, e.g. ``What is 7 + 5 * 3?``; the teacher writes one step per
  operation, ``<think>5 * 3 = 15. 7 + 15 = 22.</think>22``. Difficulty 1..5
  sets the number of operations and the operand size (``LEVELS``).
- ``ecommerce/mcq_category``: the category of a synthetic product title,
  options A-D, in English or Indonesian; the (non-thinking) domain teacher
  answers with the letter alone.

Every prompt is unique across all parts of the world (eval, SFT, RL,
preferences) unless a bad row is planted on purpose.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from stages.data_filter.filters import ngram_tokens

LEAK_NGRAM = 13  # data_filter's default decontamination n-gram
MATH_VERIFIER = json.dumps({"type": "math_exact"})
MCQ_VERIFIER = json.dumps({"type": "mcq"})
LETTERS = "ABCD"

# difficulty -> (operations, smallest operand, largest operand); a factor of "*"
# is drawn from 2..9 (levels 1-3) or 2..12 (levels 4-5), and at most two "*"
# per expression keep every trace within ~60 characters.
LEVELS = {1: (1, 1, 9), 2: (2, 1, 9), 3: (2, 2, 20), 4: (3, 2, 20), 5: (3, 10, 50)}
SLIPS = (-10, -2, -1, 1, 2, 10)


@dataclass
class Item:
    id: str
    domain: str
    task: str
    language: str
    prompt: str
    reference: str
    verifier: str
    difficulty: int | None
    response: str                         # the teacher's (correct) response
    extra: dict = field(default_factory=dict)

    def prompt_row(self) -> dict:
        return {"id": self.id, "domain": self.domain, "task": self.task, "language": self.language,
                "prompt": self.prompt, "reference": self.reference, "verifier": self.verifier,
                "difficulty": self.difficulty, "pass_rate": None}

    def sft_row(self, response: str | None = None) -> dict:
        return {"id": self.id, "domain": self.domain, "task": self.task, "language": self.language,
                "prompt": self.prompt, "response": self.response if response is None else response,
                "reference": self.reference, "verifier": self.verifier}


# -- arithmetic ----------------------------------------------------------------
def math_expression(rng: random.Random, level: int) -> tuple[list[int], list[str]]:
    n_ops, lo, hi = LEVELS[level]
    mul_hi = 9 if level <= 3 else 12
    nums, ops, n_mul = [rng.randint(lo, hi)], [], 0
    for _ in range(n_ops):
        op = rng.choice("+-*") if n_mul < 2 else rng.choice("+-")
        if op == "*":
            n_mul += 1
            nums.append(rng.randint(2, mul_hi))
        else:
            nums.append(rng.randint(lo, hi))
        ops.append(op)
    return nums, ops


def render_expression(nums: list[int], ops: list[str]) -> str:
    parts = [str(nums[0])]
    for op, n in zip(ops, nums[1:]):
        parts += [op, str(n)]
    return " ".join(parts)


def solve(nums: list[int], ops: list[str], slip: tuple[int, int] | None = None) -> tuple[list[str], int]:
    """Teacher steps (``a op b = c.``), products first, then left to right.

    ``slip=(step, delta)`` makes the teacher err by ``delta`` at that step and
    carry the error on (a plausible wrong trace; its answer is always wrong,
    since every later step preserves a nonzero difference).
    """
    nums, ops, steps = list(nums), list(ops), []

    def apply(i: int) -> None:
        a, b, op = nums[i], nums[i + 1], ops[i]
        c = a * b if op == "*" else a + b if op == "+" else a - b
        if slip is not None and slip[0] == len(steps):
            c += slip[1]
        steps.append(f"{a} {op} {b} = {c}.")
        nums[i:i + 2] = [c]
        ops.pop(i)

    while "*" in ops:
        apply(ops.index("*"))
    while ops:
        apply(0)
    return steps, nums[0]


def math_response(steps: list[str], answer: int, style: str = "plain") -> str:
    if style == "narrated":  # same reasoning, other words: a true tie with "plain"
        n = len(steps)
        words = [("So" if n == 1 else "First," if i == 0 else "Finally," if i == n - 1 else "Then") for i in range(n)]
        steps = [f"{w} {s}" for w, s in zip(words, steps)]
    return f"<think>{' '.join(steps)}</think>{answer}"


def make_math(rng: random.Random, level: int, item_id: str) -> Item:
    nums, ops = math_expression(rng, level)
    steps, answer = solve(nums, ops)
    expr = render_expression(nums, ops)
    return Item(item_id, "math", "arithmetic", "en", f"What is {expr}?", str(answer), MATH_VERIFIER, level,
                math_response(steps, answer), {"nums": nums, "ops": ops, "key": ("math", expr)})


def wrong_math_response(rng: random.Random, item: Item, style: str = "plain") -> str:
    nums, ops = item.extra["nums"], item.extra["ops"]
    slip = (rng.randrange(len(ops)), rng.choice(SLIPS))
    steps, answer = solve(nums, ops, slip)
    assert str(answer) != item.reference
    return math_response(steps, answer, style)


# -- e-commerce multiple choice --------------------------------------------------
CATEGORIES: dict[str, dict[str, str]] = {
    "electronics": {"en": "Electronics", "id": "Elektronik"},
    "clothing": {"en": "Clothing", "id": "Pakaian"},
    "kitchen": {"en": "Kitchen", "id": "Dapur"},
    "sports": {"en": "Sports", "id": "Olahraga"},
    "beauty": {"en": "Beauty", "id": "Kecantikan"},
    "toys": {"en": "Toys", "id": "Mainan"},
    "books": {"en": "Books", "id": "Buku"},
    "garden": {"en": "Garden", "id": "Taman"},
    "automotive": {"en": "Automotive", "id": "Otomotif"},
    "pets": {"en": "Pets", "id": "Peliharaan"},
}
NOUNS: dict[str, dict[str, list[str]]] = {
    "electronics": {"en": ["Wireless Earbuds", "Phone Charger", "Mechanical Keyboard", "Gaming Monitor",
                           "Bluetooth Speaker", "Webcam"],
                    "id": ["Earphone Nirkabel", "Pengisi Daya", "Keyboard Mekanik", "Monitor Gaming",
                           "Speaker Bluetooth", "Webcam"]},
    "clothing": {"en": ["Denim Jacket", "Hoodie", "Slim Jeans", "Wool Sweater", "Summer Dress", "Cotton Socks"],
                 "id": ["Jaket Denim", "Hoodie", "Celana Jeans", "Sweater Wol", "Gaun Pesta", "Kaus Kaki Katun"]},
    "kitchen": {"en": ["Blender", "Nonstick Skillet", "Electric Kettle", "Toaster", "Cutting Board", "Knife Set"],
                "id": ["Blender", "Wajan Antilengket", "Ketel Listrik", "Pemanggang Roti", "Talenan", "Set Pisau"]},
    "sports": {"en": ["Dumbbell Set", "Yoga Mat", "Tennis Racket", "Football", "Treadmill", "Jump Rope"],
               "id": ["Set Dumbel", "Matras Yoga", "Raket Tenis", "Bola Sepak", "Treadmill", "Tali Skipping"]},
    "beauty": {"en": ["Matte Lipstick", "Herbal Shampoo", "Face Moisturizer", "Perfume", "Mascara",
                      "Vitamin C Serum"],
               "id": ["Lipstik Matte", "Sampo Herbal", "Pelembap Wajah", "Parfum", "Maskara", "Serum Vitamin C"]},
    "toys": {"en": ["Jigsaw Puzzle", "Dollhouse", "Stunt Kite", "Building Blocks", "Plush Bear", "Toy Robot"],
             "id": ["Puzzle Jigsaw", "Rumah Boneka", "Layangan", "Balok Susun", "Boneka Beruang", "Robot Mainan"]},
    "books": {"en": ["Mystery Novel", "Cookbook", "World Atlas", "Dictionary", "Poetry Anthology", "Biography"],
              "id": ["Novel Misteri", "Buku Resep", "Atlas Dunia", "Kamus", "Antologi Puisi", "Biografi"]},
    "garden": {"en": ["Garden Hose", "Ceramic Planter", "Leaf Rake", "Lawn Sprinkler", "Pruning Shears",
                      "Seed Starter Kit"],
               "id": ["Selang Taman", "Pot Keramik", "Garu Daun", "Penyiram Rumput", "Gunting Dahan",
                      "Kit Semai Benih"]},
    "automotive": {"en": ["Dash Cam", "Wiper Blades", "Car Vacuum", "Tire Inflator", "Seat Cover", "Jump Starter"],
                   "id": ["Kamera Dasbor", "Wiper Kaca", "Vakum Mobil", "Pompa Ban", "Sarung Jok", "Jumper Aki"]},
    "pets": {"en": ["Dog Leash", "Cat Litter", "Aquarium Filter", "Bird Cage", "Chew Toy", "Pet Bed"],
             "id": ["Tali Anjing", "Pasir Kucing", "Filter Akuarium", "Sangkar Burung", "Mainan Gigit",
                    "Kasur Hewan"]},
}
BRANDS = ["Lumio", "Zenta", "Orbit", "Kairo", "Nimbus", "Vexa", "Tundra", "Aster", "Pico", "Halo", "Rivo", "Sola"]
ADJECTIVES = {"en": ["Premium", "Compact", "Classic", "Deluxe", "Portable", "Eco", "Ultra", "Basic"],
              "id": ["Premium", "Ringkas", "Klasik", "Mewah", "Portabel", "Hemat", "Ultra", "Dasar"]}
MODELS = ["X2", "Pro", "Lite", "300", "Max", "Mini", "2024", "S7", "Plus", "Neo"]
# The template after the title is 10 n-gram tokens ("category ? a x b y c z d w",
# see data_filter): every 13-gram of an item holds at least 3 tokens of its title,
# so items of one template do not look like leaks of each other.
MCQ_TEMPLATES = {"en": "Product: {title}\nCategory?\n{options}",
                 "id": "Produk: {title}\nKategori?\n{options}"}


def mcq_prompt(language: str, title: str, options: list[str]) -> str:
    opts = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))
    return MCQ_TEMPLATES[language].format(title=title, options=opts)


def make_mcq(rng: random.Random, language: str, item_id: str, brand: str | None = None) -> Item:
    cat = rng.choice(sorted(CATEGORIES))
    title = " ".join([brand or rng.choice(BRANDS), rng.choice(ADJECTIVES[language]),
                      rng.choice(NOUNS[cat][language]), rng.choice(MODELS)])
    others = rng.sample([c for c in sorted(CATEGORIES) if c != cat], len(LETTERS) - 1)
    pos = rng.randrange(len(LETTERS))
    cats = others[:pos] + [cat] + others[pos:]
    options = [CATEGORIES[c][language] for c in cats]
    letter = LETTERS[pos]
    return Item(item_id, "ecommerce", "mcq_category", language, mcq_prompt(language, title, options), letter,
                MCQ_VERIFIER, None, letter,
                {"key": ("mcq", language, title), "title": title, "options": options, "category": cat})


def wrong_mcq_response(rng: random.Random, item: Item) -> str:
    return rng.choice([c for c in LETTERS if c != item.reference])


# -- unique item pools ------------------------------------------------------------
class ItemFactory:
    """Hands out items whose prompts are unique across the whole world.

    Multiple-choice items also share no ``LEAK_NGRAM``-gram (data_filter's
    tokens): items that differ only in brand or adjective would otherwise look
    like leaks of each other to the decontamination filter.
    """

    def __init__(self, languages: list[str]):
        self.seen: set = set()
        self.grams: set[tuple[str, ...]] = set()
        self.languages = list(languages)
        self.weights = [2] + [1] * (len(languages) - 1)

    def math(self, rng: random.Random, level: int, item_id: str) -> Item:
        for lvl in range(level, 6):  # a level whose space is used up gives way to the next one
            for _ in range(200):
                it = make_math(rng, lvl, item_id)
                if it.extra["key"] not in self.seen:
                    self.seen.add(it.extra["key"])
                    return it
        raise ValueError(f"cannot make another unique arithmetic item at difficulty >= {level}")

    def mcq(self, rng: random.Random, item_id: str, language: str | None = None) -> Item:
        lang = language or rng.choices(self.languages, weights=self.weights)[0]
        for _ in range(1000):
            it = make_mcq(rng, lang, item_id)
            toks = ngram_tokens(it.prompt)
            grams = {tuple(toks[k:k + LEAK_NGRAM]) for k in range(len(toks) - LEAK_NGRAM + 1)}
            if it.extra["key"] not in self.seen and not grams & self.grams:
                self.seen.add(it.extra["key"])
                self.grams |= grams
                return it
        raise ValueError(f"cannot make another unique e-commerce item in language {lang}")
