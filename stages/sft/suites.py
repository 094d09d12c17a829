"""Held-out suites for the SFT stage: pick eval prompts and score a model with the gym's verifiers.

Generation and scoring are the evaluation stage's own (``generate_and_score``, ``summarize``):
greedy decoding, one sample per prompt, each response scored by the verifier its row names.
"""
from __future__ import annotations

from collections import defaultdict

from stages.sft.holdout import holdout_score


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


def score_suites(model, tok, rows: list[dict], *, max_new_tokens: int, seed: int, model_uri: str) -> dict:
    """Greedy accuracy per suite of ``model`` on ``rows`` -> the evaluation stage's ``summarize`` dict
    (``suites``: {name: {prompts, accuracy, mean_score, ...}}, ``overall_accuracy``, ``samples``)."""
    from stages.evaluation.config import EvalConfig
    from stages.evaluation.stage import generate_and_score, summarize
    cfg = EvalConfig(seed=seed, samples_per_prompt=1, max_new_tokens=max_new_tokens, temperature=0.0)
    was_training = model.training
    model.eval()
    try:
        return summarize(generate_and_score(cfg, model, tok, rows, model_uri))
    finally:
        model.train(was_training)


def accuracy_table(summary: dict) -> dict[str, float]:
    return {name: s["accuracy"] for name, s in summary["suites"].items()}
