"""The rollout interface every backend implements (``hf``, ``vllm``), and its registry.

``backend.generate(prompt_ids, n, sampling) -> list[list[Completion]]``: for each
prompt (already chat-formatted and tokenized), ``n`` sampled completions with
what the trainer needs to measure and remove the train–inference mismatch:

- ``ids``       completion token ids (eos included when produced)
- ``logprobs``  ``[len(ids)]`` float32: log-prob of each sampled token under the
                sampler's distribution (``logits / temperature``), as the engine computed it
- ``entropies`` ``[len(ids)]`` float32 or None: the sampler's entropy at each step
- ``routes``    ``[len(prompt_ids) + len(ids), n_moe_layers, top_k]`` int16 or None:
                the experts each MoE layer routed every position to during rollout
                (prompt positions from the prefill, then one row per generated token;
                the row of the last token is ``-1`` when the engine never ran it, as
                in KV-cached decoding). ``-1`` anywhere means "not recorded: route freely".

``backend.sync_weights(state_dict)`` loads the trainer's weights (HF names) before
the next rollout; ``backend.close()`` frees its resources.

Capabilities a backend may lack (the protocol's defaults say so; the engine asks only through these):

- ``generate_samples(prompt_ids, n, sampling)`` yields lists of ``(prompt index, sample index, completion)``
  as samples finish (the samples that finished together), so its reward is scored while the others still generate (paper §3.2.2); default:
  every sample once ``generate`` returns. ``generate_stream`` is the same by whole groups;
- ``takes_weight_refs``: ``sync_weights`` also accepts the trainer's ``hf_state_dict_ref()``
  (weights that go from a trainer actor to rollout actors without the controller); default False.

Abilities are class attributes (flags), so the engine, the Ray pool and the evaluation sampler ask the
backend's class before building it and never compare names (see :class:`RolloutBackend`). A new backend
is one file that subclasses :class:`RolloutBackend`, sets its flags and registers itself, plus its line
in ``ROLLOUT_BACKEND_MODULES``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol, Sequence

import numpy as np

from compass.registry import Registry
from compass.rl.rollout.detokenize import completion_text


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 48
    temperature: float = 1.0
    seed: int = 0
    # per prompt: its own token budget (<= max_new_tokens), e.g. per-task limits; None: max_new_tokens for all.
    # The native backend honours it; others refuse it.
    budgets: tuple[int, ...] | None = None
    # per prompt: the random stream of its first sample (sample s draws from stream + s), so a prompt's samples
    # are the same whichever batch, order or worker it goes to; None: p * n for prompt p of the call. Native only
    # (others sample from their own generator).
    streams: tuple[int, ...] | None = None


@dataclass
class Completion:
    ids: list[int]
    text: str | None                      # None: not decoded yet (the backend's detokenize=False)
    logprobs: np.ndarray                  # [len(ids)] float32
    entropies: np.ndarray | None = None   # [len(ids)] float32
    routes: np.ndarray | None = None      # [len(prompt)+len(ids), layers, top_k] int16, -1 = not recorded
    finished: bool = False                # ended with eos (else truncated at max_new_tokens)


class RolloutBackend(Protocol):
    """What the engine calls on a rollout; backends subclass it to inherit the capability defaults."""
    name: str
    # -- abilities (class flags; the defaults are a backend that lacks them) --------------------------
    runs_model_here: bool = False     # the HF model in this process: options share, record_routes, detokenize
    seeded_streams: bool = False      # draws follow SamplingParams.streams: a prompt's samples are the same on any shard
    per_prompt_budgets: bool = False  # honours SamplingParams.budgets (rollout.max_new_tokens_by_task)
    takes_weight_refs: bool = False   # sync_weights accepts a trainer's hf_state_dict_ref()
    chat_sample_equivalent: bool = False  # in-process greedy/sampled text equals compass.lm.chat.sample's, which
                                          # evaluation then calls directly (hf: both are transformers' generate)
    splits_by_work: bool = False      # generate_samples takes the prompts' predicted work and orders it itself
                                      # (a Ray pool), reporting its plan in last_schedule

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int,
                 sampling: SamplingParams) -> list[list[Completion]]: ...

    def sync_weights(self, state_dict: dict) -> None: ...

    def release_memory(self) -> None:
        """The trainer is about to update: give back what the rollout holds on the accelerator until the next
        ``sync_weights`` or ``generate`` (vllm colocated on a GPU sleeps). Default: nothing to give back."""

    def close(self) -> None: ...

    def generate_samples(self, prompt_ids: Sequence[Sequence[int]], n: int,
                         sampling: SamplingParams) -> Iterator[list[tuple[int, int, Completion]]]:
        """Lists of ``(prompt index, sample index, completion)`` that finished together, each sample once;
        default: one list of every sample once ``generate`` returns."""
        yield [(i, s, c) for i, group in enumerate(self.generate(prompt_ids, n, sampling)) for s, c in enumerate(group)]

    def generate_stream(self, prompt_ids: Sequence[Sequence[int]], n: int,
                        sampling: SamplingParams) -> Iterator[tuple[int, list[Completion]]]:
        """``(prompt index, group)`` as each group's last sample finishes (from :meth:`generate_samples`)."""
        groups: dict[int, list] = {}
        for done in self.generate_samples(prompt_ids, n, sampling):
            for i, s, c in done:
                g = groups.setdefault(i, [None] * n)
                g[s] = c
                if all(x is not None for x in g):
                    yield i, groups.pop(i)


class LocalModelRollout(RolloutBackend):
    """What the backends that run an HF model in this process (``native``, ``hf``) share: the rollout model
    and its weight sync.

    ``share``: the trainer updates ``model`` in place (the torch trainer), so a rollout in the model's own
    dtype reads it directly and needs no sync. Otherwise the rollout keeps a copy in ``dtype`` (e.g. a
    bfloat16 copy of a float32 trainer: the usual inference/training precision split) and
    ``sync_weights`` loads every step's new weights into it.

    ``detokenize`` False leaves ``Completion.text`` None: the engine decodes in worker processes instead.

    ``device``: where the rollout computes (:func:`compass.lm.device.resolve_device`; None: where ``model``
    is). A rollout on another device than the model keeps its own copy there, synced like a dtype copy.
    """
    name = "local"
    runs_model_here = True

    def __init__(self, model, tok, *, dtype: str = "float32", record_routes: bool = False, share: bool = True,
                 detokenize: bool = True, device: str | None = None):
        import copy
        import torch

        from compass.lm.device import model_device, resolve_device
        dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        if dtype not in dtypes:
            raise ValueError(f"{self.name} rollout: dtype must be one of {sorted(dtypes)}, got {dtype!r}")
        self.tok = tok
        self.dtype = dtypes[dtype]
        here = model_device(model)
        self.device = here if device is None else resolve_device(device)
        self.shared = share and self.dtype == next(model.parameters()).dtype and self.device == here
        self.model = model if self.shared else copy.deepcopy(model).to(device=self.device, dtype=self.dtype)
        self.record_routes = record_routes
        self.detokenize = detokenize         # False: text is None, the caller decodes (compass.rl.rollout.detokenize)

    def sync_weights(self, state_dict: dict) -> None:
        """Load the trainer's weights (HF names). A no-op when the rollout reads the trainer's model."""
        if self.shared:
            return
        import torch
        with torch.no_grad():
            own = self.model.state_dict()
            for k, v in state_dict.items():
                own[k].copy_(v.to(own[k].dtype))

    def close(self) -> None:
        self.model = None

    def completion(self, ids: list[int], logprobs, entropies, routes) -> "Completion":
        """A :class:`Completion` of sampled ``ids`` (cut after eos): text without eos/pad, int16 routes."""
        eos = self.tok.eos_token_id
        return Completion(ids=ids, text=completion_text(self.tok, ids) if self.detokenize else None,
                          logprobs=np.asarray(logprobs, dtype=np.float32),
                          entropies=None if entropies is None else np.asarray(entropies, dtype=np.float32),
                          routes=None if routes is None else np.asarray(routes).astype(np.int16),
                          finished=bool(ids) and ids[-1] == eos)


# name -> the backend's class, called as cls(model, tok, **options) (options: dtype, record_routes, share, ...)
ROLLOUT_BACKENDS = Registry("rollout backend")
register_rollout_backend = ROLLOUT_BACKENDS.register


# backend name -> the module that registers it, imported only when that backend is asked for
ROLLOUT_BACKEND_MODULES = {"native": "compass.rl.rollout.native", "hf": "compass.rl.rollout.hf",
                           "vllm": "compass.rl.rollout.vllm_client"}


def get_rollout_backend(name: str) -> type[RolloutBackend]:
    """The class of rollout backend ``name`` (its flags, and its constructor), importing only its module (``ROLLOUT_BACKEND_MODULES``)."""
    return ROLLOUT_BACKENDS.lookup_in_module(name, ROLLOUT_BACKEND_MODULES)


def all_rollout_backends() -> dict[str, type[RolloutBackend]]:
    """Every registered backend's class by name (imports each backend's module; the heavy parts of a
    backend, such as vLLM's environment, load only when it is built)."""
    return {name: get_rollout_backend(name) for name in ROLLOUT_BACKEND_MODULES}
