"""Assemble the world's tables from the item generators (pure Python, seeded).

Each part draws from its own ``random.Random(f"{seed}:{part}")`` stream and
eval items are made first, so the eval suites do not change when the
training sizes do. Bad rows are planted on purpose (``WorldConfig.n_planted``
of each kind) and their row indices are reported, so tests can check that
``data_filter`` quarantines exactly them:

- raw_sft: ``duplicate`` (a copy, sometimes re-spaced), ``truncated`` (a trace
  cut before ``</think>``), ``empty`` (no response), ``wrong_answer`` (a trace
  with a slip, or a wrong letter), ``contaminated`` (an eval prompt);
- raw_prompts: ``duplicate``, ``contaminated`` (an eval prompt, embedded in a
  longer question or with the brand swapped), ``no_reference``.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import pyarrow as pa

from artifacts_schema.tables import TABLE_SCHEMAS
from stages.world.config import WorldConfig
from stages.world.generate import (BRANDS, LETTERS, Item, ItemFactory, math_response, mcq_prompt, solve,
                                   wrong_math_response, wrong_mcq_response)

_ref_cols = [pa.field("reference", pa.string()), pa.field("verifier", pa.string())]
PROMPTS_SCHEMA = TABLE_SCHEMAS["prompts"]
SFT_SCHEMA = pa.schema(list(TABLE_SCHEMAS["sft_samples"]) + _ref_cols)
PREFS_SCHEMA = pa.schema(list(TABLE_SCHEMAS["preference_pairs"]) + [
    pa.field("domain", pa.string()), pa.field("task", pa.string()), pa.field("language", pa.string()),
    *_ref_cols])


@dataclass
class World:
    raw_sft: pa.Table
    raw_prompts: pa.Table
    preferences: pa.Table
    eval_prompts: pa.Table
    planted: dict[str, dict[str, list[int]]]     # table -> planted kind -> row indices

    def corpus(self) -> str:
        """Every string in every table (for the tokenizer's alphabet)."""
        out = []
        for t in (self.raw_sft, self.raw_prompts, self.preferences, self.eval_prompts):
            for col in t.columns:
                if pa.types.is_string(col.type):
                    out.extend(v for v in col.to_pylist() if v)
        return "".join(out)


def _respace(text: str) -> str:
    """The same text with other whitespace: a duplicate only normalization catches."""
    return " " + text.replace(" ", "  ", 1) + " "


class _Ids:
    def __init__(self, start_math: int, start_domain: int):
        self.n = {"math": start_math, "ecommerce": start_domain}

    def __call__(self, domain: str) -> str:
        i = self.n[domain]
        self.n[domain] += 1
        return f"{'math' if domain == 'math' else 'ecom'}-{i:05d}"


def _contaminated(variant: int, eval_math: list[Item], eval_mcq: list[Item], rng: random.Random,
                  new_id, used: set[str]) -> Item | None:
    """A copy of an eval item not copied before: exact (0: math, 1: mcq),
    embedded in a longer question (2: math) or with another brand in the title (3: mcq)."""
    first, second = (eval_math, eval_mcq) if variant % 2 == 0 else (eval_mcq, eval_math)
    pool = [it for it in first if it.id not in used] or [it for it in second if it.id not in used]
    if not pool:
        return None
    src = rng.choice(pool)
    used.add(src.id)
    item = Item(**{**src.__dict__, "id": new_id(src.domain)})
    if variant == 2 and src.domain == "math":
        item.prompt = "Quick question. " + src.prompt
    elif variant == 3 and src.domain == "ecommerce":
        brand, rest = src.extra["title"].split(" ", 1)
        other = rng.choice([b for b in BRANDS if b != brand])
        item.prompt = mcq_prompt(src.language, f"{other} {rest}", src.extra["options"])
    return item


def build_world(cfg: WorldConfig) -> World:
    seed = cfg.seed
    fac = ItemFactory(cfg.languages)

    r = random.Random(f"{seed}:eval")
    eval_math = [fac.math(r, i % 5 + 1, f"eval-math-{i:04d}") for i in range(cfg.n_eval)]
    eval_mcq = [fac.mcq(r, f"eval-ecom-{i:04d}") for i in range(cfg.n_eval)]

    r = random.Random(f"{seed}:math")
    math_items = [fac.math(r, r.randint(1, 5), f"math-{i:05d}") for i in range(cfg.n_math)]
    r = random.Random(f"{seed}:domain")
    domain_items = [fac.mcq(r, f"ecom-{i:05d}") for i in range(cfg.n_domain)]

    k_m, k_d = round(cfg.n_math * cfg.sft_fraction), round(cfg.n_domain * cfg.sft_fraction)
    sft: list[tuple[dict, str | None]] = [(it.sft_row(), None) for it in math_items[:k_m] + domain_items[:k_d]]
    prompts: list[tuple[dict, str | None]] = [(it.prompt_row(), None)
                                              for it in math_items[k_m:] + domain_items[k_d:]]

    # -- planted bad rows ---------------------------------------------------
    r = random.Random(f"{seed}:plant")
    new_id = _Ids(cfg.n_math, cfg.n_domain)
    clean_sft, clean_prompts = [row for row, _ in sft], [row for row, _ in prompts]
    leaked: set[str] = set()
    for j in range(cfg.n_planted):
        if clean_sft:
            src = r.choice(clean_sft)
            dup = {**src, "id": new_id(src["domain"]), "_copy_of": src["id"]}
            if j % 2:
                dup["prompt"] = _respace(dup["prompt"])
            sft.append((dup, "duplicate"))
        it = fac.math(r, r.randint(2, 5), new_id("math"))
        cut = it.response.index("</think>")
        sft.append((it.sft_row(it.response[:r.randint(len("<think>") + 1, cut - 1)]), "truncated"))
        it = fac.math(r, r.randint(1, 5), new_id("math")) if j % 2 == 0 else fac.mcq(r, new_id("ecommerce"))
        sft.append((it.sft_row(""), "empty"))
        if j % 2 == 0:
            it = fac.math(r, r.randint(1, 5), new_id("math"))
            sft.append((it.sft_row(wrong_math_response(r, it)), "wrong_answer"))
        else:
            it = fac.mcq(r, new_id("ecommerce"))
            sft.append((it.sft_row(wrong_mcq_response(r, it)), "wrong_answer"))
        it = _contaminated(j % 2, eval_math, eval_mcq, r, new_id, leaked)
        if it is not None:
            sft.append((it.sft_row(), "contaminated"))

        if clean_prompts:
            src = r.choice(clean_prompts)
            prompts.append(({**src, "id": new_id(src["domain"]), "prompt": _respace(src["prompt"]),
                             "_copy_of": src["id"]}, "duplicate"))
        it = _contaminated(2 + j % 2, eval_math, eval_mcq, r, new_id, leaked)
        if it is not None:
            prompts.append((it.prompt_row(), "contaminated"))
        it = fac.math(r, r.randint(1, 5), new_id("math")) if j % 2 == 0 else fac.mcq(r, new_id("ecommerce"))
        prompts.append(({**it.prompt_row(), "reference": ""}, "no_reference"))
    r.shuffle(sft)
    r.shuffle(prompts)
    _copies_after_originals(sft)
    _copies_after_originals(prompts)

    # -- preference pairs ------------------------------------------------------
    r = random.Random(f"{seed}:preferences")
    pairs = []
    for i in range(cfg.n_preference_pairs):
        pid = f"pref-{i:05d}"
        label = "TIE" if r.random() < cfg.tie_fraction else r.choice("AB")
        if i % 3 == 2:
            it = fac.mcq(r, pid)
            spelled = f"{it.reference}. {it.extra['options'][LETTERS.index(it.reference)]}"
            good = [it.reference, spelled]
            bad = wrong_mcq_response(r, it)
        else:
            it = fac.math(r, r.randint(1, 5), pid)
            good = [it.response, math_response(*_steps(it), style="narrated")]
            bad = wrong_math_response(r, it, style=r.choice(["plain", "narrated"]))
        if label == "TIE":
            r.shuffle(good)
            a, b = good
        else:
            right = r.choice(good)
            a, b = (right, bad) if label == "A" else (bad, right)
        pairs.append({"id": pid, "prompt": it.prompt, "response_a": a, "response_b": b, "label": label,
                      "domain": it.domain, "task": it.task, "language": it.language,
                      "reference": it.reference, "verifier": it.verifier})

    planted = {"raw_sft": _indices(sft), "raw_prompts": _indices(prompts)}
    return World(
        raw_sft=pa.Table.from_pylist([row for row, _ in sft], schema=SFT_SCHEMA),
        raw_prompts=pa.Table.from_pylist([row for row, _ in prompts], schema=PROMPTS_SCHEMA),
        preferences=pa.Table.from_pylist(pairs, schema=PREFS_SCHEMA),
        eval_prompts=pa.Table.from_pylist([it.prompt_row() for it in eval_math + eval_mcq], schema=PROMPTS_SCHEMA),
        planted=planted)


def _steps(item: Item) -> tuple[list[str], int]:
    return solve(item.extra["nums"], item.extra["ops"])


def _copies_after_originals(rows: list[tuple[dict, str | None]]) -> None:
    """Swap each planted copy behind its original, so the copy is the later
    (and quarantined) row; drop the bookkeeping key."""
    for k in range(len(rows)):
        row = rows[k][0]
        if "_copy_of" not in row:
            continue
        j = next(i for i, (r, _) in enumerate(rows) if r["id"] == row["_copy_of"])
        if j > k:
            rows[k], rows[j] = rows[j], rows[k]
    for k, (row, tag) in enumerate(rows):
        if "_copy_of" in row:
            rows[k] = ({c: v for c, v in row.items() if c != "_copy_of"}, tag)


def _indices(rows: list[tuple[dict, str | None]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, (_, tag) in enumerate(rows):
        if tag:
            out.setdefault(tag, []).append(i)
    return out
