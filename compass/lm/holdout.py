"""A deterministic held-out split by row id, reusable by any stage.

A row is held out when a hash of its ``id`` falls below ``fraction``: the split does not depend on
the table's order, its size or a seed, and a row keeps its side when rows are added or removed.
"""
from __future__ import annotations

import hashlib


def holdout_score(row_id: str) -> float:
    """A uniform number in [0, 1) fixed by ``row_id`` (sha256, first 8 bytes)."""
    return int.from_bytes(hashlib.sha256(str(row_id).encode()).digest()[:8], "big") / 2.0 ** 64


def is_held_out(row_id: str, fraction: float) -> bool:
    """True when the row with this id belongs to the held-out share ``fraction`` (0..1)."""
    return holdout_score(row_id) < fraction


def split_holdout(ids: list[str], fraction: float, min_rows: int = 0) -> list[bool]:
    """Held-out flag per row: :func:`is_held_out`, topped up to ``min_rows`` with the next-lowest
    scores (so a small table still gets a usable held-out set); ``fraction == 0`` holds out nothing.
    Never holds out every row: at least one stays for training."""
    if fraction <= 0 or not ids:
        return [False] * len(ids)
    scores = [holdout_score(i) for i in ids]
    order = sorted(range(len(ids)), key=lambda i: (scores[i], i))      # lowest scores first
    # the rows under ``fraction`` are the first of ``order``: their count, topped up and capped, is how many go
    want = min(max(min_rows, sum(s < fraction for s in scores)), len(ids) - 1)
    flags = [False] * len(ids)
    for i in order[:want]:
        flags[i] = True
    return flags
