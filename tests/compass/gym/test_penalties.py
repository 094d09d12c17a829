"""Reward shaping: DAPO overlong penalty, n-gram repetition, pass-rate rewards (hand-computed values)."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from compass.gym.penalties import (OverlongConfig, RepetitionConfig, ShapingConfig, overlong_penalty,
                                  pass_rate_reward, repeated_ngram_fraction, repetition_penalty, shape)


@pytest.mark.parametrize("length,expected", [
    (0, 0.0), (80, 0.0),            # up to max_len - cache_len = 80: no penalty
    (81, -1 / 20), (90, -0.5), (100, -1.0),
    (101, -1.0), (10_000, -1.0),
])
def test_overlong_penalty_dapo(length, expected):
    assert overlong_penalty(length, max_len=100, cache_len=20) == pytest.approx(expected)


def test_overlong_rejects_bad_windows():
    with pytest.raises(ValueError):
        overlong_penalty(5, max_len=10, cache_len=0)
    with pytest.raises(ValidationError):
        OverlongConfig(max_len=10, cache_len=20)


def test_repeated_ngram_fraction():
    assert repeated_ngram_fraction([1, 2, 3, 4, 5], 2) == 0.0
    # bigrams of 1 2 1 2 1 2: (1,2)x3, (2,1)x2 -> 3 repeats out of 5
    assert repeated_ngram_fraction([1, 2, 1, 2, 1, 2], 2) == pytest.approx(3 / 5)
    assert repeated_ngram_fraction("a a a a".split(), 1) == pytest.approx(3 / 4)
    assert repeated_ngram_fraction([1], 3) == 0.0


def test_repetition_penalty_threshold():
    toks = [1, 2, 1, 2, 1, 2]                         # repeated share 0.6
    assert repetition_penalty(toks, 2, threshold=0.0) == pytest.approx(-0.6)
    assert repetition_penalty(toks, 2, threshold=0.2) == pytest.approx(-(0.6 - 0.2) / 0.8)
    assert repetition_penalty(toks, 2, threshold=0.7) == 0.0
    assert repetition_penalty(list(range(50)), 4) == 0.0


@pytest.mark.parametrize("passed,total,mode,expected", [
    (3, 4, "rate", 0.75), (3, 4, "all", 0.0), (4, 4, "all", 1.0), (3, 4, "threshold", 0.0),
])
def test_pass_rate_reward(passed, total, mode, expected):
    assert pass_rate_reward(passed, total, mode) == expected


def test_pass_rate_threshold_and_errors():
    assert pass_rate_reward(3, 4, "threshold", threshold=0.75) == 1.0
    with pytest.raises(ValueError):
        pass_rate_reward(5, 4)
    with pytest.raises(ValueError):
        pass_rate_reward(1, 4, "sometimes")


def test_shape_adds_the_parts():
    cfg = ShapingConfig(overlong=OverlongConfig(max_len=10, cache_len=4, weight=0.5),
                        repetition=RepetitionConfig(n=1, threshold=0.0, weight=1.0))
    toks = [7] * 8                                     # 8 tokens: 2 into the soft zone; 7/8 repeated
    parts = shape(1.0, toks, cfg)
    assert parts["overlong"] == pytest.approx(0.5 * -0.5)
    assert parts["repetition"] == pytest.approx(-7 / 8)
    assert parts["reward"] == pytest.approx(1.0 - 0.25 - 7 / 8)
    assert shape(1.0, None, cfg)["reward"] == 1.0      # no tokens, no length to judge
    assert shape(0.3, toks, None)["reward"] == 0.3
