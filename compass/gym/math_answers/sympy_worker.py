"""The symbolic fallback: sympy in a worker subprocess, every call bounded by a deadline.

Why a subprocess: sympy (and CPython's big-integer arithmetic under it) can run for
minutes on an answer like ``2^{2^{2^{100}}}``, and neither ``signal.alarm`` (main thread
only, and not delivered inside one long C call) nor a thread (cannot be stopped) bounds
that. A child process can always be killed. It works from any thread and inside process-
pool workers (``subprocess`` is allowed where ``multiprocessing`` children are not).

One worker per process, started on first use (importing sympy takes ~1 s, bounded by
``STARTUP_TIMEOUT_S``) and reused; a computation that passes its ``timeout_s`` kills the
worker, returns None ("undecided"), and the next call starts a fresh one. Calls from several
threads take turns (a lock, itself waited on for at most ``timeout_s``). So one call takes at
most 2 * timeout_s + STARTUP_TIMEOUT_S, and ~timeout_s with a warm worker. A worker inherited
through ``fork`` is never reused.

Run as a script, this file is the worker: JSON lines ``{"a": src, "b": src}`` in,
``{"equal": true|false|null}`` out; sources come from ``compare.to_sympy``.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time

STARTUP_TIMEOUT_S = 30.0     # importing sympy on a loaded machine; bounded too
WORKER_MEMORY_BYTES = 2 << 30

_lock = threading.Lock()
_proc: subprocess.Popen | None = None
_owner_pid = 0
calls = {"symbolic": 0, "timeouts": 0}     # counters, read by the benchmark and tests


def symbolic_equal(a: str, b: str, timeout_s: float = 2.0) -> bool | None:
    """Whether sympy proves ``a == b`` (True), disproves it (False), or cannot in time (None)."""
    if not _lock.acquire(timeout=max(timeout_s, 0.0)):
        return None
    try:
        calls["symbolic"] += 1
        proc = _worker()
        if proc is None:
            return None
        deadline = time.monotonic() + timeout_s     # the computation's own budget, after any worker start
        try:
            proc.stdin.write(json.dumps({"a": a, "b": b}) + "\n")
            proc.stdin.flush()
            line = _readline(proc, deadline)
        except (OSError, ValueError):
            line = None
        if line is None:
            calls["timeouts"] += 1
            _kill()
            return None
        try:
            return json.loads(line)["equal"]
        except (ValueError, KeyError, TypeError):
            _kill()
            return None
    finally:
        _lock.release()


def _worker() -> subprocess.Popen | None:
    """The live worker of this process, started if needed (and waited for, with a deadline)."""
    global _proc, _owner_pid
    if _proc is not None and _owner_pid == os.getpid() and _proc.poll() is None:
        return _proc
    _proc = None          # dead, or inherited from a parent through fork: not ours to use
    proc = subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
    if _readline(proc, time.monotonic() + STARTUP_TIMEOUT_S) != "ready":
        _kill(proc)
        return None
    _proc, _owner_pid = proc, os.getpid()
    return proc


def _readline(proc: subprocess.Popen, deadline: float) -> str | None:
    """One line from the worker, or None when the deadline passes or the worker dies."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return None
    ready, _, _ = select.select([proc.stdout], [], [], remaining)
    if not ready:
        return None
    line = proc.stdout.readline()
    return line.strip() if line else None


def _kill(proc: subprocess.Popen | None = None) -> None:
    global _proc
    proc = proc or _proc
    if proc is _proc:
        _proc = None
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(timeout=5)


@atexit.register
def _shutdown() -> None:
    if _proc is not None and _owner_pid == os.getpid():
        _kill()


# -- the worker side ------------------------------------------------------------------------------
def _serve() -> None:
    import resource
    try:   # a runaway expansion fails with MemoryError instead of swapping the machine
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    except (ValueError, OSError):
        pass
    import sympy
    from sympy.parsing.sympy_parser import parse_expr

    names = {k: getattr(sympy, k) for k in ("Symbol", "Rational", "Integer", "pi", "E", "I", "oo", "sqrt", "root",
                                            "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan",
                                            "sinh", "cosh", "tanh", "log", "exp", "Abs", "factorial", "binomial")}

    def equal(a_src: str, b_src: str):
        a = parse_expr(a_src, local_dict=dict(names))
        b = parse_expr(b_src, local_dict=dict(names))
        diff = sympy.simplify(a - b)
        if diff == 0:
            return True
        if diff.is_number:
            return False if diff.is_finite is not False else None
        same = a.equals(b)
        return None if same is None else bool(same)

    print("ready", flush=True)
    for line in sys.stdin:
        try:
            req = json.loads(line)
            result = equal(req["a"], req["b"])
        except Exception:        # any failure is "undecided", never a dead worker
            result = None
        print(json.dumps({"equal": result}), flush=True)


if __name__ == "__main__":
    _serve()
