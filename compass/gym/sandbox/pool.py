"""Compass-Gym code sandbox: run a Python program against its tests, pass rate as the reward.

``SandboxPool(concurrency=None)`` keeps ``concurrency`` (default: the usable cores) warm
fork-server workers (``worker.py``); ``pool.run(program, tests)`` forks one
locked-down child of a free worker per task and returns a :class:`Result` with one
verdict per test. ``pool.map(jobs)`` runs many at once, never more than ``concurrency``.

- Dense reward: ``score = passed / total``; ``early_stop=True`` stops at the first
  failing test and counts the rest as failed.
- Retries only infrastructure errors: the worker died or hung without answering, a fork
  failed, or the child died before the harness said "ready". A wrong answer, a crash or a
  timeout caused by the program is a verdict and is never retried.
- Isolation (see ``launch.py`` / ``child.py``): per-worker pid, mount and
  network namespaces; per-task setsid, rlimits (CPU, address space, file size, processes,
  open files, no core), a per-slot unprivileged uid, a scratch cwd on a private tmpfs, an
  empty environment and an audit hook (writes only under scratch, no exec/spawn, no
  sockets, no ctypes, no signals outside the task's group); a wall-clock timeout and an
  output cap enforced by the worker, which then kills everything the task started.

The ``code`` verifier (``compass.gym.verifiers.code``) runs its programs here.
"""
from __future__ import annotations

import atexit
import itertools
import json
import logging
import math
import os
import queue
import selectors
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from compass.gym.sandbox import launch

log = logging.getLogger("compass.gym.sandbox")

DEFAULT_TIMEOUT_S = 5.0
MAX_TIMEOUT_S = 300.0
# Worker hang detection: a worker that has not answered this long after the task's own
# timeout is considered dead (it enforces the timeout itself, so this only fires on faults).
GRACE_S = 10.0
# Every pool gets its own block of task uids, so NPROC budgets never mix between pools.
_UID_BASE = 0x60000 + (os.getpid() % 4096) * 256
_uid_counter = itertools.count()


@dataclass(frozen=True)
class Limits:
    """Per-task resource limits (per process where the kernel counts per process)."""
    memory_mb: int = 512            # RLIMIT_AS of each process
    file_mb: int = 16               # RLIMIT_FSIZE: largest file a task may write
    max_procs: int = 16             # RLIMIT_NPROC of the task uid: processes + threads, fork bombs stop here
    max_open_files: int = 256
    max_output_bytes: int = 1 << 20  # stdout+stderr kept; a task writing more is stopped ("output_limit")

    def rlimits(self, timeout_s: float) -> dict:
        cpu = math.ceil(timeout_s) + 1  # the wall clock normally fires first; CPU catches a stuck clock
        return {"RLIMIT_AS": self.memory_mb << 20, "RLIMIT_FSIZE": self.file_mb << 20,
                "RLIMIT_NPROC": self.max_procs, "RLIMIT_NOFILE": self.max_open_files, "RLIMIT_CORE": 0,
                "RLIMIT_CPU": (cpu, cpu + 1)}


@dataclass
class Result:
    verdicts: list[bool]
    # ok: the harness ran every test (or stopped early); error: the program raised before the tests;
    # memory: a MemoryError; timeout (wall clock) | cpu_limit | output_limit | crash (died early) | infra
    status: str
    attempts: int = 1
    wall_s: float = 0.0
    output: str = ""                # the program's stdout+stderr, truncated to max_output_bytes
    detail: str = ""
    infra_errors: list[str] = field(default_factory=list)
    # the first failure, as the program or a test raised it: a compass.gym.reasons code and a message
    why: tuple[str, str] = ("", "")

    @property
    def passed(self) -> int:
        return sum(self.verdicts)

    @property
    def total(self) -> int:
        return len(self.verdicts)

    @property
    def score(self) -> float:
        return self.passed / self.total if self.total else 0.0


@dataclass(frozen=True)
class Job:
    program: str
    tests: tuple[str, ...]
    timeout_s: float = DEFAULT_TIMEOUT_S
    early_stop: bool = False


class InfraError(RuntimeError):
    """The sandbox, not the program, failed; the task is retried."""


class _Worker:
    """One fork-server process and its line protocol; used by one thread at a time."""

    def __init__(self, uid: int, use_namespaces: bool):
        self.uid = uid
        cfg = json.dumps({"uid": uid, "private_tmp": use_namespaces})
        argv = launch.namespace_argv(sys.executable, cfg) if use_namespaces else None
        if argv is None:
            argv = launch.plain_argv(sys.executable, cfg)
        # No inherited secrets, ever. The token marks the worker's processes (see Worker._kill_marked).
        self.token = os.urandom(12).hex()
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "COMPASS_SANDBOX_WORKER": self.token}
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env, cwd="/", start_new_session=True, close_fds=True)
        self._buf = b""
        self.seq = 0
        try:
            hello = self._read_line(time.monotonic() + 30)
            if not hello.get("hello"):
                raise InfraError(f"worker said {hello!r}")
        except InfraError:
            self.kill()
            raise
        self.isolation = hello["isolation"]

    def _read_line(self, deadline: float) -> dict:
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise InfraError("worker did not answer in time")
                data = os.read(fd, 1 << 16)
                if not data:
                    raise InfraError(f"worker died (exit {self.proc.poll()})")
                self._buf += data
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError as e:
            raise InfraError(f"worker sent garbage: {line[:80]!r}") from e

    def request(self, job: dict) -> dict:
        self.seq += 1
        job = {**job, "id": self.seq}
        try:
            self.proc.stdin.write(json.dumps(job).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise InfraError(f"worker gone: {e}") from e
        reply = self._read_line(time.monotonic() + job["timeout_s"] + GRACE_S)
        if reply.get("id") != self.seq or reply.get("status") == "infra":
            raise InfraError(reply.get("detail") or f"unexpected reply {str(reply)[:120]}")
        return reply

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """Kill the launcher and the worker; the worker's pid namespace takes every task with it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class SandboxPool:
    """A bounded pool of sandbox workers. Thread-safe; workers start lazily and restart after faults."""

    def __init__(self, concurrency: int | None = None, limits: Limits = Limits(), retries: int = 2,
                 namespaces: bool = True):
        self.concurrency = max(1, concurrency or usable_cores())
        self.limits, self.retries, self.namespaces = limits, retries, namespaces
        self._slots: queue.LifoQueue = queue.LifoQueue()   # last used first: a warm worker before a cold one
        self._workers: list[_Worker | None] = [None] * self.concurrency
        self._uids = [_UID_BASE + next(_uid_counter) % 256 for _ in range(self.concurrency)]
        for i in range(self.concurrency):
            self._slots.put(i)
        self._closed = False
        self.infra_retries = 0
        atexit.register(self.close)

    # -- public -------------------------------------------------------------------------
    def run(self, program: str, tests: list[str] | tuple[str, ...], timeout_s: float = DEFAULT_TIMEOUT_S,
            early_stop: bool = False) -> Result:
        """Per-test verdicts of ``program``; never raises for anything the program does."""
        tests = [str(t) for t in tests]
        if not tests:
            return Result([], "ok")
        job = {"program": program, "tests": tests, "timeout_s": float(timeout_s), "early_stop": bool(early_stop),
               "limits": self.limits.rlimits(timeout_s), "max_output_bytes": self.limits.max_output_bytes}
        errors: list[str] = []
        t0 = time.monotonic()
        for attempt in range(1, self.retries + 2):
            slot = self._slots.get()
            try:
                reply = self._worker(slot).request(job)
            except (InfraError, OSError) as e:
                errors.append(str(e))
                self.infra_retries += 1
                self._discard(slot)
                log.warning("sandbox infrastructure error (attempt %d): %s", attempt, e)
                continue
            finally:
                self._slots.put(slot)
            return Result([bool(v) for v in reply["verdicts"]], reply["status"], attempt,
                          time.monotonic() - t0, reply.get("output", ""), reply.get("detail", ""), errors,
                          (reply.get("reason", ""), reply.get("message", "")))
        return Result([False] * len(tests), "infra", self.retries + 1, time.monotonic() - t0,
                      detail=errors[-1] if errors else "", infra_errors=errors)

    def map(self, jobs: list[Job]) -> list[Result]:
        """Results in order; at most ``concurrency`` tasks run at a time."""
        with ThreadPoolExecutor(self.concurrency) as ex:
            return list(ex.map(lambda j: self.run(j.program, j.tests, j.timeout_s, j.early_stop), jobs))

    def isolation(self) -> dict:
        """Which walls are up (asks a worker, starting one if needed)."""
        slot = self._slots.get()
        try:
            return dict(self._worker(slot).isolation)
        finally:
            self._slots.put(slot)

    def worker_pids(self) -> list[int]:
        """Host pids of the running workers' launchers (for tests that inject faults)."""
        return [w.proc.pid for w in self._workers if w is not None and w.alive()]

    def worker_tokens(self) -> list[str]:
        """The launch tokens in the workers' environments (every task process inherits its worker's)."""
        return [w.token for w in self._workers if w is not None]

    def task_uids(self) -> list[int]:
        """The unprivileged uids tasks run as (one per slot); no process should hold one between tasks."""
        return list(self._uids)

    def close(self) -> None:
        self._closed = True
        for i, w in enumerate(self._workers):
            if w is not None:
                w.kill()
                self._workers[i] = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- internals ----------------------------------------------------------------------
    def _worker(self, slot: int) -> _Worker:
        if self._closed:
            raise RuntimeError("sandbox pool is closed")
        w = self._workers[slot]
        if w is None or not w.alive():
            if w is not None:
                w.kill()
            w = self._start(slot)
            self._workers[slot] = w
        return w

    def _start(self, slot: int) -> _Worker:
        try:
            return _Worker(self._uids[slot], self.namespaces)
        except (InfraError, OSError) as e:
            if not self.namespaces:
                raise InfraError(f"cannot start a sandbox worker: {e}") from e
            log.warning("sandbox namespaces unavailable (%s); falling back to rlimits + audit hook", e)
            self.namespaces = False
            return _Worker(self._uids[slot], False)

    def _discard(self, slot: int) -> None:
        w = self._workers[slot]
        if w is not None:
            w.kill()
        self._workers[slot] = None


_default: SandboxPool | None = None
_default_lock = threading.Lock()


def default_pool() -> SandboxPool:
    """The process-wide pool (concurrency = usable cores) used by the ``code`` verifier."""
    global _default
    with _default_lock:
        if _default is None:
            _default = SandboxPool()
        return _default


def run_tests(program: str, tests: list[str], timeout_s: float = DEFAULT_TIMEOUT_S, early_stop: bool = False,
              pool: SandboxPool | None = None) -> Result:
    """Run ``program`` against ``tests`` in the default pool (or ``pool``)."""
    if not program.strip():
        return Result([False] * len(tests), "crash", detail="empty program")
    return (pool or default_pool()).run(program, tests, timeout_s, early_stop)
