"""The carryover filter: which phase-1 prompts phase 2 keeps training on (pure, table in -> ids out)."""
from __future__ import annotations

import pyarrow as pa


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
