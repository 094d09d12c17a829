"""N ranks of one ``torch.distributed`` job as Ray actors in a placement group: the launcher of every
trainer that runs on more than one process (docs/cluster.md).

``RankGroup(factory, args, world_size=N, bundle={"GPU": 1, "CPU": 1})`` reserves N bundles in one
placement group (``PACK``: on as few nodes as fit; ``SPREAD``: over nodes), starts one actor in each,
makes them ranks 0..N-1 of one group (NCCL where the rank sees a GPU, gloo on the CPU; rank 0's node
address and a free port are the rendezvous), then builds ``factory(*args)`` in every rank. Large
arguments travel once through Ray's object store, whatever N is.

``group.call(method, *args)`` runs ``method`` on every rank's object at once (every rank must take part
in the collectives inside it) and returns the results in rank order. A rank that dies (killed, out of
memory, its node lost) would leave the others blocked in a collective: the first death kills the whole
group and raises :class:`RankDied`, one line naming the group, the rank and the call; ``restart()``
builds a fresh group from the same arguments.
"""
from __future__ import annotations

import logging
import os
import time

from compass.rl.ray_cluster import ensure_ray, kill_actors, remote_class
from compass.rl.trainer.ray_actor import TrainerActorDied

import ray  # noqa: E402,I001  (after compass.rl.ray_cluster, which sets Ray's environment)
from ray.util.placement_group import placement_group, remove_placement_group  # noqa: E402
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # noqa: E402

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
WAIT_LOG_S = 30.0               # while a placement group waits for resources, one warning line this often
log = logging.getLogger("compass.dist")


def _short(resources: dict) -> dict:
    """Ray's free resources without its per-node and per-placement-group bookkeeping entries."""
    return {k: v for k, v in resources.items() if not k.startswith(("node:", "bundle_group_"))}


class RankDied(TrainerActorDied):
    """A rank of a :class:`RankGroup` died during a call: the group is gone; ``restart()`` builds a new one."""


class _Rank:
    """One rank: joins the group, then holds the object the group was built for."""

    def __init__(self, threads: int | None):
        import torch
        if threads:
            torch.set_num_threads(threads)      # before any op: this rank's share of its node's cores
        self.obj = None

    def ready(self) -> bool:
        return True

    def rendezvous(self) -> str:
        """``host:port`` rank 0 listens on: this node's address as Ray knows it, a port free on it."""
        from compass.dist.process_group import free_port
        host = ray.util.get_node_ip_address()
        return f"{host}:{free_port(host)}"

    def pid(self) -> int:
        return os.getpid()

    def setup(self, backend: str, rank: int, world_size: int, address: str, timeout_s: float, factory, *args):
        import torch
        from compass.dist.process_group import default_backend, join
        if backend == "auto":
            backend = default_backend("cuda" if torch.cuda.is_available() else "cpu")
        join(backend, rank, world_size, address, timeout_s)
        self.obj = factory(*args)
        return backend

    def run(self, method: str, *args, **kwargs):
        from compass.rl.trainer.ray_actor import _to_cpu
        return _to_cpu(getattr(self.obj, method)(*args, **kwargs))

    def run_put(self, method: str, *args, **kwargs) -> list:
        """:meth:`run`, its result left in the object store: ``[ref]``, small to fetch (an error raises there)."""
        return [ray.put(self.run(method, *args, **kwargs))]


# what a rank's collective raises when a peer process is gone (gloo's socket errors, NCCL's abort)
PEER_GONE = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "Socket closed",
             "remote process exited", "NCCL communicator was aborted")
PEER_DEATH_WAIT_S = 30.0


def _peer_gone(e: BaseException) -> bool:
    return any(s in str(e) for s in PEER_GONE)


class RankGroup:
    """``world_size`` ranks in one placement group, each holding ``factory(*args)`` (see the module doc)."""

    def __init__(self, factory, args: tuple = (), *, world_size: int, bundle: dict[str, float] | None = None,
                 strategy: str = "PACK", backend: str = "auto", threads: int | None = None,
                 ready_timeout_s: float = 600.0, collective_timeout_s: float = 600.0, what: str = "ranks"):
        """``bundle``: the resources each rank reserves (default one CPU); ``threads``: torch threads per rank
        (None: its node's default). Raises RuntimeError naming the free resources when the group cannot be
        placed within ``ready_timeout_s``, or the failing rank's error when one cannot start."""
        if world_size < 1:
            raise ValueError(f"{what}: world_size must be at least 1, got {world_size}")
        if strategy not in STRATEGIES:
            raise ValueError(f"{what}: placement strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
        ensure_ray()
        self.what, self.world_size, self.restarts = what, world_size, 0
        self._bundle = {k: float(v) for k, v in (bundle or {"CPU": 1}).items() if v}
        if not self._bundle:
            raise ValueError(f"{what}: a rank's bundle must reserve some resource (CPU, GPU or a custom one)")
        self._spec = (factory, tuple(ray.put(a) for a in args), strategy, backend, threads, ready_timeout_s,
                      collective_timeout_s)
        self._actors: list = []
        self._pg = None
        self.backend = self._start()

    # -- life ---------------------------------------------------------------------------------
    def _start(self) -> str:
        factory, arg_refs, strategy, backend, threads, ready_s, coll_s = self._spec
        self._pg = placement_group([dict(self._bundle)] * self.world_size, strategy=strategy)
        ready, waited = [], 0.0
        while not ready and waited < ready_s:     # a line every WAIT_LOG_S: a cluster short of resources says so
            step = min(WAIT_LOG_S, ready_s - waited)
            ready, _ = ray.wait([self._pg.ready()], timeout=step)
            waited += step
            if not ready and waited < ready_s:
                log.warning("%s: waiting %.0f s of at most %.0f s for %d bundle(s) of %s (%s); the cluster has free %s",
                            self.what, waited, ready_s, self.world_size, self._bundle, strategy,
                            _short(ray.available_resources()))
        if not ready:
            free = ray.available_resources()
            self._close()
            raise RuntimeError(f"{self.what}: {self.world_size} bundle(s) of {self._bundle} ({strategy}) could not "
                               f"be placed in {ready_s:.0f} s; the cluster has free {_short(free)}")
        cls = remote_class(_Rank)
        cpus, gpus = self._bundle.get("CPU", 0.0), self._bundle.get("GPU", 0.0)
        custom = {k: v for k, v in self._bundle.items() if k not in ("CPU", "GPU")}
        self._actors = [cls.options(num_cpus=cpus, num_gpus=gpus, resources=custom or None,
                                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                                        self._pg, placement_group_bundle_index=i)).remote(threads)
                        for i in range(self.world_size)]
        try:
            address = ray.get(self._actors[0].rendezvous.remote(), timeout=ready_s)
            backends = self._gather([a.setup.remote(backend, r, self.world_size, address, coll_s, factory, *arg_refs)
                                     for r, a in enumerate(self._actors)], "setup")
        except RankDied as e:
            raise RuntimeError(f"{self.what}: a rank failed to start: {e}") from e
        except BaseException:
            self._close()
            raise
        return backends[0]

    def restart(self) -> None:
        """Kill what is left of the group and build a fresh one from the first arguments (load the state to go
        on from after this). Raises InfraError when it cannot start."""
        from compass.runtime.runner import InfraError
        if self._spec is None:
            raise RuntimeError(f"{self.what}: closed, so not restartable")
        self._close()
        try:
            self._start()
        except RuntimeError as e:
            raise InfraError(f"{self.what}: could not restart: {e}") from e
        self.restarts += 1

    def _close(self) -> None:
        actors, self._actors = self._actors, []
        kill_actors(actors)
        if self._pg is not None:
            try:
                remove_placement_group(self._pg)
            except Exception:  # noqa: BLE001 - Ray is shutting down: nothing left to free
                pass
            self._pg = None

    def close(self) -> None:
        """Kill the ranks, free their placement group and the first arguments' copies in the object store
        (idempotent; no restart after it)."""
        self._close()
        self._spec = None

    # -- calls ----------------------------------------------------------------------------------
    def call(self, method: str, *args, **kwargs) -> list:
        """``method(*args, **kwargs)`` on every rank's object, the results in rank order. Arguments go through the
        object store once. Raises RankDied (the group is then closed) when a rank dies."""
        if not self._actors:
            raise RuntimeError(f"{self.what}: the group is closed")
        if self.world_size > 1:          # one copy in the object store, not one per rank
            args = tuple(ray.put(a) for a in args)
            kwargs = {k: ray.put(v) for k, v in kwargs.items()}
        return self._gather([a.run.remote(method, *args, **kwargs) for a in self._actors], method)

    def call_ref(self, method: str, *args, rank: int = 0, **kwargs):
        """:meth:`call`, leaving rank ``rank``'s result in Ray's object store: its ``ObjectRef``, for a result
        another actor reads directly (the weights a rollout pool loads) without a copy through this process.
        Every rank's call has finished and none failed when it returns (deaths and errors raise as in
        :meth:`call`); the ref stays readable while rank ``rank`` lives (it owns the object)."""
        if not self._actors:
            raise RuntimeError(f"{self.what}: the group is closed")
        if self.world_size > 1:
            args = tuple(ray.put(a) for a in args)
            kwargs = {k: ray.put(v) for k, v in kwargs.items()}
        return self._gather([a.run_put.remote(method, *args, **kwargs) for a in self._actors], method)[rank][0]

    def pids(self) -> list[int]:
        """The ranks' process ids (fault-injection tests kill one)."""
        return self._gather([a.pid.remote() for a in self._actors], "pid")

    def _gather(self, refs: list, what: str) -> list:
        """Every rank's result; the first rank that dies ends the whole group (the others may be blocked in a
        collective that can no longer finish)."""
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
            except ray.exceptions.RayActorError as e:
                self._close()
                raise self._died(refs.index(done[0]), what, e) from e
            except BaseException as e:
                # A rank whose peer died fails in its collective (the socket closes), often before Ray has
                # marked the peer dead: wait for that death, and report it, not its echo.
                dead = self._dead_peer(refs, pending) if _peer_gone(e) else None
                self._close()           # an error in one rank leaves the others waiting on it
                if dead is not None:
                    raise self._died(dead[0], what, dead[1]) from e
                raise
        return ray.get(refs)

    def _died(self, rank: int, what: str, e: BaseException) -> RankDied:
        why = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
        return RankDied(f"{self.what}: rank {rank} of {self.world_size} died during {what}: "
                        f"{type(e).__name__}: {why}")

    @staticmethod
    def _dead_peer(refs: list, pending: list, timeout_s: float = PEER_DEATH_WAIT_S):
        """(rank, error) of the first rank among ``pending`` that turns out dead within ``timeout_s``, else None."""
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            done, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            for ref in done:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as e:
                    return refs.index(ref), e
                except BaseException:
                    pass
        return None


