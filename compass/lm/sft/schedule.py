"""Learning-rate schedule of the SFT trainer: linear warmup, then cosine decay to a floor."""
from __future__ import annotations

import math


def lr_at(step: int, *, lr: float, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0) -> float:
    """Learning rate of optimizer step ``step`` (0-based) out of ``total_steps``.

    Warmup: ``lr * (step + 1) / (warmup_steps + 1)`` for ``step < warmup_steps`` (never 0, so the
    first step already learns). Then a half cosine from ``lr`` (at ``step == warmup_steps``) towards
    ``min_lr_ratio * lr``, reached at ``step == total_steps`` (one past the last step).
    ``min_lr_ratio = 1`` is warmup then constant.
    """
    if step < warmup_steps:
        return lr * (step + 1) / (warmup_steps + 1)
    floor = min_lr_ratio * lr
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    return floor + (lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
