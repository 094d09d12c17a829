"""Held-out reward: sampled completions of fixed held-out prompts (never the training reward)."""
from __future__ import annotations

from typing import Sequence

from compass.bench.learning_efficiency.scoring import sample_and_score
from compass.bench.learning_efficiency.stats import held_out_se
from compass.rl.sampling.prompt_data import RLPrompt

EVAL_SEED = 10_000          # every evaluation of every run draws with the same seeds: common random numbers


def evaluate(model, tok, prompts: Sequence[RLPrompt], *, samples: int, max_new_tokens: int,
             groups: dict[str, str] | None = None) -> dict:
    """Mean held-out reward over ``samples`` completions of each prompt (temperature 1).

    Returns ``reward``, ``se`` (its standard error from sampling on these fixed prompts,
    :func:`~compass.bench.learning_efficiency.stats.held_out_se`), ``tokens`` (completion tokens spent)
    and ``by_group``: the mean per label of ``groups`` (prompt id -> e.g. ``arithmetic/L5``).
    """
    scored = sample_and_score(model, tok, prompts, n=samples, max_new_tokens=max_new_tokens, seed=EVAL_SEED)
    rewards = [[r for r, _ in g] for g in scored]
    flat = [x for rs in rewards for x in rs]
    by: dict[str, list[float]] = {}
    for p, rs in zip(prompts, rewards):
        by.setdefault((groups or {}).get(p.id, p.task), []).extend(rs)
    return {"reward": sum(flat) / max(len(flat), 1), "se": held_out_se(rewards),
            "tokens": sum(n for g in scored for _, n in g),
            "by_group": {k: sum(v) / len(v) for k, v in sorted(by.items())}}
