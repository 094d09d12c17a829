"""The teacher-forcing batch one RL step trains on, and the rollout's per-token values laid out like it.

Layout: completion ``i`` is ``prefix_i + ids_i``, right-padded to ``L`` tokens, so every real
token sits at its natural position. The trainer's per-token tensors are ``[B, L-1]``: position
``t`` scores token ``t+1``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np
import torch


def build_batch(prefixes: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded teacher-forcing batch of ``prefix + completion`` token ids.

    Returns ``input_ids`` ``[B, L]`` long, ``attention_mask`` ``[B, L]`` long and
    ``completion_mask`` ``[B, L]`` bool (True on completion tokens). Right
    padding keeps every real token at its natural position 0..len-1.
    """
    if len(prefixes) != len(completions):
        raise ValueError(f"build_batch: {len(prefixes)} prefixes for {len(completions)} completions")
    seqs = [list(p) + list(c) for p, c in zip(prefixes, completions)]
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), n), dtype=torch.long)
    comp = torch.zeros((len(seqs), n), dtype=torch.bool)
    for i, (p, s) in enumerate(zip(prefixes, seqs)):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        attn[i, :len(s)] = 1
        comp[i, len(p):len(s)] = True
    return {"input_ids": ids, "attention_mask": attn, "completion_mask": comp}


def routes_batch(prefixes: Sequence[Sequence[int]], completions: Sequence, width: int) -> torch.Tensor | None:
    """Per-completion routes ``[len(prefix)+len(ids), layers, k]`` -> ``[B, width, layers, k]`` long, aligned
    with :func:`build_batch` (right padding; ``-1`` = not recorded). None when any completion has none."""
    if not completions or any(c.routes is None for c in completions):
        return None
    layers, k = completions[0].routes.shape[1:]
    out = torch.full((len(completions), width, layers, k), -1, dtype=torch.long)
    for i, c in enumerate(completions):
        r = torch.from_numpy(c.routes.astype(np.int64))
        out[i, :r.shape[0]] = r[:width]
    return out


def rollout_values(field: str, prefixes: Sequence[Sequence[int]], completions: Sequence,
                   shape: tuple[int, int]) -> torch.Tensor:
    """The rollout's per-token ``field`` (``logprobs`` or ``entropies``, ``[len(ids)]`` each) laid out
    like the trainer's ``[B, L-1]`` tensors (position ``t`` scores token ``t+1``), 0 elsewhere."""
    out = torch.zeros(shape, dtype=torch.float32)
    for i, (p, c) in enumerate(zip(prefixes, completions)):
        out[i, len(p) - 1: len(p) - 1 + len(c.ids)] = torch.from_numpy(np.asarray(getattr(c, field), dtype=np.float32))
    return out


@dataclass
class TrainBatch:
    """One step's completions, flattened group-major, with their teacher-forcing batch.

    ``prefixes``/``completions``: ``B`` each; ``tensors``: :func:`build_batch`'s; ``mask``: ``[B, L-1]``
    bool (completion tokens, aligned with log-probs); ``routes``: ``[B, L, layers, k]`` or None.
    """
    prefixes: list[list[int]]
    completions: list
    tensors: dict[str, torch.Tensor]
    mask: torch.Tensor
    routes: torch.Tensor | None

    @classmethod
    def of(cls, prefixes: list[list[int]], completions: list, pad_id: int, with_routes: bool) -> "TrainBatch":
        tensors = build_batch(prefixes, [c.ids for c in completions], pad_id)
        routes = routes_batch(prefixes, completions, tensors["input_ids"].shape[1]) if with_routes else None
        return cls(prefixes, completions, tensors, tensors["completion_mask"][:, 1:], routes)

    def rollout(self, field: str) -> torch.Tensor:
        """The rollout's ``logprobs`` or ``entropies`` as ``[B, L-1]`` (:func:`rollout_values`)."""
        return rollout_values(field, self.prefixes, self.completions, tuple(self.mask.shape))

    @cached_property
    def rollout_logp(self) -> torch.Tensor:
        """The rollout's log-probs ``[B, L-1]``, laid out once per batch (several measurements read them)."""
        return self.rollout("logprobs")

    def rows(self, idx: torch.Tensor) -> "TrainBatch":
        """The completions at ``idx`` (a mini-batch)."""
        rows = idx.tolist()
        return TrainBatch([self.prefixes[i] for i in rows], [self.completions[i] for i in rows],
                          {k: v[idx] for k, v in self.tensors.items()}, self.mask[idx],
                          None if self.routes is None else self.routes[idx])
