"""Zero-variance rate, pass@N and |advantage| against the group size N (the paper's Fig. 3), from the
grader's measured groups and from the Beta beliefs the engine builds on them.

Measured: a prompt graded with ``k`` samples, ``c`` of them passing, stands for the groups of ``n <= k``
drawn from those samples without replacement, so every quantity is an exact hypergeometric average
(unbiased for the prompt's true pass rate: pass@n here is the usual unbiased pass@k estimator).
Beliefs: :mod:`compass.rl.sampling.zero_variance` on Beta(1/2 + w c/k, 1/2 + w (1 - c/k)), any ``n``.
"""
from __future__ import annotations

import math
from typing import Sequence

from compass.rl.sampling.zero_variance import abs_advantage_per_sample, pass_at, prior_belief, zero_variance_prob


def hypergeom(j: int, k: int, c: int, n: int) -> float:
    """P(j passes in n draws without replacement from k samples of which c pass)."""
    if j < 0 or j > n or j > c or n - j > k - c:
        return 0.0
    return math.comb(c, j) * math.comb(k - c, n - j) / math.comb(k, n)


def measured_at_n(k: int, c: int, n: int) -> dict:
    """One graded prompt (c of k passed) at group size ``n`` <= k: ``zero_variance`` (all pass or all fail),
    ``pass_at_n`` and ``abs_adv_per_sample`` (E[sum_i |A_i|] / n for binary rewards = E[2 sqrt(mu(1-mu))],
    mu = passes / n: GRPO's group-normalised |A| with the population std, as in compass.rl.sampling.zero_variance)."""
    if not 1 <= n <= k:
        raise ValueError(f"group size {n} needs 1 <= n <= k = {k}")
    p0, pn = hypergeom(0, k, c, n), hypergeom(n, k, c, n)
    adv = sum(hypergeom(j, k, c, n) * 2.0 * math.sqrt((j / n) * (1 - j / n)) for j in range(1, n))
    return {"zero_variance": p0 + pn, "pass_at_n": 1.0 - p0, "abs_adv_per_sample": adv}


def _lengths(g: dict) -> tuple[float, float]:
    """(mean tokens of a passing sample, of a failing one); the prompt's mean where it had none of a kind."""
    lp, lf = g.get("len_pass"), g.get("len_fail")
    return (g["mean_len"] if lp is None else lp), (g["mean_len"] if lf is None else lf)


def per_token(grades: Sequence[dict], adv: Sequence[float], pass_rates: Sequence[float]) -> float:
    """|advantage| per generated token over the pool: E[sum_i |A_i| len_i] / E[sum_i len_i].

    Every token of sample i carries A_i (GRPO's token-level advantage; the engine's ``adv_abs_token_mean``).
    With binary rewards and j of n passing, sum_i |A_i| len_i = n sqrt(mu(1-mu)) (len_pass + len_fail),
    so the numerator is n (len_pass + len_fail) adv / 2 (``adv`` = E[2 sqrt(mu(1-mu))]) and the
    denominator n (p len_pass + (1-p) len_fail); n cancels across prompts."""
    num = den = 0.0
    for g, a, p in zip(grades, adv, pass_rates):
        lp, lf = _lengths(g)
        num += (lp + lf) / 2 * a
        den += p * lp + (1 - p) * lf
    return num / den if den else 0.0


def curves(grades: Sequence[dict], ns: Sequence[int], prior_weight: float) -> list[dict]:
    """Per ``n``: the pool's mean ``zero_variance``, ``pass_at_n``, ``abs_adv_per_sample`` and
    ``abs_adv_per_token`` (:func:`per_token`), measured (``None`` where n > k) and from the beliefs (keys
    with ``belief_``). ``grades``: dicts with ``passes``, ``k``, ``mean_len`` and optionally ``len_pass``,
    ``len_fail`` (mean tokens of the passing / failing samples)."""
    rows = []
    beliefs = [prior_belief(g["passes"] / g["k"], prior_weight) for g in grades]
    rates = [g["passes"] / g["k"] for g in grades]
    belief_rates = [a / (a + b) for a, b in beliefs]
    for n in ns:
        row: dict = {"n": n}
        if all(n <= g["k"] for g in grades):
            ms = [measured_at_n(g["k"], g["passes"], n) for g in grades]
            for key in ("zero_variance", "pass_at_n", "abs_adv_per_sample"):
                row[key] = sum(m[key] for m in ms) / len(ms)
            row["abs_adv_per_token"] = per_token(grades, [m["abs_adv_per_sample"] for m in ms], rates)
        else:
            row.update(zero_variance=None, pass_at_n=None, abs_adv_per_sample=None, abs_adv_per_token=None)
        adv = [abs_advantage_per_sample(b, n) for b in beliefs]
        row.update(belief_zero_variance=sum(zero_variance_prob(b, n) for b in beliefs) / len(beliefs),
                   belief_pass_at_n=sum(pass_at(b, n) for b in beliefs) / len(beliefs),
                   belief_abs_adv_per_sample=sum(adv) / len(adv),
                   belief_abs_adv_per_token=per_token(grades, adv, belief_rates))
        rows.append(row)
    return rows


def predicted_zero_variance(grades: Sequence[dict], n: int) -> float:
    """The pool's zero-variance share at group size ``n`` as the grader measured it (n <= k)."""
    return sum(measured_at_n(g["k"], g["passes"], n)["zero_variance"] for g in grades) / len(grades)
