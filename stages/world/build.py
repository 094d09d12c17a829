"""Assemble the world's tables from the suites (pure Python, seeded).

Each part draws from its own ``random.Random(f"{seed}:{part}:{suite}")``
stream and eval items are made first, so an eval suite does not change when
training sizes (or other suites) do. Bad rows are planted on purpose
(``WorldConfig.n_planted`` of each kind) and their row indices reported, so
tests can check that ``data_filter`` quarantines exactly them:

- raw_sft: ``duplicate`` (a copy, sometimes re-spaced), ``truncated`` (a trace
  cut before ``</think>``), ``empty`` (no response), ``wrong_answer`` (the
  suite teacher's plausible mistake), ``contaminated`` (an eval prompt, as is
  or inside a longer question);
- raw_prompts: ``duplicate``, ``contaminated``, ``no_reference``.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import pyarrow as pa

from artifacts_schema.tables import TABLE_SCHEMAS
from stages.world.config import WorldConfig
from stages.world.filter_guard import FilterGuard
from stages.world.items import Item
from stages.world.suites import Suite, get_suite

LEAK_NGRAM = 13          # data_filter's default decontamination n-gram

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
    documents: list[str] = field(default_factory=list)   # the base's pretraining corpus (``Item.document``)
    documents_by_suite: dict[str, int] = field(default_factory=dict)

    def texts(self):
        """Every string in every table and every document, in a fixed order (the tokenizer's training corpus)."""
        for t in (self.raw_sft, self.raw_prompts, self.preferences, self.eval_prompts):
            for col in t.columns:
                if pa.types.is_string(col.type):
                    yield from (v for v in col.to_pylist() if v)
        yield from self.documents


class ItemFactory:
    """Hands out items whose prompts are unique across the whole world, and
    training items that data_filter would not flag as eval leaks or as
    near-duplicates of each other (see ``filter_guard``)."""

    def __init__(self, languages: list[str]):
        self.seen: set[str] = set()
        self.languages = list(languages)
        self.guard = FilterGuard()

    def language(self, rng: random.Random, suite: Suite) -> str:
        langs = [lang for lang in self.languages if lang in suite.languages] or [suite.languages[0]]
        return rng.choices(langs, weights=[2] + [1] * (len(langs) - 1))[0]

    def eval_done(self, items: list[Item]) -> None:
        self.guard.set_eval(items)

    def make(self, suite: Suite, rng: random.Random, item_id: str, difficulty: int,
             language: str | None = None, is_eval: bool = False) -> Item:
        lang = language or self.language(rng, suite)
        for level in range(difficulty, 6):  # a level whose space is used up gives way to the next one
            for _ in range(200):
                it = suite.make(rng, item_id, level, lang)
                key = " ".join(it.prompt.split())
                if key in self.seen or (not is_eval and not self.guard.admit(it)):
                    continue
                self.seen.add(key)
                return it
        raise ValueError(f"suite '{suite.name}': cannot make another unique item at difficulty >= {difficulty} "
                         f"in language {lang}; lower its size in the world config")


class _Ids:
    def __init__(self, sizes: dict[str, int]):
        self.n = dict(sizes)

    def __call__(self, suite: str) -> str:
        i = self.n[suite]
        self.n[suite] += 1
        return f"{suite}-{i:05d}"


def _respace(text: str) -> str:
    """The same text with other whitespace: a duplicate only normalization catches."""
    return " " + text.replace(" ", "  ", 1) + " "


def build_world(cfg: WorldConfig) -> World:
    seed = cfg.seed
    fac = ItemFactory(cfg.languages)
    names = sorted(cfg.suites)
    suites = {name: get_suite(name) for name in names}

    evals: dict[str, list[Item]] = {}
    for name in names:
        r = random.Random(f"{seed}:eval:{name}")
        evals[name] = [fac.make(suites[name], r, f"eval-{name}-{i:04d}", i % 5 + 1, is_eval=True)
                       for i in range(cfg.suites[name].n_eval)]
    fac.eval_done([it for name in names for it in evals[name]])
    train: dict[str, list[Item]] = {}
    for name in names:
        r = random.Random(f"{seed}:train:{name}")
        train[name] = [fac.make(suites[name], r, f"{name}-{i:05d}", r.randint(1, 5))
                       for i in range(cfg.suites[name].n)]

    sft: list[tuple[dict, str | None]] = []
    prompts: list[tuple[dict, str | None]] = []
    documents: dict[str, list[str]] = {}
    for name in names:
        # the pretraining share first: with fraction 0 the SFT / RL split is what it always was
        d = round(len(train[name]) * cfg.pretrain.fraction)
        documents[name] = [it.document() for it in train[name][:d]]
        rest = train[name][d:]
        k = round(len(rest) * cfg.sft_fraction)
        sft += [(it.sft_row(), None) for it in rest[:k]]
        prompts += [(it.prompt_row(), None) for it in rest[k:]]

    planted = _plant(cfg, fac, suites, evals, sft, prompts)
    r = random.Random(f"{seed}:plant")
    r.shuffle(sft)
    r.shuffle(prompts)
    _copies_after_originals(sft)
    _copies_after_originals(prompts)

    pairs = _preference_pairs(cfg, fac, suites)
    eval_rows = [it.prompt_row() for name in names for it in evals[name]]
    return World(
        raw_sft=pa.Table.from_pylist([row for row, _ in sft], schema=SFT_SCHEMA),
        raw_prompts=pa.Table.from_pylist([row for row, _ in prompts], schema=PROMPTS_SCHEMA),
        preferences=pa.Table.from_pylist(pairs, schema=PREFS_SCHEMA),
        eval_prompts=pa.Table.from_pylist(eval_rows, schema=PROMPTS_SCHEMA),
        planted={"raw_sft": _indices(sft), "raw_prompts": _indices(prompts)} if planted else
        {"raw_sft": {}, "raw_prompts": {}},
        documents=[doc for name in names for doc in documents[name]],
        documents_by_suite={name: len(docs) for name, docs in documents.items() if docs})


def _plant(cfg: WorldConfig, fac: ItemFactory, suites: dict[str, Suite], evals: dict[str, list[Item]],
           sft: list, prompts: list) -> bool:
    """Append ``n_planted`` bad rows of each kind to ``sft`` and ``prompts`` (tagged with the kind)."""
    if not cfg.n_planted or not suites:
        return False
    r = random.Random(f"{cfg.seed}:plant")
    names = sorted(suites)
    new_id = _Ids({name: cfg.suites[name].n for name in names})
    reasoning = [n for n in names if suites[n].reasoning]
    clean_sft, clean_prompts = [row for row, _ in sft], [row for row, _ in prompts]
    leak_pool = [it for name in names for it in evals[name]]
    needs_ref = [n for n in names if _needs_reference(suites[n])]
    r.shuffle(leak_pool)

    def fresh(name: str) -> Item:
        return fac.make(suites[name], r, new_id(name), r.randint(1, 5))

    for j in range(cfg.n_planted):
        name = names[j % len(names)]
        if clean_sft:
            src = r.choice(clean_sft)
            dup = {**src, "id": new_id(src["task"] if src["task"] in suites else name), "_copy_of": src["id"]}
            if j % 2:
                dup["prompt"] = _respace(dup["prompt"])
            sft.append((dup, "duplicate"))
        if reasoning:
            it = fresh(reasoning[j % len(reasoning)])
            cut = it.response.index("</think>")
            sft.append((it.sft_row(it.response[:r.randint(len("<think>") + 1, cut - 1)]), "truncated"))
        sft.append((fresh(name).sft_row(""), "empty"))
        it = fresh(name)
        sft.append((it.sft_row(suites[name].wrong(r, it)), "wrong_answer"))
        if leak_pool:
            src = leak_pool.pop()
            item = Item(**{**src.__dict__, "id": new_id(src.id.split("-")[1])})
            if j % 2:
                item.prompt = "Quick question. " + src.prompt
            sft.append((item.sft_row(), "contaminated"))

        if clean_prompts:
            src = r.choice(clean_prompts)
            prompts.append(({**src, "id": new_id(name), "prompt": _respace(src["prompt"]),
                             "_copy_of": src["id"]}, "duplicate"))
        if leak_pool:
            src = leak_pool.pop()
            item = Item(**{**src.__dict__, "id": new_id(src.id.split("-")[1])})
            if j % 2 == 0:
                item.prompt = "Quick question. " + src.prompt
            prompts.append((item.prompt_row(), "contaminated"))
        if needs_ref:
            prompts.append(({**fresh(needs_ref[j % len(needs_ref)]).prompt_row(), "reference": ""}, "no_reference"))
    return True


def _needs_reference(suite: Suite) -> bool:
    from compass.gym.score import needs_reference
    return needs_reference(suite.make(random.Random(0), "probe", 1, suite.languages[0]).verifier)


def _preference_pairs(cfg: WorldConfig, fac: ItemFactory, suites: dict[str, Suite]) -> list[dict]:
    """A/B/TIE pairs: a correct response against the teacher's mistake, or two
    correct responses in other words (a true tie), from suites with an ``alt``."""
    r = random.Random(f"{cfg.seed}:preferences")
    names = [n for n in sorted(suites) if suites[n].alt is not None]
    pairs = []
    for i in range(cfg.n_preference_pairs if names else 0):
        pid = f"pref-{i:05d}"
        label = "TIE" if r.random() < cfg.tie_fraction else r.choice("AB")
        suite = suites[names[i % len(names)]]
        it = fac.make(suite, r, pid, r.randint(1, 5))
        good = [it.response, suite.alt(r, it)]
        if label == "TIE":
            r.shuffle(good)
            a, b = good
        else:
            right, bad = r.choice(good), suite.wrong(r, it)
            a, b = (right, bad) if label == "A" else (bad, right)
        pairs.append({"id": pid, "prompt": it.prompt, "response_a": a, "response_b": b, "label": label,
                      "domain": it.domain, "task": it.task, "language": it.language,
                      "reference": it.reference, "verifier": it.verifier})
    return pairs


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
