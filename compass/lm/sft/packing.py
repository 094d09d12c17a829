"""Sequence packing for SFT: several (ids, labels) samples per row, each attending only to itself.

Pure functions, no model: :func:`pack_samples` lays samples out in rows of at most ``pack_len``
tokens (first-fit decreasing, deterministic); :func:`to_tensors` pads the rows of a micro-batch
to a common width; :func:`segment_mask` gives the attention mask (causal AND same sample).

Each row carries, per token: ``ids``; ``labels`` (the sample's labels, -100 where no loss);
``targets`` (the label the position predicts: the *next* token of the same sample, -100 at a
sample's last token, so no position predicts across a sample boundary); ``positions`` (restart
at 0 for every sample, so RoPE sees each sample exactly as if it were alone); ``segments`` (the
sample's index within the row; -1 on padding).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

IGNORE = -100


@dataclass
class PackedRow:
    ids: list[int] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    targets: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    segments: list[int] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)    # indices (into the input list) of the samples, in row order

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, index: int, ids: list[int], labels: list[int]) -> None:
        seg = len(self.samples)
        self.samples.append(index)
        self.ids += ids
        self.labels += labels
        self.targets += list(labels[1:]) + [IGNORE]
        self.positions += range(len(ids))
        self.segments += [seg] * len(ids)


def pack_samples(samples: list[tuple[list[int], list[int]]], pack_len: int) -> list[PackedRow]:
    """First-fit decreasing: longest sample first, each into the first row with room, else a new row.

    Deterministic (ties broken by input index). Raises ValueError for a sample longer than ``pack_len``
    (never truncate: a cut trace teaches the model to stop mid-thought).
    """
    order = sorted(range(len(samples)), key=lambda i: (-len(samples[i][0]), i))
    rows: list[PackedRow] = []
    for i in order:
        ids, labels = samples[i]
        if len(ids) != len(labels):
            raise ValueError(f"sample {i}: {len(ids)} ids but {len(labels)} labels")
        if len(ids) > pack_len:
            raise ValueError(f"sample {i} has {len(ids)} tokens, more than pack_len={pack_len}")
        for row in rows:
            if len(row) + len(ids) <= pack_len:
                row.add(i, ids, labels)
                break
        else:
            row = PackedRow()
            row.add(i, ids, labels)
            rows.append(row)
    return rows


def to_tensors(rows: list[PackedRow], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad ``rows`` to their longest: ``input_ids``, ``targets``, ``positions``, ``segments`` ``[R, S]``."""
    width = max(len(r) for r in rows)
    out = {"input_ids": torch.full((len(rows), width), pad_id, dtype=torch.long),
           "targets": torch.full((len(rows), width), IGNORE, dtype=torch.long),
           "positions": torch.zeros((len(rows), width), dtype=torch.long),
           "segments": torch.full((len(rows), width), -1, dtype=torch.long)}
    for i, r in enumerate(rows):
        n = len(r)
        out["input_ids"][i, :n] = torch.tensor(r.ids)
        out["targets"][i, :n] = torch.tensor(r.targets)
        out["positions"][i, :n] = torch.tensor(r.positions)
        out["segments"][i, :n] = torch.tensor(r.segments)
    return out


def segment_mask(segments: torch.Tensor) -> torch.Tensor:
    """``[R, S]`` segment ids -> bool ``[R, 1, S, S]``: query i may attend key j iff j <= i and both
    belong to the same sample. Padding (segment -1) attends to padding only, so no query row is
    all-False (which would make attention NaN)."""
    S = segments.shape[1]
    causal = torch.ones(S, S, dtype=torch.bool, device=segments.device).tril()
    same = segments[:, :, None] == segments[:, None, :]
    return (same & causal)[:, None]


def efficiency(rows: list[PackedRow]) -> float:
    """Share of real tokens in the padded ``[R, max len]`` block these rows become."""
    return sum(len(r) for r in rows) / (len(rows) * max(len(r) for r in rows)) if rows else 0.0
