"""The carryover: which phase-1 prompts phase 2 keeps training on, and how many (pure functions)."""
from __future__ import annotations

import random
from typing import Sequence, TypeVar

import pyarrow as pa

T = TypeVar("T")


def select_carryover(stats: pa.Table, *, min_pass_rate: float, max_pass_rate: float,
                     min_samples: int = 1) -> list[str]:
    """Prompt ids of a ``prompt_stats`` table whose measured pass rate p lies in
    ``[min_pass_rate, max_pass_rate]`` and rests on at least ``min_samples`` samples.

    Order follows the table; a prompt listed twice is kept once.
    """
    ids = stats.column("prompt_id").to_pylist()
    rates = stats.column("pass_rate").to_pylist()
    counts = stats.column("n_samples").to_pylist()
    out, seen = [], set()
    for pid, p, n in zip(ids, rates, counts):
        if pid in seen or n < min_samples or not (min_pass_rate <= p <= max_pass_rate):
            continue
        seen.add(pid)
        out.append(pid)
    return out


def mix_carryover(in_band: Sequence[T], n_domain: int, ratio: float | None, seed: int) -> list[T]:
    """The carryover prompts phase 2 mixes in: all of ``in_band`` when ``ratio`` is None; else at most
    round(ratio / (1 − ratio) · n_domain) of them, so that they are ``ratio`` of the mix, a seeded sample
    kept in table order (fewer when the band holds fewer: the share is then below ``ratio``)."""
    if ratio is None:
        return list(in_band)
    want = round(ratio / (1.0 - ratio) * n_domain)
    if want >= len(in_band):
        return list(in_band)
    keep = set(random.Random(seed).sample(range(len(in_band)), want))
    return [p for i, p in enumerate(in_band) if i in keep]
