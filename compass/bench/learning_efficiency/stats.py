"""The statistics of the learning-efficiency bench: pure functions on numbers (tested by hand).

A run is a list of held-out evaluations ``(rollout tokens, reward)``; curves are read at shared
token milestones; a method's tokens-to-target is where its curve first reaches the target;
methods are compared by the ratio of their tokens-to-target, with a paired bootstrap over starts and
seeds (start a / seed s ran every method, so a resample is applied to both sides alike).

A *unit* is one (start, seed): the start is the SFT'd model a run begins from, the seed the RL run's.
Curves are gains over the unit's start (its SFT model's held-out reward), so starts that begin at
different rewards share one target gain. The bootstrap is two-stage (starts with replacement, then seeds
with replacement within each start drawn), so its interval covers the variance between starts as well
as between seeds; with one start it is the plain paired bootstrap over seeds.
"""
from __future__ import annotations

import math
import random
from typing import Sequence

Curve = list[tuple[float, float]]          # (rollout tokens, held-out reward), tokens ascending


def interp(points: Sequence[tuple[float, float]], t: float) -> float:
    """Piecewise-linear value at ``t`` of points sorted by their first element (held flat beyond the ends).
    Two points at the same token count (two evaluations after one step): the first one's value."""
    if t <= points[0][0]:
        return points[0][1]
    for (t0, r0), (t1, r1) in zip(points, points[1:]):
        if t0 <= t <= t1:
            return r1 if t1 == t0 else r0 + (r1 - r0) * (t - t0) / (t1 - t0)
    return points[-1][1]


def at_milestones(points: Sequence[tuple[float, float]], milestones: Sequence[float]) -> Curve:
    """A run's evaluations (taken at the token counts where its steps ended) read at the shared milestones."""
    return [(t, interp(points, t)) for t in milestones]


def mean_curve(curves: Sequence[Curve]) -> Curve:
    """Pointwise mean of curves read at the same milestones."""
    if not curves:
        raise ValueError("mean_curve needs at least one curve")
    return [(pts[0][0], sum(p[1] for p in pts) / len(pts)) for pts in zip(*curves)]


def tokens_to_target(curve: Curve, target: float) -> tuple[float, bool]:
    """First rollout-token count where the curve reaches ``target`` (linear between points): (tokens, reached).
    A curve that never reaches it is charged its last token count (the whole budget), flagged False."""
    if not curve:
        return 0.0, False
    for (t0, r0), (t1, r1) in zip(curve, curve[1:]):
        if r0 >= target:
            return t0, True
        if r1 >= target:
            return t0 + (t1 - t0) * (target - r0) / (r1 - r0), True
    if curve[-1][1] >= target:
        return curve[-1][0], True
    return curve[-1][0], False


def target_from_gain(start: float, final: float, fraction: float = 0.5) -> float:
    """The reward ``fraction`` of the way from ``start`` (the SFT model) to ``final`` (the reference
    method's final reward): half the reference's gain by default."""
    return start + fraction * (final - start)


def var(xs: Sequence[float]) -> float:
    """Sample variance (n-1); 0 for fewer than two values."""
    if len(xs) < 2:
        return 0.0
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def mean_std(xs: Sequence[float]) -> tuple[float, float]:
    return sum(xs) / len(xs), math.sqrt(var(xs))


def held_out_se(per_prompt: Sequence[Sequence[float]]) -> float:
    """Standard error of a held-out mean reward from sampling on fixed prompts: sqrt(sum_p s_p^2 / k_p) / P,
    with s_p^2 the variance of prompt p's k_p rewards. One sample per prompt: the plain standard error."""
    if not per_prompt:
        return 0.0
    if all(len(rs) > 1 for rs in per_prompt):
        return math.sqrt(sum(var(rs) / len(rs) for rs in per_prompt)) / len(per_prompt)
    flat = [x for rs in per_prompt for x in rs]
    return math.sqrt(var(flat) / len(flat))


def percentile(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``xs``, linear between order statistics (numpy's default)."""
    s = sorted(xs)
    if not s:
        raise ValueError("percentile of nothing")
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def ratio_on_mean_curves(num: Sequence[Curve], den: Sequence[Curve], target: float) -> float | None:
    """tokens-to-target of the mean of ``num``'s curves over that of ``den``'s (None when ``den`` needs none)."""
    t_num, _ = tokens_to_target(mean_curve(num), target)
    t_den, _ = tokens_to_target(mean_curve(den), target)
    return t_num / t_den if t_den > 0 else None


def resample_units(clusters: Sequence[Sequence[int]], rng: random.Random) -> list[int]:
    """One two-stage bootstrap draw of unit indices: ``len(clusters)`` clusters (starts) with replacement,
    then, within each cluster drawn, as many of its units (seeds) as it has, with replacement."""
    out: list[int] = []
    for _ in clusters:
        c = clusters[rng.randrange(len(clusters))]
        out += [c[rng.randrange(len(c))] for _ in c]
    return out


def resampled_means(values: Sequence[float], *, clusters: Sequence[Sequence[int]] | None, n_boot: int,
                    seed: int) -> list[float]:
    """The mean of ``values`` (one per unit) under ``n_boot`` draws of :func:`resample_units`."""
    rng = random.Random(seed)
    parts = _clusters(len(values), clusters)
    out = []
    for _ in range(n_boot):
        idx = resample_units(parts, rng)
        out.append(sum(values[i] for i in idx) / len(idx))
    return out


def _clusters(k: int, clusters: Sequence[Sequence[int]] | None) -> list[list[int]]:
    if clusters is None:
        return [list(range(k))]
    flat = sorted(i for c in clusters for i in c)
    if flat != list(range(k)) or any(not c for c in clusters):
        raise ValueError(f"clusters must split the {k} units into nonempty parts, each unit once: {clusters}")
    return [list(c) for c in clusters]


def paired_bootstrap_ratio(num: Sequence[Curve], den: Sequence[Curve], target: float, *, n_boot: int = 2000,
                           level: float = 0.95, seed: int = 0,
                           clusters: Sequence[Sequence[int]] | None = None) -> dict:
    """Ratio of tokens-to-target on the mean curves, ``num`` over ``den``, with a paired bootstrap CI.

    ``num[i]`` and ``den[i]`` are the same unit's (start, seed) curves; ``clusters`` lists the unit
    indices of each start (None: one start). Each resample draws units with :func:`resample_units` and
    applies them to both methods, recomputes both mean curves and the ratio (the target stays fixed).
    Returns ``ratio`` (on all units), ``ci_low``/``ci_high`` (percentile interval at ``level``) and ``n``
    (resamples where the ratio was defined).
    """
    if len(num) != len(den) or not num:
        raise ValueError("paired_bootstrap_ratio needs the same, nonzero number of seeds on both sides")
    rng = random.Random(seed)
    parts = _clusters(len(num), clusters)
    ratios = []
    for _ in range(n_boot):
        idx = resample_units(parts, rng)
        r = ratio_on_mean_curves([num[i] for i in idx], [den[i] for i in idx], target)
        if r is not None:
            ratios.append(r)
    point = ratio_on_mean_curves(num, den, target)
    if not ratios:
        return {"ratio": point, "ci_low": None, "ci_high": None, "n": 0}
    a = (1.0 - level) / 2
    return {"ratio": point, "ci_low": percentile(ratios, a), "ci_high": percentile(ratios, 1 - a), "n": len(ratios)}


def paired_bootstrap_delta(num: Sequence[float], den: Sequence[float], *, n_boot: int = 2000, level: float = 0.95,
                           seed: int = 0, clusters: Sequence[Sequence[int]] | None = None) -> dict:
    """Mean of the per-unit differences ``num[i] - den[i]`` and its paired bootstrap percentile CI (units
    resampled as in :func:`paired_bootstrap_ratio`)."""
    if len(num) != len(den) or not num:
        raise ValueError("paired_bootstrap_delta needs the same, nonzero number of seeds on both sides")
    d = [a - b for a, b in zip(num, den)]
    means = resampled_means(d, clusters=clusters, n_boot=n_boot, seed=seed)
    a = (1.0 - level) / 2
    return {"delta": sum(d) / len(d), "ci_low": percentile(means, a), "ci_high": percentile(means, 1 - a)}


def zero_variance_bound(z: float) -> float:
    """The least tokens ratio skipping zero-variance groups can give when a share ``z`` of the baseline's
    groups teach nothing: 1 - z (a saving of at most 1/(1 - z) times), if every such group were skipped for
    free and every other group taught as much as before."""
    return 1.0 - z


def informative_ratio_bound(informative_base: float, informative_method: float) -> float | None:
    """The tokens ratio method/baseline that the informative share alone predicts: when a step's progress
    comes from its groups with reward spread, a rollout token buys progress in proportion to the share of
    tokens in such groups, so the method needs ``informative_base / informative_method`` of the baseline's
    tokens. Both runs take the same steps per token (a skipped prompt is replaced, not paid for), so this is
    what a skip of a given prediction quality can buy; at perfect prediction it reaches the 1 - z bound of
    :func:`zero_variance_bound` (in token shares). None when the method has no informative tokens."""
    if informative_method <= 0:
        return None
    return informative_base / informative_method


def bootstrap_se(values: Sequence[float], *, clusters: Sequence[Sequence[int]] | None = None, n_boot: int = 2000,
                 seed: int = 0) -> float:
    """Standard error of the mean of ``values`` (one per unit) by the two-stage bootstrap of
    :func:`resample_units`: the standard deviation of the resampled means. With starts as clusters it
    counts the spread between starts (their SFT evaluations included) as well as between seeds."""
    if not values:
        raise ValueError("bootstrap_se of nothing")
    return math.sqrt(var(resampled_means(values, clusters=clusters, n_boot=n_boot, seed=seed)))


def predicted_ratio(informative_base: float, steps_per_token_base: float, informative_method: float,
                    steps_per_token_method: float) -> float | None:
    """The tokens ratio method/baseline predicted when progress per rollout token is the optimizer steps a
    token buys times the share of each step's tokens in groups with reward spread: a skip raises the share
    (:func:`informative_ratio_bound`), smaller groups raise the steps per token. For methods that update on
    every group they generate (not DAPO, whose dropped groups never reach the update). None when the
    method has no informative step."""
    den = informative_method * steps_per_token_method
    if den <= 0:
        return None
    return informative_base * steps_per_token_base / den
