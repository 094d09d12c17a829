"""The trainer interface every backend implements (``torch``, ``megatron``), and its registry.

A trainer owns the policy being optimised and its optimizer. Batches are the
engine's teacher-forcing batches (:func:`stages.rl.engine.build_batch`):
``input_ids``/``attention_mask`` ``[B, L]`` long, ``completion_mask`` ``[B, L]`` bool.

- ``logprobs(batch, routes=None) -> (logp, entropy)``: ``[B, L-1]`` float32 each,
  no grad (the old-log-prob recompute). ``logp[:, t]`` is log p(input_ids[:, t+1]).
- ``update(batch, advantages, old_logp, cfg, routes=None) -> metrics``: one optimizer
  step on the configured policy loss. ``advantages`` is ``[B]`` (one per completion)
  or ``[B, L-1]`` (per token, aligned with ``logp``; RL-ZVP); ``old_logp`` ``[B, L-1]``.
- ``routes``: ``[B, L, n_moe_layers, top_k]`` long or None. With routes, every MoE
  layer uses the recorded experts at each position (``-1`` = route freely), while the
  gate weights are still computed from the current router so it keeps its gradient
  (Router Replay).
- ``hf_state_dict()``: the policy's weights under Hugging Face names, for weight sync
  to the rollout side and for the checkpoint.
- ``state_dict()`` / ``load_state_dict(d)``: everything needed to resume exactly
  (weights, optimizer, step).
"""
from __future__ import annotations

from typing import Protocol

import torch

from stages.common.named_registry import Registry


class TrainerBackend(Protocol):
    name: str

    def logprobs(self, batch: dict[str, torch.Tensor],
                 routes: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]: ...

    def update(self, batch: dict[str, torch.Tensor], advantages: torch.Tensor, old_logp: torch.Tensor,
               cfg, routes: torch.Tensor | None = None) -> dict[str, float]: ...

    def hf_state_dict(self) -> dict[str, torch.Tensor]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


# name -> factory(model, cfg) returning a TrainerBackend; ``model`` is the HF policy (float32)
TRAINER_BACKENDS = Registry("trainer backend")
register_trainer_backend = TRAINER_BACKENDS.register


def get_trainer_backend(name: str):
    """The factory of trainer backend ``name``, importing only its module (``stages.rl.trainer_<name>``)."""
    return TRAINER_BACKENDS.lookup_in_module(name, "stages.rl.trainer_")
