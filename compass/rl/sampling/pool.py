"""The prompts a phase trains on, graded by the phase's own starting policy before RL (paper §2.4.1).

The paper's rollout stage first drops "samples that consistently received high validation pass rates"
from a model: they would give all-pass groups, zero advantage, wasted rollouts. Here the grader is the
policy the phase starts from (the merged checkpoint for reasoning RL, the phase-1 checkpoint for domain RL),
so the grades predict the groups the run will see, not another model's:

1. a seeded draw of ``candidates`` prompts (a pool small enough that prompts come back during the run,
   so the run's own history informs the pre-rollout skip);
2. each sampled ``k`` times at the rollout's temperature and scored by the phase's reward;
3. prompts solved every time dropped (and never solved, with ``drop_never_solved``); at most ``size`` of the
   rest kept, in the draw's order;
4. each kept prompt's measured pass rate (passes / k, a pass being a reward above ``pass_threshold``)
   becomes its ``pass_rate``: the prior of the skip and of the group size (``sampling.prefilter``,
   ``sampling.auto_group_size``).

The grading's tokens are reported apart from the run's rollout tokens (``pool_tokens``).
"""
from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import pyarrow as pa

from compass.rl.sampling.prompt_data import RLPrompt

# (prompt, texts) -> one reward per text: the phase's own reward on a whole group
GroupScore = Callable[[RLPrompt, Sequence[str]], list[float]]


@dataclass
class Graded:
    prompt: RLPrompt
    passes: int
    k: int
    tokens: int

    @property
    def pass_rate(self) -> float:
        return self.passes / self.k


def draw_candidates(prompts: Sequence[RLPrompt], n: int, seed: int) -> list[RLPrompt]:
    """A seeded draw of ``min(n, len(prompts))`` prompts without replacement, in the draw's order."""
    order = list(range(len(prompts)))
    random.Random(seed).shuffle(order)
    return [prompts[i] for i in order[:n]]


def grade(prompts: Sequence[RLPrompt], generate, score_group: GroupScore, *, k: int, max_new_tokens: int,
          temperature: float, pass_threshold: float, seed: int, batch_size: int) -> list[Graded]:
    """``k`` samples of every prompt from ``generate(texts, n=, max_new_tokens=, temperature=, seed=)`` (per
    text, n dicts of ``text`` and ``ids``: ``compass.lm.chat.sample`` with its model bound), each group scored
    by ``score_group``; batch ``b`` is sampled with seed ``seed + b``."""
    from compass.progress import progress
    out: list[Graded] = []
    starts = range(0, len(prompts), batch_size)
    for b, start in enumerate(progress(starts, total=len(starts), desc="pool grading", unit="batch")):
        part = prompts[start:start + batch_size]
        groups = generate([p.prompt for p in part], n=k, max_new_tokens=max_new_tokens,
                          temperature=temperature, seed=seed + b)
        for p, g in zip(part, groups):
            rewards = score_group(p, [c["text"] for c in g])
            out.append(Graded(p, sum(r > pass_threshold for r in rewards), k, sum(len(c["ids"]) for c in g)))
    return out


def select(graded: Sequence[Graded], *, size: int, drop_always_solved: bool,
           drop_never_solved: bool) -> tuple[list[RLPrompt], list[str]]:
    """The kept prompts (at most ``size``, in ``graded``'s order, ``pass_rate`` set to the measured one) and,
    per graded prompt, why it was left out or ``"kept"``: ``always_solved``, ``never_solved``, ``over_size``."""
    kept: list[RLPrompt] = []
    why: list[str] = []
    for g in graded:
        if drop_always_solved and g.passes == g.k:
            why.append("always_solved")
        elif drop_never_solved and g.passes == 0:
            why.append("never_solved")
        elif len(kept) >= size:
            why.append("over_size")
        else:
            kept.append(dataclasses.replace(g.prompt, pass_rate=g.pass_rate))
            why.append("kept")
    return kept, why


def pool_table(graded: Sequence[Graded], why: Sequence[str]) -> pa.Table:
    """One row per graded prompt: id, domain, task, the grader's pass rate before (null: ungraded), the measured
    passes of k, tokens, and what became of it."""
    return pa.table({
        "prompt_id": [g.prompt.id for g in graded], "domain": [g.prompt.domain for g in graded],
        "task": [g.prompt.task for g in graded],
        "prior_pass_rate": pa.array([g.prompt.pass_rate for g in graded], pa.float64()),
        "passes": pa.array([g.passes for g in graded], pa.int32()), "k": pa.array([g.k for g in graded], pa.int32()),
        "tokens": pa.array([g.tokens for g in graded], pa.int64()), "outcome": list(why)})


def report(graded: Sequence[Graded], why: Sequence[str], seconds: float) -> dict:
    """The numbers a run's manifest keeps about its pool (all-pass and all-fail shares among the graded)."""
    n = len(graded)
    all_pass = sum(g.passes == g.k for g in graded)
    all_fail = sum(g.passes == 0 for g in graded)
    kept = [g for g, w in zip(graded, why) if w == "kept"]
    by_domain = Counter(g.prompt.domain or "?" for g in kept)
    return {"pool_graded": n, "pool_k": graded[0].k if graded else 0,
            "pool_tokens": sum(g.tokens for g in graded), "pool_grading_s": round(seconds, 1),
            "pool_all_pass_share": all_pass / n if n else None, "pool_all_fail_share": all_fail / n if n else None,
            "pool_mean_pass_rate": sum(g.pass_rate for g in graded) / n if n else None,
            "pool_dropped_always_solved": why.count("always_solved"),
            "pool_dropped_never_solved": why.count("never_solved"), "pool_over_size": why.count("over_size"),
            "pool_kept": len(kept),
            "pool_kept_mean_pass_rate": sum(g.pass_rate for g in kept) / len(kept) if kept else None,
            "pool_kept_by_domain": dict(sorted(by_domain.items()))}


def build_pool(model, tok, prompts: Sequence[RLPrompt], cfg, *, rollout_backend: str, temperature: float,
               max_new_tokens: int, pass_threshold: float, score_fn, seed: int
               ) -> tuple[list[RLPrompt], pa.Table, dict]:
    """Draw, grade with ``model`` and select (``cfg``: ``compass.rl.config.PoolConfig``); returns the kept
    prompts, the per-prompt table (:func:`pool_table`) and the report (:func:`report`)."""
    from compass.rl.rollout.sampler import BACKENDS, open_sampler
    from compass.rl.rollout.scored import GroupJudge, scored
    candidates = draw_candidates(prompts, cfg.candidates or 2 * cfg.size, seed)

    def score_group(p: RLPrompt, texts: Sequence[str]) -> list[float]:
        if isinstance(score_fn, GroupJudge):
            return [scored(r)[0] for r in score_fn.score_group(p, texts)]
        return [scored(score_fn(p.verifier, t, p.reference))[0] for t in texts]

    t0 = time.perf_counter()
    was_training = model.training
    backend = rollout_backend if rollout_backend in BACKENDS else "auto"
    try:
        with open_sampler(backend, model, tok) as sample:
            graded = grade(candidates, lambda texts, **kw: sample(model, tok, texts, **kw), score_group,
                           k=cfg.k, max_new_tokens=cfg.max_new_tokens or max_new_tokens,
                           temperature=cfg.temperature if cfg.temperature is not None else temperature,
                           pass_threshold=pass_threshold, seed=seed, batch_size=cfg.batch_size)
    finally:
        model.train(was_training)
    kept, why = select(graded, size=cfg.size, drop_always_solved=cfg.drop_always_solved,
                       drop_never_solved=cfg.drop_never_solved)
    return kept, pool_table(graded, why), report(graded, why, time.perf_counter() - t0)
