"""Harmful-content filters, chosen by name (``DataFilterConfig.harm_filter``).

A filter takes a list of texts normalized by ``text.normalize`` (NFKC, lower case, single
spaces) and returns, per text, a ``HarmHit`` or None. Register another one (a classifier
model, a service) with ``@HARM_FILTERS.register("name")``.

``lexicon`` (the default) applies the rules of ``harm_lexicon``: each pairs an intent
(make, synthesize, join, ...) with a harmful object (a pipe bomb, meth, ISIS, ...) in
en, zh-TW, id, vi, th, pt and ms, and is vetoed by a benign reading near the match
("bath bomb", "report", "prevention"). A one-regex prefilter (RE2 through pyarrow, over
the whole batch) picks the few texts worth running the rules on.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from compass.registry import Registry
from stages.data_filter.harm_lexicon import RULES, Rule

HARM_FILTERS = Registry("harm filter")
VETO_WINDOW = 60   # characters either side of a match where a benign reading vetoes it


@dataclass(frozen=True)
class HarmHit:
    rule: str          # e.g. "pt.weapons.make"
    category: str      # weapons, self_harm, csam, malware, drugs, terrorism
    match: str         # the text the rule matched

    def detail(self) -> str:
        return f"rule {self.rule}: {self.match!r}"


HarmFilter = Callable[[list[str]], list[HarmHit | None]]


@HARM_FILTERS.register("none")
def no_filter(texts: list[str]) -> list[HarmHit | None]:
    return [None] * len(texts)


def match_rules(text: str, rules: tuple[Rule, ...] = RULES) -> HarmHit | None:
    """The first rule that matches ``text`` (normalized) with no benign reading around the match."""
    for rule in rules:
        for m in rule.pattern.finditer(text):
            if rule.unless is not None and rule.unless.search(
                    text, max(0, m.start() - VETO_WINDOW), m.end() + VETO_WINDOW):
                continue
            return HarmHit(rule.name, rule.category, m.group())
    return None


# Every rule needs one of its anchors in the text; RE2 checks them all in one linear pass over
# the batch, then each rule's own anchor over the few texts that passed, so a text runs only
# the rules that can match it.
_PREFILTER = "|".join(f"(?:{r.anchor})" for r in RULES)


@HARM_FILTERS.register("lexicon")
def lexicon_filter(texts: list[str]) -> list[HarmHit | None]:
    out: list[HarmHit | None] = [None] * len(texts)
    if not texts:
        return out
    arr = pa.array(texts, pa.string())
    passed = pc.indices_nonzero(pc.fill_null(pc.match_substring_regex(arr, _PREFILTER), False))
    if not len(passed):
        return out
    subset = arr.take(passed)
    candidates: list[list[Rule]] = [[] for _ in range(len(subset))]
    for rule in RULES:
        for k in pc.indices_nonzero(pc.match_substring_regex(subset, rule.anchor)).to_pylist():
            candidates[k].append(rule)
    for k, i in enumerate(passed.to_pylist()):
        out[i] = match_rules(texts[i], tuple(candidates[k]))
    return out


def lookup(name: str) -> HarmFilter:
    return HARM_FILTERS.lookup(name)


LABELLED = Path(__file__).parent / "harm_eval" / "harm_eval.jsonl"


def evaluate(name: str = "lexicon", path: Path = LABELLED) -> dict:
    """Precision and recall of a filter on the labelled set: overall, per split and per language."""
    from compass.dedup.text import normalize
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    hits = lookup(name)([normalize(r["text"]) for r in rows])
    groups: dict[str, list] = defaultdict(list)
    for r, h in zip(rows, hits):
        for g in ("all", f"split {r['split']}", f"language {r['language']}"):
            groups[g].append((r["label"] == "harmful", h is not None))
    out = {}
    for g, pairs in groups.items():
        tp = sum(y and p for y, p in pairs)
        fp = sum(p and not y for y, p in pairs)
        pos = sum(y for y, _ in pairs)
        out[g] = {"rows": len(pairs), "harmful": pos, "precision": tp / (tp + fp) if tp + fp else 1.0,
                  "recall": tp / pos if pos else 1.0}
    return out


if __name__ == "__main__":   # python -m stages.data_filter.harm [filter]
    import sys
    res = evaluate(*sys.argv[1:2])
    print(f"{'':<14} {'rows':>5} {'harmful':>8} {'precision':>10} {'recall':>7}")
    for g, m in res.items():
        print(f"{g:<14} {m['rows']:>5} {m['harmful']:>8} {m['precision']:>10.3f} {m['recall']:>7.3f}")
    print(json.dumps({"precision": round(res["all"]["precision"], 4), "recall": round(res["all"]["recall"], 4)}))


__all__ = ["HARM_FILTERS", "HarmFilter", "HarmHit", "lexicon_filter", "lookup", "match_rules", "no_filter"]
