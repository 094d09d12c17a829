"""The trainer interface every backend implements (``torch``, ``megatron``), and its registry.

A trainer owns the policy being optimised and its optimizer. Batches are the
engine's teacher-forcing batches (:func:`compass.rl.trainer.batch.build_batch`):
``input_ids``/``attention_mask`` ``[B, L]`` long, ``completion_mask`` ``[B, L]`` bool.

- ``logprobs(batch, routes=None) -> (logp, entropy)``: ``[B, L-1]`` float32 each,
  no grad (the old-log-prob recompute). ``logp[:, t]`` is log p(input_ids[:, t+1]).
- ``update(batch, advantages, old_logp, cfg, routes=None) -> metrics``: one optimizer
  step on the configured policy loss (:func:`compass.rl.algos.losses.policy_loss`). ``advantages``
  ``[B, L-1]``: one per token, aligned with ``logp`` (the estimators' shape); ``old_logp`` ``[B, L-1]``.
- ``routes``: ``[B, L, n_moe_layers, top_k]`` long or None. With routes, every MoE
  layer uses the recorded experts at each position (``-1`` = route freely), while the
  gate weights are still computed from the current router so it keeps its gradient
  (Router Replay).
- ``hf_state_dict()``: the policy's weights under Hugging Face names, for weight sync
  to the rollout side and for the checkpoint.
- ``state_dict()`` / ``load_state_dict(d)``: everything needed to resume exactly
  (weights, optimizer, step).

Capabilities a backend may lack; the defaults below say so explicitly, and the engine asks
for them only through these methods:

- ``logprobs_with_routes(batch) -> (logp, entropy, routes | None)``: free routing, plus the
  experts the trainer's routers picked ``[B, L, n_moe_layers, top_k]`` (None: not recorded);
- ``pre_step_logprobs() -> [B, L-1] | None``: the last ``update``'s forward log-probs, taken
  before its optimizer step (the train–inference gap when the rollout is the trainer's policy);
- ``hf_state_dict_ref() -> object | None``: the weights as a handle a rollout backend with
  ``takes_weight_refs`` loads without a copy through the controller (Ray's object store);
- ``close()``: free what the backend holds (an actor, a process).
"""
from __future__ import annotations

from typing import Protocol

import torch

from compass.registry import Registry


class TrainerBackend(Protocol):
    """What the engine calls on a trainer; backends subclass it to inherit the capability defaults."""
    name: str
    # ability (a class flag): the optimizer steps the HF model it was given, so a rollout in this process
    # reading that model samples from the trainer's own policy (the engine then skips the old-log-prob pass)
    updates_model_in_place: bool = False

    def logprobs(self, batch: dict[str, torch.Tensor],
                 routes: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]: ...

    def update(self, batch: dict[str, torch.Tensor], advantages: torch.Tensor, old_logp: torch.Tensor,
               cfg, routes: torch.Tensor | None = None,
               old_entropy: torch.Tensor | None = None) -> dict[str, float]: ...

    def hf_state_dict(self) -> dict[str, torch.Tensor]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...

    # -- capabilities, with the default of a backend that lacks them ---------------------
    def logprobs_with_routes(self, batch: dict[str, torch.Tensor]
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Free-routing ``logprobs`` and the routes the trainer chose; default: routes not recorded (None)."""
        logp, entropy = self.logprobs(batch, None)
        return logp, entropy, None

    def pre_step_logprobs(self) -> torch.Tensor | None:
        """The last update's pre-step log-probs ``[B, L-1]``; default: not kept (None)."""
        return None

    def hf_state_dict_ref(self) -> object | None:
        """A handle to ``hf_state_dict()`` for a rollout that ``takes_weight_refs``; default: none (None)."""
        return None

    def close(self) -> None:
        """Free the backend's resources; default: nothing to free."""


# name -> the backend's class, called as cls(model, cfg); ``model`` is the HF policy (float32)
TRAINER_BACKENDS = Registry("trainer backend")
register_trainer_backend = TRAINER_BACKENDS.register


# backend name -> the module that registers it, imported only when that backend is asked for
TRAINER_BACKEND_MODULES = {"torch": "compass.rl.trainer.torch_trainer",
                           "fsdp": "compass.rl.trainer.fsdp_trainer",
                           "megatron": "compass.rl.trainer.megatron_trainer"}


def get_trainer_backend(name: str) -> type[TrainerBackend]:
    """The class of trainer backend ``name`` (its flags, and its constructor), importing only its module (``TRAINER_BACKEND_MODULES``)."""
    return TRAINER_BACKENDS.lookup_in_module(name, TRAINER_BACKEND_MODULES)
