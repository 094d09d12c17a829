"""Metrics over k samples per prompt: unbiased pass@k, mean@k and maj@k.

Pure functions on plain numbers and lists. ``n`` samples were drawn for a prompt, ``c`` of them correct.

- pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1): the chance that
  at least one of k samples drawn without replacement from the n is correct, 1 − C(n−c, k) / C(n, k);
  unbiased for every k ≤ n, where the plug-in 1 − (1 − c/n)^k is not.
- mean@k: the mean correctness of the samples (accuracy at temperature > 0); greedy is k = 1.
- maj@k: the answer given most often among the samples wins (ties: the one seen first); the prompt
  counts as solved when that answer's samples are correct (self-consistency, Wang et al. 2022).
- standard errors with the prompt as the unit: a prompt's samples are not independent draws of the suite,
  so the SE of a suite's mean is that of its prompts' means (the cluster-robust SE with one cluster per
  prompt); a change between two checkpoints on the same prompts is paired per prompt.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Callable, Sequence

from compass.gym.math_answers.extract import extract_final_answer
from compass.gym.score import THINK_CLOSE


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 − C(n−c, k)/C(n, k), computed as a product (no big binomials); needs 1 ≤ k ≤ n, 0 ≤ c ≤ n."""
    if not (1 <= k <= n) or not (0 <= c <= n):
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):          # C(n-c, k)/C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i)
        miss *= 1.0 - k / i
    return 1.0 - miss


def values_by_prompt(rows: Sequence[dict], field: str) -> dict[str, list[float]]:
    """prompt id -> its rows' ``field`` values as floats (``correct`` becomes 0/1), in row order."""
    out: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        out[r["prompt_id"]].append(float(r[field]))
    return dict(out)


def prompt_se(values_by_prompt: Sequence[Sequence[float]]) -> float | None:
    """SE of the mean over prompts of each prompt's mean value: sd(prompt means, ddof 1) / sqrt(P).
    ``values_by_prompt``: P lists, one per prompt, of its samples' values (correct as 0/1, or scores). One
    sample per prompt and 0/1 values give sqrt(p(1 − p)/(P − 1)). None for fewer than two prompts."""
    means = [sum(v) / len(v) for v in values_by_prompt if len(v)]
    p = len(means)
    if p < 2:
        return None
    mu = sum(means) / p
    return math.sqrt(sum((m - mu) ** 2 for m in means) / (p - 1) / p)


def paired_se(a: dict[str, Sequence[float]], b: dict[str, Sequence[float]]) -> float | None:
    """SE of mean(a) − mean(b) over the prompts both have (prompt id -> its samples' values): the SE of the
    per-prompt differences of means. None for fewer than two shared prompts."""
    shared = sorted(a.keys() & b.keys())
    return prompt_se([[sum(a[k]) / len(a[k]) - sum(b[k]) / len(b[k])] for k in shared if len(a[k]) and len(b[k])])


def majority_correct(keys: Sequence[str], correct: Sequence[bool]) -> bool:
    """maj@k of one prompt: the most frequent answer key (ties: first seen) and whether its samples are
    correct (the majority of that answer's samples, so a verifier that reads two equal keys differently
    cannot flip it by order)."""
    if not keys or len(keys) != len(correct):
        raise ValueError("majority_correct needs one correctness per answer key, at least one")
    counts = Counter(keys)
    top = max(counts.values())
    winner = next(k for k in keys if counts[k] == top)
    votes = [c for k, c in zip(keys, correct) if k == winner]
    return sum(votes) * 2 > len(votes)


def answer_key(response: str) -> str:
    """What a sample answered, for voting: the final answer after the reasoning (``\\boxed{}``, an answer
    phrase, the last line), spaces removed; the whole answer text when none is found."""
    text = response.split(THINK_CLOSE)[-1]
    final = extract_final_answer(text)
    return "".join((final if final is not None else text).split())


def k_metrics(results: Sequence[dict], key: Callable[[str], str] = answer_key) -> dict:
    """pass@k for k = 1, 2, 4, ... up to the samples per prompt, mean@k and maj@k, per suite.

    ``results``: one dict per sample with ``suite``, ``prompt_id``, ``correct`` and ``response``.
    Returns suite -> ``{"k": n, "mean": ..., "maj": ..., "pass": {k: ...}}`` (means over prompts); a suite
    whose prompts have different sample counts uses the smallest."""
    by_prompt: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in results:
        by_prompt[(r["suite"], r["prompt_id"])].append(r)
    suites: dict[str, list[list[dict]]] = defaultdict(list)
    for (suite, _), rs in by_prompt.items():
        suites[suite].append(rs)
    out = {}
    for suite in sorted(suites):
        groups = suites[suite]
        n = min(len(g) for g in groups)
        ks = [2 ** i for i in range(n.bit_length()) if 2 ** i <= n]
        if n not in ks:
            ks.append(n)
        out[suite] = {
            "k": n,
            "mean": sum(sum(r["correct"] for r in g[:n]) / n for g in groups) / len(groups),
            "maj": sum(majority_correct([key(r["response"]) for r in g[:n]], [r["correct"] for r in g[:n]])
                       for g in groups) / len(groups),
            "pass": {k: sum(pass_at_k(n, sum(r["correct"] for r in g[:n]), k) for g in groups) / len(groups)
                     for k in ks},
        }
    return out
