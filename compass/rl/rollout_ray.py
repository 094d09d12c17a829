"""A pool of Ray actors, each running a registered rollout backend on its own copy of the policy.

``RayRolloutPool(backend_name, model, tok, workers=W, threads_per_worker=1, **options)`` is a
rollout backend (:class:`compass.rl.rollout.RolloutBackend`) for the engine's single controller:

- **start**: the model goes to the object store once, as plain data (config, generation
  config, dtype, state dict: :func:`compass.rl.ray_cluster.model_payload`), and so does the
  tokenizer; each of the ``W`` actors rebuilds the model in its own process, sets
  ``torch.set_num_threads(threads_per_worker)`` and builds
  ``get_rollout_backend(backend_name)(model_copy, tok, **options)``. ``share`` is forced
  False there (for ``hf``, ``native`` and any backend given the option): an actor's model
  is a copy, so "the trainer updates this very model" is never true and weights must be
  synced; an actor whose backend still reports ``shared`` refuses to start.
- **generate**: the prompts are split over the actors by longest-processing-time first
  (:func:`plan_shards`), every shard is sent at once, and the groups come back in the
  original prompt order with every :class:`~compass.rl.rollout.Completion` field as the
  backend made it (ids, text, logprobs, entropies, routes, finished; numpy arrays are
  copied out of the read-only object store).
- **seeds**: shard ``k`` of ``W`` samples with seed ``sampling.seed * W + k``
  (:func:`shard_seed`): distinct for every (seed, shard) pair at a given ``W``, so a
  result is reproducible for a given worker count (with one worker it is the backend's
  own result for ``sampling.seed``). Other worker counts sample other, equally valid,
  streams.
- **generate_stream**: the same work, yielding ``(prompt_index, group)`` as each shard
  finishes, so the controller can score rewards while other shards still generate.
- **sync_weights**: the state dict goes to the object store once and every actor copies it
  into its model in place (the inner backend's ``sync_weights``). An ``ObjectRef`` to a
  state dict (e.g. :meth:`compass.rl.trainer_ray.RayTrainer.hf_state_dict_ref`) is passed on
  as is, so trainer weights reach the rollout actors without a trip through the driver.
- **close**: asks each backend to close (a vLLM worker process must be stopped), then kills
  the actors.

``actor_options`` go to Ray's ``.options()`` for every actor (``num_gpus``, ``resources``,
``runtime_env``, ...). By default an actor requests 0 Ray CPUs: its thread count is what
bounds its compute, and a 0 request never leaves a pool waiting for CPUs that a trainer
actor or the driver already holds on a small machine.
"""
from __future__ import annotations

import dataclasses
import heapq
import os
from typing import Iterator, Sequence

import numpy as np

from compass.rl.ray_cluster import (ensure_ray, kill_actors, model_from_payload, model_payload, remote_class,
                                   start_actors)
from compass.rl.rollout import Completion, RolloutBackend, SamplingParams, get_rollout_backend
from compass.runtime.runner import InfraError

import ray  # noqa: E402,I001  (after compass.rl.ray_cluster, which sets Ray's environment)


# backends whose ``share`` option defaults to True (reading the trainer's model in place)
SHARING_BACKENDS = ("hf", "native")


def shard_seed(seed: int, shard: int, workers: int) -> int:
    """The sampling seed of shard ``shard`` of ``workers``: ``seed * workers + shard``.

    A bijection from (seed, shard) to integers for a fixed ``workers``, so no two shards of
    any two calls share a seed; one worker keeps ``seed``."""
    if not 0 <= shard < workers:
        raise ValueError(f"shard {shard} out of range for {workers} workers")
    return seed * workers + shard


def plan_shards(prompt_ids: Sequence[Sequence[int]], n: int, max_new_tokens: int, workers: int) -> list[list[int]]:
    """Prompt indices for each of ``workers`` shards, balanced by longest-processing-time first.

    The work of prompt ``i`` is taken as ``n * (len(prompt_i) + max_new_tokens)``: its
    prefill plus the decode budget of its ``n`` samples (completion lengths are not known
    before generation). Prompts go, heaviest first (ties: lower index first), to the shard
    with the least work so far (ties: lower shard). Indices within a shard are ascending.
    Deterministic; shards may be empty when there are fewer prompts than workers.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    cost = [n * (len(p) + max_new_tokens) for p in prompt_ids]
    shards: list[list[int]] = [[] for _ in range(workers)]
    loads = [(0, k) for k in range(workers)]           # a heap of (work so far, shard)
    for i in sorted(range(len(cost)), key=lambda i: (-cost[i], i)):
        load, k = heapq.heappop(loads)
        shards[k].append(i)
        heapq.heappush(loads, (load + cost[i], k))
    return [sorted(s) for s in shards]


class _RolloutActor:
    """One rollout backend on its own copy of the policy, in its own process."""

    def __init__(self, backend_name: str, payload: dict, tok, threads: int, options: dict):
        import torch
        torch.set_num_threads(threads)          # before any op: this process's share of the cores
        self.backend = get_rollout_backend(backend_name)(model_from_payload(payload), tok, **options)
        if getattr(self.backend, "shared", False):
            raise RuntimeError(f"the {backend_name} rollout shares its model with a trainer, which an actor's copy "
                               f"never is: pass share=False (or add {backend_name!r} to SHARING_BACKENDS)")

    def ready(self) -> int:
        return os.getpid()

    def generate(self, prompt_ids, n: int, sampling: SamplingParams) -> list[list[Completion]]:
        return self.backend.generate(prompt_ids, n, sampling)

    def sync_weights(self, state_dict: dict) -> None:
        self.backend.sync_weights(state_dict)

    def close(self) -> None:
        self.backend.close()


def _own_arrays(c: Completion) -> None:
    """Numpy arrays from ``ray.get`` are read-only views of the object store: copy them, so a
    completion is as writable as one made in process (``torch.from_numpy`` warns on read-only
    arrays) and does not pin store memory for as long as it lives."""
    for field in ("logprobs", "entropies", "routes"):
        value = getattr(c, field)
        if isinstance(value, np.ndarray) and not value.flags.writeable:
            setattr(c, field, value.copy())


class RayRolloutPool(RolloutBackend):
    """A :class:`~compass.rl.rollout.RolloutBackend` whose work runs in ``workers`` Ray actors."""
    takes_weight_refs = True            # sync_weights passes an ObjectRef on to the actors as is

    def __init__(self, backend_name: str, model, tok, *, workers: int, threads_per_worker: int = 1,
                 actor_options: dict | None = None, ready_timeout_s: float = 600.0, **options):
        """``model`` (an HF causal LM) and ``tok`` are copied to every actor; ``options`` go to the
        backend's factory (``dtype``, ``record_routes``, ...); ``actor_options`` to Ray's
        ``.options()`` (default ``{"num_cpus": 0}``). Raises ValueError for an unknown backend
        name (the registry's message, before anything starts) or ``workers`` < 1; RuntimeError
        when an actor fails to build or is not placed within ``ready_timeout_s``."""
        if workers < 1:
            raise ValueError(f"RayRolloutPool: workers must be >= 1, got {workers}")
        if threads_per_worker < 1:
            raise ValueError(f"RayRolloutPool: threads_per_worker must be >= 1, got {threads_per_worker}")
        get_rollout_backend(backend_name)      # an unknown name fails here, with the known ones listed
        ensure_ray()
        options = dict(options)
        if backend_name in SHARING_BACKENDS or "share" in options:    # the actor's model is a copy: weights must sync
            options["share"] = False
        self.name, self.workers, self.threads_per_worker = backend_name, workers, threads_per_worker
        payload, tok_ref = ray.put(model_payload(model)), ray.put(tok)
        cls = remote_class(_RolloutActor).options(**{"num_cpus": 0, **(actor_options or {})})
        self.actors = start_actors(lambda: cls.remote(backend_name, payload, tok_ref, threads_per_worker, options),
                                   workers, ready_timeout_s, f"rollout pool ({backend_name})")

    def shards(self, prompt_ids: Sequence[Sequence[int]], n: int,
               sampling: SamplingParams) -> list[tuple[list[int], SamplingParams]]:
        """Per actor: its prompt indices (:func:`plan_shards`) and its sampling (seed :func:`shard_seed`)."""
        plan = plan_shards(prompt_ids, n, sampling.max_new_tokens, self.workers)
        return [(idx, dataclasses.replace(sampling, seed=shard_seed(sampling.seed, k, self.workers)))
                for k, idx in enumerate(plan)]

    def generate_stream(self, prompt_ids: Sequence[Sequence[int]], n: int,
                        sampling: SamplingParams) -> Iterator[tuple[int, list[Completion]]]:
        """Start every shard now; iterate ``(prompt_index, group of n completions)`` as shards finish.

        Each index comes exactly once; within a shard in ascending order, shards in order of
        completion. Abandoning the iterator leaves the remaining shards to finish on their
        actors (a later call waits behind them)."""
        if not self.actors:
            raise RuntimeError("RayRolloutPool is closed")
        pending = {}
        for k, (idx, shard_sampling) in enumerate(self.shards(prompt_ids, n, sampling)):
            if idx:
                ref = self.actors[k].generate.remote([list(prompt_ids[i]) for i in idx], n, shard_sampling)
                pending[ref] = (k, idx)
        return self._collect(pending)

    def _collect(self, pending: dict) -> Iterator[tuple[int, list[Completion]]]:
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            k, idx = pending.pop(ref)
            try:
                groups = ray.get(ref)
            except ray.exceptions.RayActorError as e:
                # The process is gone (killed, out of memory, node lost): a machinery failure, so the
                # orchestrator's retry may run the stage again, which resumes from its saved state.
                why = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
                self.close(timeout_s=5.0)      # the others may be mid-shard: do not wait for work no one reads
                raise InfraError(f"rollout pool ({self.name}): actor {k} of {self.workers} died while generating "
                                 f"{len(idx)} prompt(s): {type(e).__name__}: {why}") from e
            if len(groups) != len(idx):
                raise RuntimeError(f"a rollout actor returned {len(groups)} groups for {len(idx)} prompts")
            for group in groups:
                for c in group:
                    _own_arrays(c)
            yield from zip(idx, groups)

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, sampling: SamplingParams) -> list[list[Completion]]:
        """``len(prompt_ids)`` groups of ``n`` completions, in prompt order (shards run concurrently)."""
        out: list = [None] * len(prompt_ids)
        for i, group in self.generate_stream(prompt_ids, n, sampling):
            out[i] = group
        return out

    def sync_weights(self, state_dict) -> None:
        """Load a state dict (HF names), or an ``ObjectRef`` to one, into every actor's model."""
        if not isinstance(state_dict, ray.ObjectRef):
            state_dict = ray.put({k: v.detach().cpu() for k, v in state_dict.items()})
        ray.get([a.sync_weights.remote(state_dict) for a in self.actors])

    def close(self, timeout_s: float = 60.0) -> None:
        """Close every backend (bounded by ``timeout_s``), then kill the actors. Idempotent."""
        actors, self.actors = self.actors, []
        if not actors:
            return
        try:
            ray.get([a.close.remote() for a in actors], timeout=timeout_s)
        except Exception:  # noqa: BLE001 - a dead or stuck actor is killed below anyway
            pass
        kill_actors(actors)

    def __enter__(self) -> "RayRolloutPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
