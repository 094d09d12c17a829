"""What the run believes about each prompt's pass rate, and the pre-rollout skip and group size it drives.

One Beta belief per prompt (``compass.rl.sampling.zero_variance``): the grader's pass rate as the prior, the
policy's own groups as evidence (older groups forgotten by ``forget``). A prompt with neither (ungraded,
not yet drawn) borrows its task's pass rate pooled over this run's groups, at the prior's weight: the
run's history of similar prompts is the best guess there is (empirical Bayes). Before rollout a prompt whose
group is predicted zero-variance may be skipped (it costs nothing: it is not generated); each skip in a
row scales the next chance by ``decay`` (0.8), so every prompt comes back to be measured.
"""
from __future__ import annotations

import random
from typing import Sequence

from compass.rl.sampling.prompt_data import RLPrompt
from compass.rl.sampling.zero_variance import (Belief, choose_group_size, prior_belief, skip_probability, update_belief,
                                      zero_variance_prob)


MAX_PROMPTS_FOR_N = 1024        # prompts the group-size choice averages over at most


class PromptBeliefs:
    def __init__(self, prompts: Sequence[RLPrompt], *, prior_weight: float, forget: float, pass_threshold: float,
                 seed: int):
        self.prior_weight, self.forget, self.pass_threshold = prior_weight, forget, pass_threshold
        self.beliefs: dict[str, Belief] = {p.id: prior_belief(p.pass_rate, prior_weight) for p in prompts}
        # ungraded prompts not yet drawn: their task's pooled pass rate stands in for a grade
        self.borrowing = {p.id for p in prompts if p.pass_rate is None}
        self.task_of = {p.id: p.task for p in prompts}
        self.task_counts: dict[str, list[int]] = {}      # task -> [passes, samples] over this run's groups
        self.skips_in_a_row: dict[str, int] = {}
        self.rng = random.Random(seed * 7919 + 13)

    def observe(self, prompt_id: str, rewards: Sequence[float]) -> None:
        """A generated group of ``prompt_id``: its passes and fails update the belief; its skip run ends."""
        passes = sum(r > self.pass_threshold for r in rewards)
        self.beliefs[prompt_id] = update_belief(self.belief(prompt_id), passes, len(rewards) - passes, self.forget)
        self.borrowing.discard(prompt_id)
        counts = self.task_counts.setdefault(self.task_of.get(prompt_id, ""), [0, 0])
        counts[0] += passes
        counts[1] += len(rewards)
        self.skips_in_a_row.pop(prompt_id, None)

    def belief(self, prompt_id: str) -> Belief:
        """The prompt's belief; for an ungraded prompt not yet drawn, its task's pooled pass rate as a prior."""
        if prompt_id in self.borrowing:
            passes, samples = self.task_counts.get(self.task_of.get(prompt_id, ""), (0, 0))
            if samples:
                return prior_belief((passes + 0.5) / (samples + 1), self.prior_weight)
        return self.beliefs[prompt_id]

    def p_zero_variance(self, prompt_id: str, n: int) -> float:
        return zero_variance_prob(self.belief(prompt_id), n)

    def skip_chance(self, prompt_id: str, p_zero_variance: float, *, min_zero_variance: float, max_skip: float,
                    decay: float) -> float:
        """The chance the prompt's next draw is skipped, given its P_zv at some N (``skip_probability``)."""
        return skip_probability(p_zero_variance, self.skips_in_a_row.get(prompt_id, 0), min_zero_variance,
                                max_skip, decay)

    def should_skip(self, prompt_id: str, n: int, **rule: float) -> bool:
        """Draw whether to skip the prompt this time; a skip is remembered. ``rule``: the keywords of
        ``skip_chance``."""
        q = self.skip_chance(prompt_id, self.p_zero_variance(prompt_id, n), **rule)
        if q > 0 and self.rng.random() < q:
            self.skips_in_a_row[prompt_id] = self.skips_in_a_row.get(prompt_id, 0) + 1
            return True
        return False

    def group_size(self, prompt_ids: Sequence[str], candidates: Sequence[int], tol: float,
                   skip_rule: dict | None = None, limit: int = MAX_PROMPTS_FOR_N) -> tuple[int, list[dict]]:
        """N by ``choose_group_size`` over the prompts' beliefs; with ``skip_rule`` (the keywords of
        ``skip_chance``) each prompt counts by its chance to be generated. Over ``limit`` prompts, an evenly
        spaced sample of them stands in (the choice is a mean; its cost grows with prompts × N)."""
        ids = list(prompt_ids)
        if len(ids) > limit:
            ids = [ids[i * len(ids) // limit] for i in range(limit)]
        skip = None
        if skip_rule is not None:
            skip = lambda i, q: self.skip_chance(ids[i], q, **skip_rule)      # noqa: E731
        return choose_group_size([self.belief(i) for i in ids], candidates, tol, skip)

    def state(self) -> dict:
        return {"beliefs": dict(self.beliefs), "skips": dict(self.skips_in_a_row), "rng": self.rng.getstate(),
                "borrowing": sorted(self.borrowing), "task_counts": {k: list(v) for k, v in self.task_counts.items()}}

    def load_state(self, state: dict) -> None:
        self.beliefs, self.skips_in_a_row = dict(state["beliefs"]), dict(state["skips"])
        self.borrowing = set(state["borrowing"])
        self.task_counts = {k: list(v) for k, v in state["task_counts"].items()}
        self.rng.setstate(state["rng"])
