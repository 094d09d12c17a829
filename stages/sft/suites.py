"""Held-out suites for the SFT stage: pick eval prompts and score a model with the gym's verifiers.

Generation and scoring are ``compass.lm.suite_scoring``'s (``score_suites`` is its ``greedy_score``:
greedy decoding, one sample per prompt, each response scored by the verifier its row names,
summarized per suite as ``{suites: {name: {prompts, accuracy, mean_score, ...}}, overall_accuracy, samples}``).
"""
from __future__ import annotations

from collections import defaultdict

from compass.lm.holdout import holdout_score
from compass.lm.suite_scoring import greedy_score as score_suites  # noqa: F401  (the SFT stage's scorer)


def suite_of(row: dict) -> str:
    return row.get("suite") or row["domain"]


def select_eval_rows(rows: list[dict], domains: list[str] | None, max_per_suite: int | None) -> list[dict]:
    """The rows whose ``domain`` is in ``domains`` (None: all), at most ``max_per_suite`` per suite.

    Under a cap the rows kept are those with the lowest hash of their id (deterministic, and spread
    over the suite's tasks rather than its first rows), returned in table order."""
    wanted = [i for i, r in enumerate(rows) if domains is None or r["domain"] in domains]
    if max_per_suite is not None:
        taken: dict[str, int] = defaultdict(int)
        keep = set()
        for i in sorted(wanted, key=lambda i: (holdout_score(str(rows[i]["id"])), i)):
            s = suite_of(rows[i])
            if taken[s] < max_per_suite:
                taken[s] += 1
                keep.add(i)
        wanted = [i for i in wanted if i in keep]
    return [rows[i] for i in wanted]


def accuracy_table(summary: dict) -> dict[str, float]:
    return {name: s["accuracy"] for name, s in summary["suites"].items()}
