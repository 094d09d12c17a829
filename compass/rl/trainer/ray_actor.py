"""A trainer backend that lives in one Ray actor: ``RayTrainer(backend_name, model, cfg)``.

The real trainer (``get_trainer_backend(backend_name)(model_copy, cfg)``) is built in the
actor from the policy's config and weights (sent once through the object store,
:func:`compass.rl.ray_cluster.model_payload`). Every protocol method
(:class:`compass.rl.trainer.base.TrainerBackend`) forwards to it; tensors go both ways through
Ray's object store:

- ``logprobs(batch, routes=None) -> (logp, entropy)``: ``[B, L-1]`` float32 each;
- ``update(batch, advantages, old_logp, cfg, routes=None) -> metrics``;
- ``logprobs_with_routes(batch)`` and ``pre_step_logprobs()``: the wrapped trainer's (the torch
  trainer records its MoE routes with hooks on its own model, which lives in the actor);
- ``hf_state_dict()``: the weights under HF names, copied to the driver;
  ``hf_state_dict_ref()``: the same as an ``ObjectRef``, which
  :meth:`compass.rl.rollout.ray_pool.RayRolloutPool.sync_weights` takes without a driver copy;
- ``state_dict()`` / ``load_state_dict(state)``: everything needed to resume.

If the actor dies (killed, out of memory, its node lost), the call raises :class:`TrainerActorDied`, an
``InfraError`` of one line naming the trainer and the call. ``restart()`` then starts a fresh actor from
the model the trainer was first built from (kept in the object store while ``restartable``); the caller
loads the state to go on from (the RL engine: its last saved RL state, ``trainer.max_restarts``).

Any other public attribute of the wrapped trainer is forwarded too: ``hasattr(ray_trainer,
name)`` asks the actor once (a remote ``hasattr``) and remembers whether it is a method
(calls are forwarded) or a value (e.g. the trainer's ``steps``: every read returns a fresh
copy; assigning to it on the wrapper does not reach the actor).

The driver's ``model`` is not updated: load ``hf_state_dict()`` into it when it must hold
the trained weights (the end of a run, an evaluation callback).
"""
from __future__ import annotations

import functools
import os

from compass.rl.ray_cluster import (ensure_ray, kill_actors, model_from_payload, model_payload, remote_class,
                                   start_actors)
from compass.rl.trainer.base import TrainerBackend, get_trainer_backend
from compass.runtime.runner import InfraError

import ray  # noqa: E402,I001  (after compass.rl.ray_cluster, which sets Ray's environment)


class TrainerActorDied(InfraError):
    """The trainer's Ray actor died during a call: retryable; ``RayTrainer.restart()`` starts a fresh one."""


class _TrainerActor:
    """The wrapped trainer, on its own copy of the policy, in its own process."""

    def __init__(self, backend_name: str, payload: dict, cfg, threads: int):
        import torch
        torch.set_num_threads(threads)          # before any op: this process's share of the cores
        self.model = model_from_payload(payload)
        self.trainer = get_trainer_backend(backend_name)(self.model, cfg)

    def ready(self) -> str:
        return self.trainer.name

    def pid(self) -> int:
        return os.getpid()

    def kind(self, name: str) -> str | None:
        """What ``name`` is on the trainer: ``"method"``, ``"value"`` or None (absent)."""
        if not hasattr(self.trainer, name):
            return None
        return "method" if callable(getattr(self.trainer, name)) else "value"

    def get(self, name: str):
        return _to_cpu(getattr(self.trainer, name))

    def call(self, name: str, *args, **kwargs):
        return _to_cpu(getattr(self.trainer, name)(*args, **kwargs))


def _to_cpu(obj):
    """Tensors in a result (in dicts, lists, tuples) on the CPU: what leaves a GPU actor must not need its GPU
    to be read. On the CPU, the very same objects."""
    import torch
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if type(obj) in (list, tuple):
        return type(obj)(_to_cpu(x) for x in obj)
    return obj


class RayTrainer(TrainerBackend):
    """A :class:`~compass.rl.trainer.base.TrainerBackend` whose trainer runs in a Ray actor."""

    def __init__(self, backend_name: str, model, cfg, *, threads: int | None = None,
                 actor_options: dict | None = None, ready_timeout_s: float = 600.0, restartable: bool = True):
        """``model``: the HF policy (copied to the actor); ``cfg``: the trainer's config (``RLConfig``).
        ``threads``: torch threads in the actor (None: this process's ``torch.get_num_threads()``,
        what the trainer would have used here). ``actor_options``: Ray's ``.options()`` for the
        actor (default ``{"num_cpus": 0}``: it never waits for CPUs a rollout pool holds).
        ``restartable``: keep the model's copy in the object store for :meth:`restart` (it costs one
        copy of the weights there for the trainer's life; False frees it once the actor is built).
        Raises ValueError for an unknown backend, RuntimeError when the actor cannot start."""
        import torch
        get_trainer_backend(backend_name)      # an unknown name fails here, with the known ones listed
        ensure_ray()
        self.name = backend_name
        self.threads = threads or torch.get_num_threads()
        self.restarts = 0
        self._kinds: dict[str, str | None] = {}
        self._actor = None
        payload = ray.put(model_payload(model))
        cls = remote_class(_TrainerActor).options(**{"num_cpus": 0, **(actor_options or {})})
        # the driver's model is not trained in place, so a restart must not read it again: keep the payload
        self._start = lambda: start_actors(lambda: cls.remote(backend_name, payload, cfg, self.threads), 1,
                                           ready_timeout_s, f"trainer ({backend_name})")
        (self._actor,) = self._start()
        if not restartable:
            self._start = None

    def restart(self) -> None:
        """Kill the actor if it still runs and start a fresh one with the weights the trainer was first
        built from (load the state to go on from after this). Raises InfraError when it cannot start."""
        if self._start is None:
            raise RuntimeError(f"trainer ({self.name}): not restartable (closed, or built with restartable=False)")
        actor, self._actor = self._actor, None
        if actor is not None:
            kill_actors([actor])
        self._kinds.clear()                # a fresh actor: ask again what its trainer has
        try:
            (self._actor,) = self._start()
        except RuntimeError as e:          # it started once with these settings: what failed now is the machinery
            raise InfraError(f"trainer ({self.name}): could not restart its Ray actor: {e}") from e
        self.restarts += 1

    def actor_pid(self) -> int:
        """The process id of the actor (fault-injection tests kill it)."""
        return self._ask("pid", "pid")

    def _ask(self, what: str, method: str, *args, **kwargs):
        """``ray.get`` of one remote method call; a dead actor is one TrainerActorDied line naming ``what``."""
        if self._actor is None:
            raise RuntimeError(f"RayTrainer is closed (trainer {self.name})")
        try:
            return ray.get(getattr(self._actor, method).remote(*args, **kwargs))
        except ray.exceptions.RayActorError as e:
            # the actor's process is gone (killed, out of memory, node lost): a machinery failure. The RL engine
            # restarts the actor and resumes from its saved state; otherwise the stage task retries the stage
            why = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
            actor, self._actor = self._actor, None
            kill_actors([actor])           # never leave a half-dead actor holding resources
            raise TrainerActorDied(f"trainer ({self.name}): its Ray actor died during {what}: "
                                   f"{type(e).__name__}: {why}") from e

    def _call(self, name: str, *args, **kwargs):
        return self._ask(name, "call", name, *args, **kwargs)

    # -- the protocol ---------------------------------------------------------------------
    def logprobs(self, batch, routes=None):
        return self._call("logprobs", batch, routes)

    def update(self, batch, advantages, old_logp, cfg, routes=None, old_entropy=None) -> dict[str, float]:
        return self._call("update", batch, advantages, old_logp, cfg, routes, old_entropy)

    def logprobs_with_routes(self, batch):
        return self._call("logprobs_with_routes", batch)

    def pre_step_logprobs(self):
        return self._call("pre_step_logprobs")

    def hf_state_dict(self):
        return self._call("hf_state_dict")

    def hf_state_dict_ref(self) -> "ray.ObjectRef":
        """``hf_state_dict()`` left in the object store (for ``RayRolloutPool.sync_weights``); waits until it
        is there, so a dead actor raises TrainerActorDied here, not as an error inside the rollout's sync."""
        if self._actor is None:
            raise RuntimeError(f"RayTrainer is closed (trainer {self.name})")
        ref = self._actor.call.remote("hf_state_dict")
        ray.wait([ref], fetch_local=False)
        self._ask("hf_state_dict", "ready")    # an error result means a dead actor: this raises it (no copy here)
        return ref

    def state_dict(self) -> dict:
        return self._call("state_dict")

    def load_state_dict(self, state: dict) -> None:
        self._call("load_state_dict", state)

    def close(self) -> None:
        """Kill the actor and free the kept model copy. Idempotent (Ray also kills it once this object is gone)."""
        actor, self._actor, self._start = self._actor, None, None
        if actor is not None:
            kill_actors([actor])

    # -- whatever else the wrapped trainer has ------------------------------------------------
    def __getattr__(self, name: str):
        # only reached for names not found normally; private names and a half-built object never go remote
        if name.startswith("_") or self.__dict__.get("_actor") is None:
            raise AttributeError(name)
        kinds = self.__dict__["_kinds"]
        if name not in kinds:                  # a remote hasattr, once per name
            kinds[name] = self._ask(name, "kind", name)
        if kinds[name] is None:
            raise AttributeError(f"the {self.name} trainer has no attribute {name!r}")
        if kinds[name] == "method":
            return functools.partial(self._call, name)
        return self._ask(name, "get", name)     # a value: a fresh copy at every access
