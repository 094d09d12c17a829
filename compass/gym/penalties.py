"""Reward shaping added on top of a verifier's score: overlong length, n-gram repetition, pass rates.

Pure functions of lengths, token sequences and counts; ``ShapingConfig``
turns them on, and ``shape`` returns the total with its parts so the RL
engine can log each.
"""
from __future__ import annotations

from collections import Counter
from typing import Literal, Sequence

from pydantic import Field, model_validator

from compass.config import StrictModel


def overlong_penalty(length: int, max_len: int, cache_len: int) -> float:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), in [-1, 0].

    0 while ``length <= max_len - cache_len``; then falls linearly to -1 at
    ``length == max_len``; -1 beyond. ``length``: response tokens.
    """
    if cache_len <= 0 or cache_len > max_len:
        raise ValueError(f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    soft_start = max_len - cache_len
    if length <= soft_start:
        return 0.0
    if length <= max_len:
        return (soft_start - length) / cache_len
    return -1.0


def repeated_ngram_fraction(tokens: Sequence, n: int) -> float:
    """Share of the response's n-grams that repeat an earlier n-gram, in [0, 1).

    ``tokens``: token ids or words, length T; there are T - n + 1 n-grams, and
    each occurrence after the first of the same n-gram counts as repeated.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    total = len(tokens) - n + 1
    if total <= 1:
        return 0.0
    counts = Counter(tuple(tokens[i:i + n]) for i in range(total))
    return sum(c - 1 for c in counts.values()) / total


def repetition_penalty(tokens: Sequence, n: int, threshold: float = 0.0) -> float:
    """``-max(0, repeated_fraction - threshold) / (1 - threshold)``, in [-1, 0]: nothing below the
    threshold, -1 as the text approaches one n-gram repeated throughout."""
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"threshold must be in [0, 1), got {threshold}")
    excess = repeated_ngram_fraction(tokens, n) - threshold
    return -max(0.0, excess) / (1.0 - threshold)


def pass_rate_reward(passed: int, total: int, mode: str = "rate", threshold: float = 1.0) -> float:
    """Reward from unit-test counts: ``rate`` = passed/total (dense, paper §2.5), ``all`` = 1 only when
    every test passes, ``threshold`` = 1 when the pass rate reaches ``threshold``."""
    if total <= 0 or not 0 <= passed <= total:
        raise ValueError(f"need 0 <= passed <= total and total > 0, got {passed}/{total}")
    rate = passed / total
    if mode == "rate":
        return rate
    if mode == "all":
        return 1.0 if passed == total else 0.0
    if mode == "threshold":
        return 1.0 if rate >= threshold else 0.0
    raise ValueError(f"unknown pass-rate mode '{mode}' (known: rate, all, threshold)")


class OverlongConfig(StrictModel):
    max_len: int = Field(gt=0, description="response tokens at which the penalty reaches -1")
    cache_len: int = Field(gt=0, description="width of the linear zone before max_len")
    weight: float = Field(1.0, ge=0)

    @model_validator(mode="after")
    def _fits(self):
        if self.cache_len > self.max_len:
            raise ValueError(f"cache_len {self.cache_len} > max_len {self.max_len}")
        return self


class RepetitionConfig(StrictModel):
    n: int = Field(4, ge=1, description="n-gram size, in tokens")
    threshold: float = Field(0.2, ge=0, lt=1, description="repeated share tolerated before any penalty")
    weight: float = Field(1.0, ge=0)


class ShapingConfig(StrictModel):
    """Penalties added to the verifier's reward; both off by default."""
    overlong: OverlongConfig | None = None
    repetition: RepetitionConfig | None = None
    units: Literal["tokens"] = "tokens"


def shape(reward: float, tokens: Sequence | None, cfg: ShapingConfig | None) -> dict:
    """``{"reward": total, "verifier": reward, "overlong": p, "repetition": p}`` for one response.

    ``tokens``: the response's token ids (length counts and n-grams are taken
    on them); penalties that need tokens are 0 when they are not given.
    """
    parts = {"verifier": float(reward), "overlong": 0.0, "repetition": 0.0}
    if cfg is not None and tokens is not None:
        if cfg.overlong is not None:
            parts["overlong"] = cfg.overlong.weight * overlong_penalty(len(tokens), cfg.overlong.max_len,
                                                                       cfg.overlong.cache_len)
        if cfg.repetition is not None:
            parts["repetition"] = cfg.repetition.weight * repetition_penalty(tokens, cfg.repetition.n,
                                                                             cfg.repetition.threshold)
    return {"reward": parts["verifier"] + parts["overlong"] + parts["repetition"], **parts}
