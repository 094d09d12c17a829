"""A pool of Ray actors, each running a registered rollout backend on its own copy of the policy.

``RayRolloutPool(backend_name, model, tok, workers=W, threads_per_worker=1, **options)`` is a
rollout backend (:class:`compass.rl.rollout.base.RolloutBackend`) for the engine's single controller:

- **start**: the model goes to the object store once, as plain data (config, generation
  config, dtype, state dict: :func:`compass.rl.ray_cluster.model_payload`), and so does the
  tokenizer; each of the ``W`` actors rebuilds the model in its own process, sets
  ``torch.set_num_threads(threads_per_worker)`` and builds
  ``get_rollout_backend(backend_name)(model_copy, tok, **options)``. ``share`` is forced
  False there (for ``hf``, ``native`` and any backend given the option): an actor's model
  is a copy, so "the trainer updates this very model" is never true and weights must be
  synced; an actor whose backend still reports ``shared`` refuses to start.
- **generate_samples**: the prompts are split over the actors by predicted work
  (:func:`plan_shards`: ``partitioner`` over each prompt's predicted cost, longest first within a
  shard; paper §3.1.1), every shard is sent at once, and each actor streams back the samples of
  every decode step that ended some (a Ray streaming generator), so rewards are scored while the
  others still generate (§3.2.2). Every :class:`~compass.rl.rollout.base.Completion` field comes as the
  backend made it (numpy arrays are copied out of the read-only object store). ``generate_stream``
  (whole groups) and ``generate`` (all, in prompt order) are built on it; :attr:`last_schedule`
  holds the step's per-actor finish times, makespan and idle shares.
- **faults**: an actor that dies mid-step has the samples it had not returned sent to the live
  actors and is replaced after the step (with the last synced weights); the step ends with every
  sample exactly once (checked). With no live actor left, or the restarts spent, one InfraError line.
- **seeds**: every shard samples with the call's seed and each prompt's random stream as if the
  whole call were one batch (``SamplingParams.streams``; the native decoder draws counter-based
  numbers per row), so the native backend returns the same completions on any number of workers,
  with any split, and a re-sent sample is the one the dead actor would have made. Backends that
  sample from their own generator (``hf``) get seed :func:`shard_seed` per shard instead: the
  same completions for a given worker count and split only.
- **sync_weights**: the state dict goes to the object store once and every actor copies it
  into its model in place (the inner backend's ``sync_weights``). An ``ObjectRef`` to a
  state dict (e.g. :meth:`compass.rl.trainer.ray_actor.RayTrainer.hf_state_dict_ref`) is passed on
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
import logging
import os
import time
from typing import Iterator, Sequence

import numpy as np

from compass.rl.ray_cluster import (ensure_ray, kill_actors, model_from_payload, model_payload, remote_class,
                                   start_actors)
from compass.rl.sampling.length_balance import get_partitioner, longest_first, schedule_metrics
from compass.rl.rollout.base import Completion, RolloutBackend, SamplingParams, get_rollout_backend
from compass.runtime.runner import InfraError

import ray  # noqa: E402,I001  (after compass.rl.ray_cluster, which sets Ray's environment)

log = logging.getLogger("compass.rl.rollout.ray_pool")


def shard_seed(seed: int, shard: int, workers: int) -> int:
    """For backends that sample from their own generator: shard ``shard`` of ``workers`` samples with seed
    ``seed * workers + shard``, distinct for every (seed, shard) pair at a given ``workers`` (one keeps
    ``seed``), so no two shards share a random stream."""
    if not 0 <= shard < workers:
        raise ValueError(f"shard {shard} out of range for {workers} workers")
    return seed * workers + shard


def plan_shards(prompt_ids: Sequence[Sequence[int]], n: int, max_new_tokens: int, workers: int,
                work: Sequence[float] | None = None, partitioner: str = "lpt") -> list[list[int]]:
    """Prompt indices for each of ``workers`` shards, longest predicted first within a shard.

    ``work[i]`` is prompt ``i``'s predicted cost (``compass.rl.sampling.length_predict``: ``n`` x predicted tokens);
    without it, ``n * (len(prompt_i) + max_new_tokens)``: its prefill plus the decode budget of its ``n``
    samples. ``partitioner`` names a :data:`compass.rl.sampling.length_balance.PARTITIONERS` entry (``lpt``,
    ``karmarkar_karp``, ``round_robin``). Deterministic; shards may be empty when there are fewer prompts
    than workers.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if work is None:
        work = [n * (len(p) + max_new_tokens) for p in prompt_ids]
    elif len(work) != len(prompt_ids):
        raise ValueError(f"work has {len(work)} entries for {len(prompt_ids)} prompts")
    return [longest_first(s, work) for s in get_partitioner(partitioner)(work, workers)]


def with_streams(sampling: SamplingParams, prompts: int, n: int) -> SamplingParams:
    """``sampling`` with every prompt's random stream set: ``p * n`` for prompt ``p`` (one batch's default)
    unless the caller set them."""
    if sampling.streams is not None:
        return sampling
    return dataclasses.replace(sampling, streams=tuple(p * n for p in range(prompts)))


def _subset(sampling: SamplingParams, idx: Sequence[int]) -> SamplingParams:
    """``sampling`` for the prompts ``idx``: their budgets and streams, where set."""
    pick = lambda xs: None if xs is None else tuple(xs[i] for i in idx)    # noqa: E731
    return dataclasses.replace(sampling, budgets=pick(sampling.budgets), streams=pick(sampling.streams))


class _RolloutActor:
    """One rollout backend on its own copy of the policy, in its own process."""

    def __init__(self, backend_name: str, payload: dict, tok, threads: int, options: dict):
        import torch
        torch.set_num_threads(threads)          # before any op: this process's share of the cores
        self.backend = get_rollout_backend(backend_name)(model_from_payload(payload), tok, **options)
        if getattr(self.backend, "shared", False):
            raise RuntimeError(f"the {backend_name} rollout shares its model with a trainer, which an actor's copy "
                               f"never is: pass share=False (or set runs_model_here on its class)")

    def ready(self) -> int:
        return os.getpid()

    def generate(self, prompt_ids, n: int, sampling: SamplingParams) -> list[list[Completion]]:
        return self.backend.generate(prompt_ids, n, sampling)

    def generate_samples(self, prompt_ids, n: int, sampling: SamplingParams):
        """A Ray streaming generator of the backend's lists of finished ``(prompt index, sample index,
        completion)`` (one object per decode step that ended rows, not one per sample), then ``{"end": wall
        time}``: when this actor finished, which the driver, busy scoring, may learn later."""
        yield from self.backend.generate_samples(prompt_ids, n, sampling)
        yield {"end": time.time()}

    def pid(self) -> int:
        return os.getpid()

    def sync_weights(self, state_dict: dict) -> None:
        self.backend.sync_weights(state_dict)

    def receive_weights(self, message: dict) -> None:
        """The weights broadcast by the pool's sender (``weight_transport`` ``collective``), copied into the
        backend's model as each bucket arrives."""
        from compass.rl.rollout.weight_transport import Receiver
        if getattr(self, "_receiver", None) is None:
            self._receiver = Receiver()
        self.backend.sync_weights(dict(self._receiver.receive(message)))

    def release_memory(self) -> None:
        self.backend.release_memory()

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


WEIGHT_SYNCS = ("object_store", "broadcast")


class RayRolloutPool(RolloutBackend):
    """A :class:`~compass.rl.rollout.base.RolloutBackend` whose work runs in ``workers`` Ray actors."""
    takes_weight_refs = True            # sync_weights passes an ObjectRef on to the actors as is
    splits_by_work = True

    def __init__(self, backend_name: str, model, tok, *, workers: int, threads_per_worker: int = 1,
                 actor_options: dict | None = None, ready_timeout_s: float = 600.0, partitioner: str = "lpt",
                 max_actor_restarts: int = 3, weight_sync: str = "object_store",
                 bucket_bytes: int | None = None, broadcast_timeout_s: float = 120.0, **options):
        """``model`` (an HF causal LM) and ``tok`` are copied to every actor; ``options`` go to the
        backend's factory (``dtype``, ``record_routes``, ...); ``actor_options`` to Ray's
        ``.options()`` (default ``{"num_cpus": 0}``). ``partitioner``: how a step's prompts are split
        (:data:`compass.rl.sampling.length_balance.PARTITIONERS`). ``max_actor_restarts``: actors that die are
        replaced this many times in the pool's life (their unfinished samples always go to the live ones).
        ``weight_sync``: ``object_store`` (each sync put once in Ray's object store, copied by every actor) or
        ``broadcast`` (this process broadcasts the weights in buckets to every actor at once over a process
        group of its own: NCCL where this process sees a GPU and the actors ask for GPUs, gloo otherwise;
        ``compass.rl.rollout.weight_transport``;
        ``bucket_bytes`` per broadcast, default its ``DEFAULT_BUCKET_BYTES``; ``broadcast_timeout_s``: how long
        a member waits in a broadcast whose group lost another member).
        Raises ValueError for an unknown backend or partitioner name (before anything starts) or
        ``workers`` < 1; RuntimeError when an actor fails to build or is not placed within
        ``ready_timeout_s``."""
        if workers < 1:
            raise ValueError(f"RayRolloutPool: workers must be >= 1, got {workers}")
        if threads_per_worker < 1:
            raise ValueError(f"RayRolloutPool: threads_per_worker must be >= 1, got {threads_per_worker}")
        self.backend_cls = get_rollout_backend(backend_name)     # an unknown name fails here, listing the known
        get_partitioner(partitioner)
        if weight_sync not in WEIGHT_SYNCS:
            raise ValueError(f"RayRolloutPool: weight_sync {weight_sync!r} is not one of {', '.join(WEIGHT_SYNCS)}")
        ensure_ray()
        options = dict(options)
        if self.backend_cls.runs_model_here or "share" in options:    # the actor's model is a copy: weights must sync
            options["share"] = False
        self.name, self.workers, self.threads_per_worker = backend_name, workers, threads_per_worker
        self.partitioner, self.restarts_left = partitioner, max_actor_restarts
        payload, tok_ref = ray.put(model_payload(model)), ray.put(tok)
        cls = remote_class(_RolloutActor).options(**{"num_cpus": 0, **(actor_options or {})})
        self._make = lambda: cls.remote(backend_name, payload, tok_ref, threads_per_worker, options)
        self._weights = None                  # the last synced weights: a replacement actor loads them
        self.weight_sync, self._sender, self._bucket_bytes = weight_sync, None, bucket_bytes
        self.broadcast_timeout_s = broadcast_timeout_s
        self._actor_gpus = float((actor_options or {}).get("num_gpus") or 0)
        self.takes_weight_refs = weight_sync == "object_store"      # a broadcast starts from this process
        self.ready_timeout_s = ready_timeout_s
        self.actors = start_actors(self._make, workers, ready_timeout_s, f"rollout pool ({backend_name})")
        self.last_schedule: dict = {}

    def shards(self, prompt_ids: Sequence[Sequence[int]], n: int, sampling: SamplingParams,
               work: Sequence[float] | None = None) -> list[tuple[list[int], SamplingParams]]:
        """Per actor: its prompt indices, longest predicted first (:func:`plan_shards`), and its sampling: the
        call's seed, and each prompt's random stream as if the call ran in one batch (:func:`with_streams`)."""
        plan = plan_shards(prompt_ids, n, sampling.max_new_tokens, self.workers, work, self.partitioner)
        whole = with_streams(sampling, len(prompt_ids), n)
        if self.backend_cls.seeded_streams:       # one seed for every shard: each prompt's streams pick its draws
            return [(idx, _subset(whole, idx)) for idx in plan]
        return [(idx, _subset(dataclasses.replace(whole, seed=shard_seed(sampling.seed, k, self.workers)), idx))
                for k, idx in enumerate(plan)]

    def generate_samples(self, prompt_ids: Sequence[Sequence[int]], n: int, sampling: SamplingParams,
                         work: Sequence[float] | None = None) -> Iterator[list[tuple[int, int, Completion]]]:
        """Start every shard now; iterate lists of ``(prompt index, sample index, completion)`` as the actors'
        decodes finish them. ``work``: each prompt's predicted cost for the split (None: prompt length +
        budget).

        Every (prompt, sample) comes exactly once. An actor that dies mid-shard has the samples it had not
        yet returned sent again, one sample per prompt copy, to the live actors (again if one of those dies);
        the pool replaces it for later calls (``max_actor_restarts``). When no actor is left the call raises
        one :class:`InfraError` line. After the iterator ends, :attr:`last_schedule` holds the step's
        per-actor finish seconds, makespan, idle shares and re-sent sample count."""
        if not self.actors:
            raise RuntimeError("RayRolloutPool is closed")
        t0, t0_wall = time.perf_counter(), time.time()
        self._dead: set[int] = set()
        pending: dict = {}            # generator -> (actor k, [(prompt index, [sample indices])] per local prompt)
        for k, (idx, shard_sampling) in enumerate(self.shards(prompt_ids, n, sampling, work)):
            if idx:
                gen = self.actors[k].generate_samples.options(num_returns="streaming").remote(
                    [list(prompt_ids[i]) for i in idx], n, shard_sampling)
                pending[gen] = (k, [(i, list(range(n))) for i in idx])
        finish = [0.0] * self.workers
        missing = {(i, s) for i in range(len(prompt_ids)) for s in range(n)}
        resent, dead = 0, []
        while pending:
            (gen,), _ = ray.wait(list(pending), num_returns=1)
            k, jobs = pending[gen]
            try:
                ref = next(gen)
                done = ray.get(ref)
            except StopIteration:
                del pending[gen]
                continue
            except ray.exceptions.RayActorError as e:
                del pending[gen]
                dead.append(k)
                lost = sorted((i, s) for i, ss in jobs for s in ss if (i, s) in missing)
                resent += len(lost)
                self._lost_actor(k, e, lost, prompt_ids, sampling, n, pending)
                continue
            if isinstance(done, dict):                 # the actor's own finish time (wall clock: same host or NTP)
                finish[k] = max(finish[k], done["end"] - t0_wall)
                continue
            out = []
            for li, s, c in done:
                i, ss = jobs[li]
                key = (i, ss[s])
                if key not in missing:
                    raise RuntimeError(f"rollout pool: actor {k} returned sample {key} twice")
                missing.discard(key)
                _own_arrays(c)
                out.append((i, ss[s], c))
            yield out
        if missing:
            raise RuntimeError(f"rollout pool: {len(missing)} sample(s) never came back, e.g. {sorted(missing)[:3]}")
        self.last_schedule = {**schedule_metrics([f for k, f in enumerate(finish) if k not in dead]),
                              "finish_s": finish, "resent_samples": resent, "actors_lost": len(dead)}
        for k in dead:
            self._replace(k)

    def _replace(self, k: int) -> None:
        """A new actor in slot ``k`` with the last synced weights, or one :class:`InfraError` line when the
        pool's restarts are spent."""
        if self.restarts_left <= 0:
            self.close(timeout_s=5.0)
            raise InfraError(f"rollout pool ({self.name}): actor {k} of {self.workers} died and the pool's actor "
                             f"restarts are spent")
        self.restarts_left -= 1
        self._drop_sender()                   # the broadcast group lost a member: the next sync builds a new one
        ray.kill(self.actors[k])
        (self.actors[k],) = start_actors(self._make, 1, self.ready_timeout_s, f"rollout pool ({self.name})")
        if self._weights is not None:
            ray.get(self.actors[k].sync_weights.remote(self._weights_ref()))

    def _weights_ref(self):
        """The last synced weights in the object store (a broadcast pool keeps the synced dict: put on the CPU now,
        as they are now; the engine syncs before every generate, so they are still the last synced ones)."""
        if isinstance(self._weights, ray.ObjectRef):
            return self._weights
        return ray.put({k: v.detach().cpu() for k, v in self._weights.items()})

    def _drop_sender(self) -> None:
        if self._sender is not None:
            self._sender.close(timeout=0.0)
            self._sender = None

    def generate_stream(self, prompt_ids: Sequence[Sequence[int]], n: int, sampling: SamplingParams,
                        work: Sequence[float] | None = None) -> Iterator[tuple[int, list[Completion]]]:
        """``(prompt index, group of n completions)`` as each group's last sample comes back."""
        groups: dict[int, list] = {}
        for done in self.generate_samples(prompt_ids, n, sampling, work):
            for i, s, c in done:
                g = groups.setdefault(i, [None] * n)
                g[s] = c
                if all(x is not None for x in g):
                    yield i, groups.pop(i)

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, sampling: SamplingParams,
                 work: Sequence[float] | None = None) -> list[list[Completion]]:
        """``len(prompt_ids)`` groups of ``n`` completions, in prompt order (shards run concurrently)."""
        out: list = [[None] * n for _ in prompt_ids]
        for done in self.generate_samples(prompt_ids, n, sampling, work):
            for i, s, c in done:
                out[i][s] = c
        return out

    def sync_weights(self, state_dict) -> None:
        """Load a state dict (HF names), or an ``ObjectRef`` to one, into every actor's model."""
        if self.weight_sync == "broadcast":
            self._broadcast(ray.get(state_dict) if isinstance(state_dict, ray.ObjectRef) else state_dict)
            return
        if not isinstance(state_dict, ray.ObjectRef):
            state_dict = ray.put({k: v.detach().cpu() for k, v in state_dict.items()})
        self._weights = state_dict
        ray.get([a.sync_weights.remote(state_dict) for a in self.actors])

    def _broadcast(self, state_dict: dict) -> None:
        """``weight_sync: broadcast``: bucket after bucket from this process to every actor at once. An actor that
        dies during it leaves the group unusable: the dead are replaced (the pool's restarts), the group dropped,
        and this sync's weights go to every actor through the object store instead; the next sync builds a new
        group. The live members blocked in the broken collective give up within ``broadcast_timeout_s``."""
        from compass.rl.rollout.weight_transport import make_sender
        if self._sender is None:
            size = {} if self._bucket_bytes is None else {"bucket_bytes": self._bucket_bytes}
            import torch
            # NCCL only where both ends hold a GPU; workers without one take gloo (the buckets staged on the host)
            backend = "nccl" if torch.cuda.is_available() and self._actor_gpus > 0 else "gloo"
            self._sender = make_sender("collective", host=ray.util.get_node_ip_address(), receivers=self.workers,
                                       timeout_s=self.broadcast_timeout_s, backend=backend, **size)
        message = self._sender.send(state_dict.items())
        refs = {a.receive_weights.remote({**message, "rank": k + 1}): k for k, a in enumerate(self.actors)}
        dead: list[int] = []
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
            except ray.exceptions.RayActorError:
                dead.append(refs[done[0]])
                break
        self._weights = state_dict
        if not dead:
            self._sender.finish()
            return
        log.warning("rollout pool (%s): actor %s died during a weight broadcast; replacing it and sending this "
                    "sync through the object store", self.name, dead[0])
        self._drop_sender()
        for ref in pending:                   # the live members leave the broken collective (an error, or its timeout)
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                dead.append(refs[ref])
            except Exception:  # noqa: BLE001 - a receive cut short: this sync reaches them below
                pass
        for k in sorted(set(dead)):
            self._replace(k)
        weights = self._weights_ref()
        ray.get([a.sync_weights.remote(weights) for a in self.actors])

    def release_memory(self) -> None:
        ray.get([a.release_memory.remote() for a in self.actors])

    def close(self, timeout_s: float = 60.0) -> None:
        """Close every backend (bounded by ``timeout_s``), then kill the actors. Idempotent."""
        actors, self.actors = self.actors, []
        if getattr(self, "_sender", None) is not None:
            self._drop_sender()
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

    def _lost_actor(self, k: int, error, lost: list, prompt_ids, sampling: SamplingParams, n: int,
                    pending: dict) -> None:
        """Send actor ``k``'s unreturned samples (``lost``: (prompt, sample) pairs) to the live actors, one
        copy of the prompt per sample, spread round robin; or raise when there is nothing to send them to."""
        why = next((ln.strip() for ln in str(error).splitlines() if ln.strip()), type(error).__name__)
        self._dead.add(k)
        live = [j for j in range(self.workers) if j not in self._dead]
        if not live:
            self.close(timeout_s=5.0)
            raise InfraError(f"rollout pool ({self.name}): actor {k} of {self.workers} died and no actor is left to "
                             f"take its {len(lost)} sample(s): {type(error).__name__}: {why}") from error
        log.warning("rollout pool (%s): actor %d of %d died (%s); its %d unfinished sample(s) go to actor(s) %s",
                    self.name, k, self.workers, why, len(lost), live)
        for r, j in enumerate(live):
            share = lost[r::len(live)]
            if not share:
                continue
            # each copy draws from its sample's own stream: the very sample the dead actor would have made
            whole = with_streams(sampling, len(prompt_ids), n)
            resend = dataclasses.replace(_subset(whole, [i for i, _ in share]),
                                         streams=tuple(whole.streams[i] + s for i, s in share))
            if not self.backend_cls.seeded_streams:      # a generator-seeded backend: a stream no shard used
                resend = dataclasses.replace(resend, seed=shard_seed(sampling.seed, j, self.workers) * 7919
                                             + 104729 * (r + 1 + len(self._dead)))
            gen = self.actors[j].generate_samples.options(num_returns="streaming").remote(
                [list(prompt_ids[i]) for i, _ in share], 1, resend)
            pending[gen] = (j, [(i, [s]) for i, s in share])
