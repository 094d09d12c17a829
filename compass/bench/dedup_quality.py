"""Planted dedup and decontamination benchmark: recall and false-positive rate per category.

A seeded corpus of RL-prompt rows (50-150 words each) is run through the real data_filter
stage. Planted, each in its own category:

- near-duplicate positives: a later copy of an earlier row, exact or edited at a stated
  level (case/spacing, punctuation, 5% or 10% of words substituted, 5% adjacent swaps,
  5% deleted + 5% inserted, sentences reordered, sentences added, a mix); must be
  quarantined as ``duplicate`` or ``near_duplicate``;
- contamination positives: an eval item copied verbatim, its content embedded in other
  text, re-punctuated, with two words changed, or a short eval question inside a sentence;
  must be quarantined as ``contaminated``;
- negatives: unrelated rows, items sharing a template with siblings (60-75% of their words
  in common), rows written in an eval suite's template with new content, arithmetic
  questions one number away from an eval question; must be kept.

Headline: ``recall`` over all positives, ``false_positive_rate`` over all negatives. A
``sub_20`` row (20% of words substituted) shows where the method stops; it is beyond the
stated level and left out of the headline. ``--sweep`` reruns with other thresholds and
signature sizes; the Bloom row is datasketch's ``MinHashLSHBloom`` (no verification) on
the same rows, for comparison.
"""
from __future__ import annotations

import argparse
import json
import logging
import random
import tempfile
import time
from collections import Counter, defaultdict

import pyarrow as pa


# -- seeded synthetic English text -------------------------------------------------------
# A document is a list of sentences, a sentence a list of words plus its end mark, so edits
# (substitute, swap, reorder, re-punctuate) are exact and their level is known. Sentences come
# from ~40 frames with large slot pools, so two unrelated documents share little beyond common
# phrases, as real text does. compass.bench.data_filter uses the same generator.
NAMES = ("Ana Budi Chen Dara Eko Fatima Gita Hana Ivan Joko Kiran Lina Maya Nadia Omar Putri Quinn Rosa Sari Tomas "
         "Umar Vera Wati Xavier Yuki Zara Arif Bella Citra Dewi Elena Farid Gilang Hugo Indah Jasmine Kevin Laila "
         "Marco Nina Oscar Priya Rizky Sofia Tariq Ulla Victor Wulan Yusuf Zaki Alma Bima Clara Dimas Erin "
         "Fajar").split()
CITIES = ("Jakarta Surabaya Bandung Medan Taipei Hanoi Bangkok Lisbon Porto Recife Manila Penang Ipoh Chiang Mai "
          "Danang Hue Cebu Kuching Malang Solo Bogor Depok Semarang Makassar Denpasar Yogyakarta Salvador Curitiba "
          "Fortaleza Belem Tainan Kaohsiung Hsinchu Taichung Haiphong Cantho Pattaya Phuket Krabi").split()
NOUNS = ("apple notebook bicycle kettle lamp backpack blender camera charger desk drone printer router sofa tablet "
         "umbrella wallet watch jacket helmet mirror pillow rice noodle coffee tea sugar flour battery cable engine "
         "garden kitchen window door roof bridge river market station library museum school hospital office factory "
         "report budget invoice contract schedule meeting project deadline customer supplier order package delivery "
         "recipe sauce oven pan spoon bowl plate cup bottle jar basket shelf drawer carpet curtain blanket towel "
         "soap shampoo lotion perfume shoe sandal sock glove scarf hat belt ring necklace bracelet phone laptop "
         "keyboard mouse monitor speaker headset microphone sensor valve pump filter motor gear wheel tire brake "
         "seat mirror ticket passport visa hotel airport flight train bus taxi harbor island mountain forest "
         "valley lake beach desert village street road tunnel tower stadium theater garden fence gate").split()
ADJS = ("small large bright quiet heavy light cheap expensive modern classic simple complex durable fragile warm "
        "cold fresh dry wet soft hard smooth rough clean dirty busy calm fast slow early late new old young "
        "careful honest friendly strict patient curious brave lazy noisy tidy narrow wide deep shallow sweet "
        "bitter salty spicy sour green blue red yellow black white silver golden wooden plastic metal glass "
        "portable compact premium basic reliable efficient flexible sturdy elegant colorful seasonal local "
        "foreign digital manual automatic weekly monthly annual daily rare common popular useful").split()
VERBS = ("check clean repair paint move carry open close cook bake wash fold pack ship sell buy order count "
         "measure test build design plan write read review sign print scan send share store label sort "
         "replace adjust connect install update charge heat cool mix pour stir cut slice peel boil fry "
         "grill serve deliver return collect deliver inspect organize schedule cancel confirm approve "
         "translate explain compare record publish upload download train teach visit").split()
ROLES = ("teacher driver farmer nurse engineer cook baker tailor cashier manager clerk student pilot guide "
         "designer writer editor painter plumber mechanic doctor pharmacist lawyer banker trader vendor "
         "courier guard librarian scientist researcher analyst volunteer coach referee musician").split()
PLACES = ("market shop warehouse kitchen garage office bakery pharmacy clinic library station harbor depot "
          "workshop studio classroom cafe restaurant hotel airport mall factory farm garden").split()
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday morning evening weekend".split()
UNITS = "days weeks months hours minutes years kilometers liters kilograms boxes".split()

FRAMES = (
    "{name} bought {num} {noun}s at the {place} in {city} last {day}",
    "The {adj} {noun} in the {place} needs to be {verb}ed before {day}",
    "If you want to {verb} the {noun}, start with the {noun2} and keep it {adj}",
    "Most {role}s agree that a {adj} {noun} works better than a {adj2} one",
    "After {num} {unit} the {noun} was still {adj}, which surprised the {role}",
    "Please {verb} the {noun} and send a short note to the {role} in {city}",
    "Our {role} in {city} asked whether the {noun} could be {verb}ed by {day}",
    "A {adj} {noun} usually costs about {num} dollars at a {place}",
    "{name} and {name2} decided to {verb} the {noun} together on {day}",
    "The {place} near the {noun2} opens at {num} and closes when the {role} leaves",
    "Why does the {noun} become {adj} when you {verb} it for {num} {unit}",
    "Remember to {verb} the {noun} first, otherwise the {noun2} gets {adj}",
    "In {city}, people often {verb} their {noun}s before the {adj} season starts",
    "The report says {num} percent of {role}s prefer a {adj} {noun}",
    "{name} wrote that the {noun} from {city} arrived {adj} and slightly {adj2}",
    "To {verb} a {noun}, you need a {adj} {noun2} and about {num} {unit}",
    "The {role} explained how the {noun} and the {noun2} are connected",
    "Every {day} the {role} checks whether the {noun} is {adj} enough",
    "We moved the {adj} {noun} from the {place} to the {place2} near {city}",
    "It took {name} {num} {unit} to {verb} the {adj} {noun} properly",
    "The new {noun} is {adj} but the old {noun2} is more {adj2}",
    "Customers in {city} keep asking for a {adj} {noun} that is easy to {verb}",
    "How many {noun}s can a {role} {verb} in {num} {unit}",
    "The {adj} {noun2} was left in the {place} after the {role} went home",
    "Before you {verb} anything, read the note about the {noun} from {name}",
    "{name} thinks the {noun} should be {adj}, while {name2} wants it {adj2}",
    "The price of a {noun} in {city} rose by {num} percent this year",
    "A {role} from {city} won the prize for the most {adj} {noun}",
    "You can {verb} the {noun} at home, but a {role} does it faster",
    "The {noun} broke because nobody remembered to {verb} the {noun2}",
    "During the {adj} {day} the {place} sold {num} {noun}s in an hour",
    "Ask the {role} to {verb} the {noun} and to label the {noun2}",
    "The {noun} that {name} ordered from {city} is {adj} and {adj2}",
    "Some {role}s {verb} a {noun} every {day} to keep it {adj}",
    "Put the {noun} next to the {noun2} so the {role} can find it",
    "The {adj} {noun} and the {adj2} {noun2} were both sold out by {day}",
    "{name} asked {name2} how long it takes to {verb} a {noun}",
    "Travelers from {city} often bring a {adj} {noun} as a gift",
    "The {role} said the {noun} must stay {adj} for at least {num} {unit}",
    "Nobody in the {place} knew where the {adj} {noun} came from",
)

# Documents that share a template (the hard negatives): fixed text with many slots spread through it.
TEMPLATES = (
    ("Introducing the {brand} {noun}, a {adj} {noun2} made for every {role}. It comes with a {adj2} {noun3}, "
     "a {noun4} and a {num}-month warranty. Customers who bought it in {city} say it is {adj3} and easy to "
     "{verb}. Order today and get free shipping to {city2}; the offer ends on {day}. The {noun} is available in "
     "{color} and {color2}, and every unit is tested in our {city3} workshop before it ships."),
    ("{name} has {num} {noun}s and {num2} {noun2}s. On {day} {name} gives {num3} {noun}s to {name2}, who lives "
     "in {city}, and then buys {num4} more at the {place}. Later {name2} returns {num5} of them because they "
     "were {adj}. How many {noun}s does {name} have at the end of the day, and how many {noun2}s are left?"),
    ("Dear {name}, thank you for contacting our support team about your {adj} {noun}. We are sorry that the "
     "{noun2} stopped working after {num} {unit}. Please {verb} the {noun3} and send us a photo of the "
     "{noun4}. Our {role} in {city} will review it within {num2} days and arrange a {adj2} replacement. "
     "Kind regards, {name2} from the {brand} customer care team."),
    ("Task: read the note from the {role} and answer the question. Note: the {adj} {noun} in the {place} must "
     "be {verb}ed every {day}, and the {noun2} must stay {adj2} for {num} {unit}. {name} forgot to {verb2} the "
     "{noun3} last week. Question: what should {name2} do first when the {noun4} becomes {adj3}? Answer in one "
     "sentence."),
)
# Openers and adjectives sprinkled into frames keep unrelated texts from sharing long word runs,
# as unrelated real texts rarely do.
OPENERS = ("Yesterday", "Last year", "As usual", "In the end", "Surprisingly", "According to the notes", "Today",
           "For now", "In most cases", "On the other hand", "At first", "Later", "By the way", "In fact", "Again",
           "Since then", "Luckily", "Sadly", "Once again", "In short", "After lunch", "Before noon", "Meanwhile",
           "Even so", "Still", "Honestly", "Apparently", "Of course", "In theory", "In practice", "Right now",
           "This week", "Next month", "Every year", "Sometimes", "Often", "Rarely", "Usually", "At night", "Then")
BRANDS = "Lumio Zenta Orbit Kairo Nimbus Vexa Tundra Aster Pico Halo Rivo Sola Miro Telu Kova Brisa".split()
COLORS = "black white red blue green grey silver gold pink orange purple brown".split()


class Synth:
    """Seeded generator of documents, template items and edits."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def _noun(self) -> str:
        r = self.rng
        return f"{r.choice(ADJS)} {r.choice(NOUNS)}" if r.random() < 0.4 else r.choice(NOUNS)

    def _fill(self, frame: str, sprinkle: bool = True) -> list[str]:
        r = self.rng
        noun = self._noun if sprinkle else (lambda: r.choice(NOUNS))
        vals = {"name": r.choice(NAMES), "name2": r.choice(NAMES), "city": r.choice(CITIES),
                "city2": r.choice(CITIES), "city3": r.choice(CITIES), "noun": noun(),
                "noun2": noun(), "noun3": noun(), "noun4": noun(),
                "adj": r.choice(ADJS), "adj2": r.choice(ADJS), "adj3": r.choice(ADJS), "verb": r.choice(VERBS),
                "verb2": r.choice(VERBS), "role": r.choice(ROLES), "place": r.choice(PLACES),
                "place2": r.choice(PLACES), "day": r.choice(DAYS), "unit": r.choice(UNITS),
                "brand": r.choice(BRANDS), "color": r.choice(COLORS), "color2": r.choice(COLORS),
                **{f"num{k}": str(r.randint(2, 99)) for k in ("", "2", "3", "4", "5")}}
        words = frame.format(**vals).split()
        if sprinkle and r.random() < 0.35:
            words = r.choice(OPENERS).split() + [words[0] if words[0] in NAMES else words[0].lower()] + words[1:]
        return words

    def sentence(self) -> list[str]:
        return self._fill(self.rng.choice(FRAMES))

    def document(self, lo: int = 50, hi: int = 150) -> list[list[str]]:
        """Sentences (word lists) adding up to ``lo``..``hi`` words."""
        target, doc, n = self.rng.randint(lo, hi), [], 0
        while n < target:
            s = self.sentence()
            doc.append(s)
            n += len(s)
        return doc

    def template_item(self, template: str) -> list[list[str]]:
        """One filled copy of a template, split into sentences."""
        words = self._fill(template, sprinkle=False)
        doc, cur = [], []
        for w in words:
            cur.append(w.rstrip(".?;:"))
            if w[-1] in ".?;:":
                doc.append(cur)
                cur = []
        if cur:
            doc.append(cur)
        return doc

    # -- rendering and edits -------------------------------------------------------
    @staticmethod
    def render(doc: list[list[str]]) -> str:
        out = []
        for s in doc:
            words = [w.rstrip(",.;:?!") for w in s]
            out.append(" ".join(words).rstrip() + ".")
        return " ".join(out)

    def render_noisy(self, doc: list[list[str]]) -> str:
        """The same words with other punctuation, spacing and case: token-identical, not byte-identical."""
        r, out = self.rng, []
        for s in doc:
            words = [w.rstrip(",.;:?!") for w in s]
            words = [w.upper() if r.random() < 0.1 else (w.lower() if r.random() < 0.2 else w) for w in words]
            seps = [r.choice([" ", " ", " ", ", ", "  ", "\n", " — ", "; "]) for _ in words[1:]]
            text = words[0] + "".join(sep + w for sep, w in zip(seps, words[1:]))
            out.append(text + r.choice([".", "!", ";", "...", " ."]))
        return r.choice([" ", "\n", "  "]).join(out)

    def substitute(self, doc, fraction: float):
        """Replace ``fraction`` of the words (at random positions) by other words."""
        flat = [(i, j) for i, s in enumerate(doc) for j in range(len(s))]
        k = max(1, round(fraction * len(flat)))
        new = [list(s) for s in doc]
        for i, j in self.rng.sample(flat, k):
            new[i][j] = self.rng.choice(NOUNS + ADJS + VERBS)
        return new

    def swap_adjacent(self, doc, fraction: float):
        """Swap ``fraction`` of the words with their right neighbour."""
        new = [list(s) for s in doc]
        flat = [(i, j) for i, s in enumerate(new) for j in range(len(s) - 1)]
        for i, j in self.rng.sample(flat, max(1, round(fraction * len(flat)))):
            new[i][j], new[i][j + 1] = new[i][j + 1], new[i][j]
        return new

    def insert_delete(self, doc, fraction: float):
        """Delete ``fraction`` of the words and insert as many new ones."""
        new = [list(s) for s in doc]
        n = sum(len(s) for s in new)
        k = max(1, round(fraction * n))
        for _ in range(k):
            s = self.rng.choice([s for s in new if len(s) > 2])
            del s[self.rng.randrange(len(s))]
        for _ in range(k):
            s = self.rng.choice(new)
            s.insert(self.rng.randrange(len(s) + 1), self.rng.choice(NOUNS + ADJS))
        return new

    def reorder(self, doc):
        new = [list(s) for s in doc]
        while len(new) > 1 and new == doc:
            self.rng.shuffle(new)
        return new

    def extend(self, doc, sentences: int = 1):
        """Add whole new sentences at the start or the end (boilerplate around a copy)."""
        new = [list(s) for s in doc]
        for _ in range(sentences):
            if self.rng.random() < 0.5:
                new.insert(0, self.sentence())
            else:
                new.append(self.sentence())
        return new


# -- the planted corpus --------------------------------------------------------------------
NEAR = {   # category -> edit
    "exact": lambda s, d: d,
    "case_space": None,           # rendered with other case and spacing only
    "punctuation": None,          # other punctuation, case and spacing
    "sub_5": lambda s, d: s.substitute(d, 0.05),
    "sub_10": lambda s, d: s.substitute(d, 0.10),
    "swap_5": lambda s, d: s.swap_adjacent(d, 0.05),
    "insdel_5": lambda s, d: s.insert_delete(d, 0.05),
    "reorder": lambda s, d: s.reorder(d),
    "extend": lambda s, d: s.extend(d, s.rng.choice([1, 2])),
    "mixed": lambda s, d: s.reorder(s.substitute(d, 0.05)),
    "sub_15": lambda s, d: s.substitute(d, 0.15),
    "sub_20": lambda s, d: s.substitute(d, 0.20),
}
# Past what word-shingle Jaccard can separate: edits of 15-20% of the words look like distinct
# items, and siblings of a template with few slots look like copies (see docs/data_filter.md).
BEYOND = {"sub_15", "sub_20", "few_slot_siblings"}
FEW_SLOT_TEMPLATES = (
    "Write a Python function {fname}(items) that returns the items of the list whose length is greater than {num}, "
    "keeping their original order. The function must not modify the input list, must run in linear time, and must "
    "return an empty list when nothing matches. Include a docstring and two doctests.",
    "You are a shopping assistant. The customer wants a {adj} {noun} for a trip to {city} next week. Recommend "
    "exactly one product from the catalog below, explain the choice in two sentences, and mention the price and "
    "the delivery time. Keep the answer friendly and short.",
)
CONTAM = ("verbatim", "embedded", "noisy", "edited", "short_embedded")
SUITE_HEADERS = (
    ("The following is a reading comprehension question from the customer service exam. Read the passage "
     "carefully and answer with one short sentence.", "Give only the final answer and do not explain your "
     "reasoning or repeat the question."),
    ("You are an assistant for an online store. Study the situation described below and decide what the "
     "store should do next.", "Reply with the action the store should take, in English, in at most twenty "
     "words."),
    ("Answer the following question about the text. Think about the details of the text before you answer "
     "and be precise.", "Write the answer on a single line and do not include any other text in the reply."),
)
PROMPT_COLS = dict(domain="bench", task="dedup", language="en", reference="A", verifier='{"type": "mcq"}',
                   difficulty=None, pass_rate=None)


def _arith(rng: random.Random) -> tuple[int, int, int]:
    return rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 9)


def build(seed: int = 0, n_background: int = 3000, per_category: int = 150, families: int = 4,
          family_size: int = 40, eval_per_suite: int = 120, contam_per_category: int = 60) -> dict:
    """The planted corpus: training rows (with their category and expectation) and eval rows."""
    s = Synth(seed)
    rng = s.rng
    rows: list[tuple] = []    # (text, category, expected: "keep" | "dup" | "contaminated"[, reference])
    pairs: list[tuple[str, str, str]] = []    # (original, variant, category): originals go first

    for _ in range(n_background):
        rows.append((s.render(s.document()), "background", "keep"))
    for cat, edit in NEAR.items():
        for _ in range(per_category):
            doc = s.document()
            if cat == "case_space":
                variant = " ".join(w.upper() if rng.random() < 0.15 else w for w in s.render(doc).split(" "))
                variant = variant.replace(" ", rng.choice(["  ", " \n"]), 3)
            elif cat == "punctuation":
                variant = s.render_noisy(doc)
            else:
                variant = s.render(edit(s, doc))
            pairs.append((s.render(doc), variant, cat))
    for t in range(families):
        template = TEMPLATES[t % len(TEMPLATES)]
        for _ in range(family_size):
            rows.append((s.render(s.template_item(template)), f"template_{t}", "keep"))
    # few-slot siblings: with their own reference answers (the reference guard keeps them apart), without
    for cat, with_ref in (("few_slot_siblings_ref", True), ("few_slot_siblings", False)):
        for t in FEW_SLOT_TEMPLATES:
            for _ in range(family_size):
                text = t.format(fname=f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}s", num=rng.randint(2, 20),
                                adj=rng.choice(ADJS), noun=rng.choice(NOUNS), city=rng.choice(CITIES))
                rows.append((text, cat, "keep", f"answer-{rng.random():.12f}") if with_ref else (text, cat, "keep"))

    # eval suites: a shared header and footer around each item's own content, plus short arithmetic
    evals, contents = [], []
    for k, (head, foot) in enumerate(SUITE_HEADERS):
        for _ in range(eval_per_suite):
            content = s.render(s.document(40, 80))
            contents.append((k, content))
            evals.append({"id": f"eval-{k}-{len(evals)}", "prompt": f"{head}\n\n{content}\n\n{foot}",
                          "domain": "bench", "task": f"suite{k}"})
    asked = set()
    for _ in range(eval_per_suite):
        a, b, c = _arith(rng)
        asked.add((a, b, c))
        evals.append({"id": f"eval-arith-{len(evals)}", "prompt": f"What is {a} + {b} * {c}?", "domain": "bench",
                      "task": "arith"})
    long_items = [e for e in evals if not e["task"] == "arith"]
    short_items = [e for e in evals if e["task"] == "arith"]
    rng.shuffle(long_items)
    pick = iter(long_items)
    content_of = {e["id"]: c for e, (_, c) in zip([e for e in evals if e["task"] != "arith"], contents)}
    for cat in CONTAM:
        for _ in range(contam_per_category):
            if cat == "short_embedded":
                e = rng.choice(short_items)
                text = f"{s.render([s.sentence()])} {e['prompt']} {s.render([s.sentence()])}"
            else:
                e = next(pick)
                if cat == "verbatim":
                    text = e["prompt"]
                elif cat == "embedded":
                    text = f"{s.render([s.sentence(), s.sentence()])} {content_of[e['id']]} {s.render([s.sentence()])}"
                elif cat == "noisy":
                    words = e["prompt"].split()
                    text = " ".join(w.lower() if rng.random() < 0.5 else w.upper() for w in words).replace(".", " ;")
                else:   # edited: two words of the content changed
                    words = content_of[e["id"]].split()
                    for j in rng.sample(range(len(words)), 2):
                        words[j] = rng.choice(["river", "blue", "quickly", "seven", "market"])
                    text = " ".join(words)
            rows.append((text, f"contam_{cat}", "contaminated"))
    for k, (head, foot) in enumerate(SUITE_HEADERS):
        for _ in range(50):
            rows.append((f"{head}\n\n{s.render(s.document(40, 80))}\n\n{foot}", "contam_same_template", "keep"))
    n_near_miss = 0
    while n_near_miss < 150:
        a, b, c = _arith(rng)
        if (a, b, c) in asked:
            continue
        n_near_miss += 1
        rows.append((f"{s.render([s.sentence()])} What is {a} + {b} * {c}?", "contam_arith_other", "keep"))

    # shuffle, then put each variant somewhere after its original
    rng.shuffle(rows)
    for orig, variant, cat in pairs:
        i = rng.randrange(len(rows) + 1)
        rows.insert(i, (orig, "near_original", "keep"))
        rows.insert(rng.randrange(i + 1, len(rows) + 1), (variant, cat, "dup"))
    return {"rows": rows, "evals": evals}


def commit(store, kind: str, name: str, table: pa.Table):
    """Commit a table as a foreign producer would (the benchmark's inputs)."""
    w = store.begin(kind, name, "bench", producer="bench", stage="bench", config_fingerprint="bench",
                    code_version="bench")
    w.write_table(table)
    return w.commit()


def run_filter(corpus: dict, cfg, store_dir: str) -> tuple[list[str | None], float]:
    """Each row's quarantine reason (None = kept) from the real data_filter stage, and its wall time."""
    from artifacts_schema.tables import TABLE_SCHEMAS
    from compass.store.store import ArtifactStore
    from stages.data_filter import stage as data_filter

    store = ArtifactStore(store_dir)
    prompts = pa.Table.from_pylist([{**PROMPT_COLS, "id": f"r{i}", "prompt": r[0], "reference": r[3] if len(r) > 3
                                     else "A"} for i, r in enumerate(corpus["rows"])], schema=TABLE_SCHEMAS["prompts"])
    evals = pa.Table.from_pylist([{**PROMPT_COLS, **e} for e in corpus["evals"]], schema=TABLE_SCHEMAS["prompts"])
    inputs = {"prompts": commit(store, "prompts", "bench_rows", prompts),
              "eval": commit(store, "prompts", "bench_eval", evals),
              "sft": commit(store, "sft_samples", "bench_sft", TABLE_SCHEMAS["sft_samples"].empty_table())}
    t0 = time.perf_counter()
    res = data_filter.run(cfg, inputs, store)
    wall = time.perf_counter() - t0
    reasons: list[str | None] = [None] * prompts.num_rows
    for r in store.open(res.outputs["quarantine"]).read_table().to_pylist():
        reasons[r["row_index"]] = r["reason"]
    return reasons, wall


def score(corpus: dict, reasons: list[str | None]) -> dict:
    """Per category: rows, flagged, rate; headline recall and false-positive rate."""
    per: dict[str, Counter] = defaultdict(Counter)
    for (_, cat, expect, *_), why in zip(corpus["rows"], reasons):
        ok = {"dup": why in ("duplicate", "near_duplicate"), "contaminated": why == "contaminated",
              "keep": why is None}[expect]
        per[cat]["rows"] += 1
        per[cat]["correct"] += ok
        per[cat]["expect_" + expect] += 1
    pos = [c for c in per if ("expect_dup" in per[c] or "expect_contaminated" in per[c]) and c not in BEYOND]
    neg = [c for c in per if "expect_keep" in per[c] and c not in BEYOND]
    tp = sum(per[c]["correct"] for c in pos)
    n_pos = sum(per[c]["rows"] for c in pos)
    fp = sum(per[c]["rows"] - per[c]["correct"] for c in neg)
    n_neg = sum(per[c]["rows"] for c in neg)
    return {"per_category": {c: dict(per[c]) for c in sorted(per)}, "recall": tp / n_pos,
            "false_positive_rate": fp / n_neg, "positives": n_pos, "negatives": n_neg}


def bloom_baseline(corpus: dict, cfg) -> dict:
    """datasketch's MinHashLSHBloom (band collisions only, no verification) on the same signatures."""
    import warnings

    from datasketch import MinHash, MinHashLSHBloom

    from compass.dedup.near_dup import shingles, signatures
    from compass.dedup.text import key_of, normalize, tokens_of
    reasons: list[str | None] = []
    seen: set[int] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lsh = MinHashLSHBloom(threshold=cfg.near_dup_threshold, num_perm=cfg.minhash_num_perm,
                              n=len(corpus["rows"]), fp=1e-6)
    for text, *_ in corpus["rows"]:
        norm = normalize(text)
        key = key_of(norm)
        if key in seen:
            reasons.append("duplicate")
            continue
        seen.add(key)
        toks = tokens_of(norm)
        if len(toks) < cfg.near_dup_min_tokens:
            reasons.append(None)
            continue
        m = MinHash(num_perm=cfg.minhash_num_perm, hashvalues=signatures([shingles(toks, cfg.shingle_size)],
                                                                          cfg.minhash_num_perm)[0],
                    scheme="affine32", seed=1)
        if lsh.query(m):
            reasons.append("near_duplicate")
        else:
            lsh.insert(m)
            reasons.append(None)
    out = score({"rows": [r for r in corpus["rows"] if r[2] != "contaminated"]},
                [w for w, r in zip(reasons, corpus["rows"]) if r[2] != "contaminated"])
    out["bands_rows"] = (lsh.b, lsh.r)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench dedup-quality")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every category's size")
    ap.add_argument("--sweep", action="store_true", help="also rerun with other thresholds and num_perm")
    args = ap.parse_args(argv)
    logging.getLogger("compass").setLevel(logging.WARNING)
    from stages.data_filter.config import DataFilterConfig
    k = args.scale
    corpus = build(args.seed, n_background=int(3000 * k), per_category=max(1, int(150 * k)),
                   family_size=max(2, int(40 * k)), eval_per_suite=max(10, int(120 * k)),
                   contam_per_category=max(1, int(60 * k)))
    cfg = DataFilterConfig()
    with tempfile.TemporaryDirectory(prefix="compass-dedupq-") as tmp:
        reasons, wall = run_filter(corpus, cfg, f"{tmp}/store")
        res = score(corpus, reasons)
        sweep = []
        if args.sweep:
            for i, (th, perm, bands) in enumerate([(0.3, 256, 64), (0.5, 256, 64), (0.6, 256, 64), (0.42, 128, 32),
                                                   (0.42, 128, 42)]):
                c = cfg.model_copy(update=dict(near_dup_threshold=th, minhash_num_perm=perm, minhash_bands=bands))
                r = score(corpus, run_filter(corpus, c, f"{tmp}/sweep{i}")[0])
                sweep.append((th, perm, bands, r["recall"], r["false_positive_rate"]))
    bloom = bloom_baseline(corpus, cfg)

    print(f"{len(corpus['rows'])} rows, {len(corpus['evals'])} eval prompts; threshold {cfg.near_dup_threshold}, "
          f"{cfg.minhash_num_perm} permutations, {cfg.minhash_bands} bands, {cfg.shingle_size}-token shingles; "
          f"stage wall {wall:.1f}s")
    print(f"{'category':<24} {'expected':<13} {'rows':>6} {'correct':>8} {'rate':>8}   {'bloom':>8}")
    for cat, c in res["per_category"].items():
        expect = next(k[7:] for k in c if k.startswith("expect_"))
        b = bloom["per_category"].get(cat)
        brate = f"{b['correct'] / b['rows']:.4f}" if b else "-"
        note = "  (beyond the stated level)" if cat in BEYOND else ""
        print(f"{cat:<24} {expect:<13} {c['rows']:>6} {c['correct']:>8} {c['correct'] / c['rows']:>8.4f}   "
              f"{brate:>8}{note}")
    print(f"recall {res['recall']:.4f} over {res['positives']} positives; false-positive rate "
          f"{res['false_positive_rate']:.4f} over {res['negatives']} negatives")
    print(f"bloom (datasketch MinHashLSHBloom, b={bloom['bands_rows'][0]} r={bloom['bands_rows'][1]}, no "
          f"verification; duplicates only): recall {bloom['recall']:.4f}, false-positive rate "
          f"{bloom['false_positive_rate']:.4f}")
    for th, perm, bands, rec, fpr in sweep:
        print(f"sweep: threshold {th} num_perm {perm} bands {bands}: recall {rec:.4f}, false-positive rate {fpr:.4f}")
    print(json.dumps({"bench": "dedup-quality", "recall": round(res["recall"], 4),
                      "false_positive_rate": round(res["false_positive_rate"], 4), "positives": res["positives"],
                      "negatives": res["negatives"], "bloom_recall": round(bloom["recall"], 4),
                      "bloom_false_positive_rate": round(bloom["false_positive_rate"], 4),
                      "threshold": cfg.near_dup_threshold, "num_perm": cfg.minhash_num_perm,
                      "bands": cfg.minhash_bands, "shingle_size": cfg.shingle_size}))
    return 0
