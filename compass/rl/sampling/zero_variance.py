"""The maths of zero-variance elimination (paper §2.4.1): how likely a prompt's group is to teach nothing,
whether to skip it before rollout, and which group size N buys the most signal per token.

A prompt's pass rate ``p`` is uncertain, so it is a Beta(a, b) belief: the grader's pass rate as a prior
(``prior_weight`` pseudo-samples on Jeffreys' Beta(1/2, 1/2) base, the usual uninformed prior for a
rate) updated with the policy's own samples in this run.
With binary rewards and k ~ BetaBinomial(N, a, b) passes in a group of N:

- zero-variance probability  P_zv(N) = E[p^N] + E[(1-p)^N],  E[p^N] = prod_{j<N} (a+j)/(a+b+j)
  (the paper's Fig. 3 left: it falls as N grows);
- pass@N = 1 - E[(1-p)^N];
- |advantage| per sample: a GRPO group with k of N passing has mean mu = k/N and std sqrt(mu(1-mu)), so
  sum_i |A_i| = 2 N sqrt(mu(1-mu)); per generated sample, E[2 sqrt(mu(1-mu))] (0 when k is 0 or N).
  This is Fig. 3 right, "the advantage absolute value of each unit of ... computing resources": samples
  cost the same whatever N, so signal per sample is signal per token.

Pure functions on floats; shapes are scalars or lists of (a, b).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

Belief = tuple[float, float]          # Beta(a, b) over a prompt's pass rate


BASE = 0.5                            # Jeffreys: Beta(1/2, 1/2) before any evidence


def prior_belief(pass_rate: float | None, prior_weight: float) -> Belief:
    """Beta(1/2 + w·p, 1/2 + w·(1-p)): the grader's pass rate ``p`` worth ``w`` samples on Jeffreys' base;
    Beta(1/2, 1/2) for an ungraded prompt."""
    if pass_rate is None:
        return BASE, BASE
    p = min(max(float(pass_rate), 0.0), 1.0)
    return BASE + prior_weight * p, BASE + prior_weight * (1.0 - p)


def update_belief(belief: Belief, passes: int, fails: int, forget: float) -> Belief:
    """The belief after one group: the old evidence (above the base) scaled by ``forget`` in [0, 1] (the
    policy moves, so older groups count less), then the new passes and fails added."""
    a, b = belief
    return BASE + forget * (a - BASE) + passes, BASE + forget * (b - BASE) + fails


def moment(a: float, b: float, n: int) -> float:
    """E[p^n] for p ~ Beta(a, b): prod_{j<n} (a+j)/(a+b+j)."""
    out = 1.0
    for j in range(n):
        out *= (a + j) / (a + b + j)
    return out


def zero_variance_prob(belief: Belief, n: int) -> float:
    """P(all n samples pass or all fail) = E[p^n] + E[(1-p)^n]."""
    a, b = belief
    return moment(a, b, n) + moment(b, a, n)


def pass_at(belief: Belief, n: int) -> float:
    """pass@n = 1 - E[(1-p)^n]."""
    a, b = belief
    return 1.0 - moment(b, a, n)


def beta_binomial_pmf(k: int, n: int, a: float, b: float) -> float:
    """P(k passes of n) when p ~ Beta(a, b)."""
    log = (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
           + math.lgamma(k + a) + math.lgamma(n - k + b) - math.lgamma(n + a + b)
           - math.lgamma(a) - math.lgamma(b) + math.lgamma(a + b))
    return math.exp(log)


def abs_advantage_per_sample(belief: Belief, n: int) -> float:
    """E[sum_i |A_i|] / n for a GRPO group of n binary rewards: E[2 sqrt(mu (1-mu))], mu = k/n."""
    a, b = belief
    return sum(beta_binomial_pmf(k, n, a, b) * 2.0 * math.sqrt((k / n) * (1 - k / n)) for k in range(1, n))


def choose_group_size(beliefs: Sequence[Belief], candidates: Sequence[int], tol: float,
                      skip: Callable[[int, float], float] | None = None) -> tuple[int, list[dict]]:
    """The group size for the next steps and, per candidate, what it was chosen on.

    Signal per token, S(N), is the expected |advantage| per generated sample (``abs_advantage_per_sample``)
    over the prompts that will be generated. Without a pre-rollout skip that is every prompt, and S(N) rises
    with N (fewer groups come out zero-variance) and saturates. With one, ``skip(i, P_zv_i(N))`` is prompt
    i's chance to be skipped at N, and S(N) weighs each prompt by its chance to be generated: a skipped
    prompt costs no token and gives no signal. The two decisions then meet: a larger N rescues the
    near-certain prompts from zero variance, but those are the prompts the skip would have spared; a smaller
    N makes them predicted zero-variance, so skipped, and spends the samples on prompts with spread.
    The choice is the smallest N whose S(N) is within ``tol`` of the best candidate's: beyond it the extra
    samples buy less than ``tol`` more signal (the paper's "trade-off between computational cost and
    marginal gain"). Rows: ``n``, ``zero_variance`` (mean P_zv over all prompts, Fig. 3), ``pass_at_n``,
    ``generated`` (expected share of draws generated), ``zero_variance_generated`` (expected zero-variance
    share of the generated groups), ``abs_adv_per_sample`` (S(N)).
    """
    if not beliefs:
        raise ValueError("choose_group_size needs at least one prompt belief")
    rows = []
    for n in sorted(set(candidates)):
        pzv = [zero_variance_prob(x, n) for x in beliefs]
        gen = [1.0 - skip(i, q) for i, q in enumerate(pzv)] if skip is not None else [1.0] * len(beliefs)
        weight = sum(gen) or 1.0
        rows.append({"n": n, "zero_variance": sum(pzv) / len(beliefs),
                     "pass_at_n": sum(pass_at(x, n) for x in beliefs) / len(beliefs),
                     "generated": sum(gen) / len(beliefs),
                     "zero_variance_generated": sum(g * q for g, q in zip(gen, pzv)) / weight,
                     "abs_adv_per_sample": sum(g * abs_advantage_per_sample(x, n)
                                               for g, x in zip(gen, beliefs)) / weight})
    best = max(r["abs_adv_per_sample"] for r in rows)
    chosen = next(r["n"] for r in rows if r["abs_adv_per_sample"] >= (1.0 - tol) * best)
    return chosen, rows


def skip_probability(p_zero_variance: float, skips_in_a_row: int, min_zero_variance: float, max_skip: float,
                     decay: float) -> float:
    """The chance of skipping a prompt before rollout (GRESO-style, but from a belief, not only history).

    0 unless its group is predicted zero-variance with probability at least ``min_zero_variance``; then
    ``min(max_skip, P_zv) · decay^skips_in_a_row``: each skip in a row makes the next less likely, so a
    skipped prompt always comes back to be measured again and nothing is excluded for good.
    """
    if p_zero_variance < min_zero_variance:
        return 0.0
    return min(max_skip, p_zero_variance) * decay ** skips_in_a_row
