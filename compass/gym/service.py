"""The reward service: samples go in as they finish, scores come back as futures.

``RewardService`` keeps a pool of worker processes (CPU-bound verifiers run
in parallel, outside the trainer's process). A dispatcher thread hands tasks
out, least-loaded worker first, and watches deadlines:

- a task past its verifier's timeout is answered ``kind="timeout"`` (with the
  verifier's error score) and its worker, with every process it started, is
  killed and replaced; the tasks queued behind it go back to the queue;
- a worker that dies without answering (an infrastructure fault) is replaced
  and the task retried once; a second death answers ``kind="crash"``;
- a row the verifier cannot score answers ``kind="error"`` with the reason.

Each worker holds up to ``PIPELINE_DEPTH`` tasks (at most ``MAX_PIPELINED_BYTES``
waiting), answered in order, so it never waits for the dispatcher between cheap
tasks; the deadline runs for the task it is scoring. A cancelled future is
skipped.

A request names a verifier of ``compass.gym.registry`` (``math``, ``code``,
``tool_call``, ...: its row form, ``compass.gym.rows``) and its row, or ``spec`` with
``{"spec", "response", "reference"}`` for the world's verifier specs. It may
carry ``token_ids`` instead of a response: workers detokenize them (with the
tokenizer in ``tokenizer_dir``) so the trainer never waits on decoding, and
apply the length and repetition shaping of ``shaping`` to those tokens.

``metrics()``: per verifier, requests, p50/p99 latency (submit to answer),
throughput and failures by kind.
"""
from __future__ import annotations

import collections
import itertools
import multiprocessing as mp
import os
import pickle
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

import numpy as np
import psutil

from compass.gym.penalties import ShapingConfig, shape

DEFAULT_TIMEOUT_S = 30.0
# Tasks queued at a worker beyond the one it is scoring: hides the round trip to the dispatcher
# (cheap verifiers take microseconds) while a timeout still costs little: the others are re-queued.
PIPELINE_DEPTH = 4
# Bytes that may wait in a busy worker's pipe (well under the socket buffer): beyond that a send could
# block the dispatcher behind a slow task, so larger rows wait for an idle worker.
MAX_PIPELINED_BYTES = 32 << 10
SPEC = "spec"                       # request kind for the world's ``{"type": ...}`` verifier specs
# An answer the service gave in the verifier's place, as a compass.gym.reasons code.
_KIND_REASON = {"timeout": "verifier_timeout", "crash": "verifier_crash", "error": "internal"}
_PRELOAD = ["compass.gym.rows", "compass.gym.score", "compass.gym.penalties"]


@dataclass
class RewardResult:
    verifier: str
    score: float                      # shaped total when shaping applies
    kind: str                         # ok | error | timeout | crash
    fields: dict = field(default_factory=dict)   # what the verifier added (row form), shaping parts
    error: str | None = None
    latency_s: float = 0.0            # submit to answer
    reason: str | None = None         # why the score is what it is (compass.gym.reasons), None when plain


# -- worker side ---------------------------------------------------------------------------
def _score_in_worker(verifier: str, row: dict, token_ids, tokenizer, shaping: ShapingConfig | None) -> dict:
    from compass.gym.score import judge
    from compass.gym.rows import score_fields
    content_ids = token_ids
    if token_ids is not None and tokenizer is not None:
        # as the rollout side decodes: markup tokens (<think>, <tool_call>) kept, eos and pad dropped;
        # lengths and n-grams for shaping are taken on the same content tokens
        drop = {tokenizer.eos_token_id, tokenizer.pad_token_id}
        content_ids = [t for t in token_ids if t not in drop]
    if token_ids is not None and "response" not in row:
        if tokenizer is None:
            return {"kind": "error", "score": 0.0, "error": "token_ids given but the service has no tokenizer_dir",
                    "reason": "internal"}
        row = {**row, "response": tokenizer.decode(content_ids)}
    if verifier == SPEC:
        try:
            value, reason = judge(row.get("spec"), row.get("response") or "", row.get("reference") or "")
        except ValueError as e:              # bad or unknown spec: the row's fault
            return {"kind": "error", "score": 0.0, "error": str(e)[:300], "reason": "bad_spec"}
        added, err = {}, None
    else:
        try:
            added = score_fields(verifier, row)
        except ValueError as e:              # unknown verifier name: answered, not raised
            return {"kind": "error", "score": 0.0, "error": str(e)[:300], "reason": "bad_spec"}
        err = added.pop("error")
        value = float(added.pop("score"))
        reason = added.get("reason")
    if shaping is not None and content_ids is not None and err is None:
        parts = shape(value, content_ids, shaping)
        added.update({f"shaping_{k}": v for k, v in parts.items() if k != "reward"})
        value = parts["reward"]
    return {"kind": "error" if err else "ok", "score": value, "fields": added, "error": err, "reason": reason}


def _worker_main(conn: Connection, tokenizer_dir: str | None, shaping_json: str | None) -> None:
    tokenizer = None
    if tokenizer_dir:
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    shaping = ShapingConfig.model_validate_json(shaping_json) if shaping_json else None
    while True:
        try:
            data = conn.recv_bytes()
        except EOFError:
            return
        task = pickle.loads(data)
        if task is None:
            return
        task_id, verifier, row, token_ids = task
        try:
            result = _score_in_worker(verifier, row, token_ids, tokenizer, shaping)
        except Exception as e:   # a verifier bug must answer this task, not kill the worker
            result = {"kind": "error", "score": 0.0, "error": f"internal: {type(e).__name__}: {str(e)[:200]}",
                      "reason": "internal"}
        conn.send((task_id, result))


# -- service side --------------------------------------------------------------------------
@dataclass
class _Task:
    id: int
    verifier: str
    row: dict
    token_ids: list[int] | None
    future: Future
    submitted: float
    attempts: int = 0
    deadline: float = 0.0
    payload: bytes = b""


class _Worker:
    """A worker process and the tasks sent to it, answered in order; the head's deadline runs."""

    def __init__(self, ctx, args):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, *args), daemon=True)
        self.proc.start()
        child.close()
        self.inflight: collections.deque[_Task] = collections.deque()

    def kill(self) -> None:
        """Kill the worker and everything it started (sandbox workers run in their own sessions, the
        sympy helper is a plain child): none may outlive a timed-out task."""
        try:
            tree = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            tree = []
        self.proc.kill()
        for child in tree:
            try:
                child.kill()
            except psutil.Error:
                pass
        self.proc.join(5)
        psutil.wait_procs(tree, timeout=5)
        self.conn.close()


class RewardService:
    """``submit(verifier, row, token_ids=None) -> Future[RewardResult]``; use as a context manager."""

    def __init__(self, workers: int | None = None, *, timeouts: dict[str, float] | None = None,
                 default_timeout_s: float = DEFAULT_TIMEOUT_S, tokenizer_dir: str | None = None,
                 shaping: ShapingConfig | None = None):
        self.n_workers = workers or max(1, os.cpu_count() or 1)
        self.timeouts = dict(timeouts or {})
        self.default_timeout_s = default_timeout_s
        self._args = (tokenizer_dir, shaping.model_dump_json() if shaping else None)
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(_PRELOAD)
        self._workers = [_Worker(self._ctx, self._args) for _ in range(self.n_workers)]
        self._pending: queue.SimpleQueue[_Task] = queue.SimpleQueue()
        self._retry: collections.deque[_Task] = collections.deque()    # dispatcher-only
        self._peek: _Task | None = None      # a large row waiting for an idle worker
        self._wake_r, self._wake_w = self._ctx.Pipe(duplex=False)
        self._ids = itertools.count()
        self._closed = False
        self._lock = threading.Lock()
        self._stats: dict[str, dict] = {}
        self._t0: float | None = None
        self._t_last = 0.0
        self._thread = threading.Thread(target=self._dispatch, name="reward-service", daemon=True)
        self._thread.start()

    # -- public API -----------------------------------------------------------------------
    def submit(self, verifier: str, row: dict, token_ids: list[int] | None = None) -> Future:
        """Queue one sample; the future resolves to a RewardResult (never raises for a bad row)."""
        fut: Future = Future()
        now = time.perf_counter()
        with self._lock:
            if self._closed:
                raise RuntimeError("reward service is closed")
            self._t0 = now if self._t0 is None else self._t0
            self._pending.put(_Task(next(self._ids), verifier, row, token_ids, fut, now))
            self._wake_w.send_bytes(b"1")
        return fut

    def submit_spec(self, spec, response: str | None, reference: str, token_ids: list[int] | None = None) -> Future:
        """A world verifier spec (``prompts.verifier``) against its reference."""
        row = {"spec": spec, "reference": reference}
        if response is not None:
            row["response"] = response
        return self.submit(SPEC, row, token_ids)

    def score_many(self, requests: list[tuple[str, dict]]) -> list[RewardResult]:
        """Submit ``(verifier, row)`` pairs and wait for all; results in input order."""
        futures = [self.submit(v, r) for v, r in requests]
        return [f.result() for f in futures]

    def metrics(self) -> dict:
        """Per verifier: requests, ok, failures by kind, p50/p99 latency (s), throughput (/s); and totals."""
        with self._lock:
            span = max(self._t_last - (self._t0 or self._t_last), 1e-9)
            out = {}
            for name, s in sorted(self._stats.items()):
                lat = np.array(s["latency"]) if s["latency"] else np.zeros(1)
                out[name] = {"requests": s["n"], "ok": s["kinds"].get("ok", 0),
                             "failures": {k: v for k, v in s["kinds"].items() if k != "ok"},
                             "p50_latency_s": float(np.percentile(lat, 50)),
                             "p99_latency_s": float(np.percentile(lat, 99)),
                             "throughput_per_s": s["n"] / span}
            total = sum(s["n"] for s in self._stats.values())
            return {"verifiers": out, "requests": total, "throughput_per_s": total / span,
                    "workers": self.n_workers}

    def worker_pids(self) -> list[int]:
        """The process ids of the current workers (a dead one is listed until the dispatcher replaces it)."""
        return [w.proc.pid for w in list(self._workers)]

    def close(self) -> None:
        """Score what was submitted (every task has a deadline, so this ends), then stop the workers."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._wake_w.send_bytes(b"0")
        self._thread.join()
        for w in self._workers:
            try:
                w.conn.send_bytes(pickle.dumps(None))
            except (OSError, BrokenPipeError):
                pass
        for w in self._workers:
            w.proc.join(5)
            if w.proc.is_alive():
                w.kill()

    def __enter__(self) -> "RewardService":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- dispatcher -----------------------------------------------------------------------
    def _finish(self, task: _Task, result: dict) -> None:
        now = time.perf_counter()
        reason = result.get("reason") or _KIND_REASON.get(result["kind"])
        res = RewardResult(task.verifier, float(result.get("score", 0.0)), result["kind"],
                           result.get("fields") or {}, result.get("error"), now - task.submitted, reason)
        with self._lock:
            s = self._stats.setdefault(task.verifier, {"n": 0, "kinds": {}, "latency": []})
            s["n"] += 1
            s["kinds"][res.kind] = s["kinds"].get(res.kind, 0) + 1
            s["latency"].append(res.latency_s)
            self._t_last = now
        if not task.future.done():           # a caller may have cancelled it
            task.future.set_result(res)

    def _fail(self, task: _Task, kind: str, why: str) -> None:
        """Answer a task the worker could not (timeout, crash) with the verifier's error score and defaults."""
        fields, value = {}, 0.0
        if task.verifier != SPEC:
            from compass.gym.rows import get_scorer
            try:
                scorer = get_scorer(task.verifier)
                fields, value = dict(scorer.defaults), scorer.score_on_error(task.row)
            except ValueError:
                pass
        self._finish(task, {"kind": kind, "score": value, "fields": fields, "error": why})

    def _timeout(self, task: _Task) -> float:
        return self.timeouts.get(task.verifier, self.default_timeout_s)

    def _send(self, worker: _Worker, task: _Task) -> None:
        """Queue ``task`` at ``worker`` (its deadline starts when it heads the worker's queue)."""
        task.attempts += 1
        if not worker.inflight:
            task.deadline = time.perf_counter() + self._timeout(task)
        worker.inflight.append(task)
        try:
            worker.conn.send_bytes(task.payload)
        except (OSError, BrokenPipeError):
            self._replace(worker, why="worker died")

    def _replace(self, worker: _Worker, *, why: str) -> None:
        """Kill and replace ``worker``. On a timeout the head task is answered ``timeout``; on a death it is
        retried once (then ``crash``). Tasks queued behind the head go back to the queue as they were."""
        tasks = list(worker.inflight)
        worker.inflight.clear()
        worker.kill()
        self._workers[self._workers.index(worker)] = _Worker(self._ctx, self._args)
        if not tasks:
            return
        head, rest = tasks[0], tasks[1:]
        for t in rest:
            t.attempts -= 1                  # never started: not an attempt
            self._retry.append(t)
        if why == "timeout":
            self._fail(head, "timeout", f"timeout: the verifier ran past {self._timeout(head):g} s")
        elif head.attempts < 2:
            self._retry.append(head)
        else:
            self._fail(head, "crash", why)

    def _next_task(self) -> _Task | None:
        """The next task to hand out: retries first, then new submissions; cancelled ones are dropped, and
        unpicklable rows are answered as errors here."""
        while True:
            if self._retry:
                return self._retry.popleft()
            if self._pending.empty():
                return None
            task = self._pending.get()
            if not task.future.set_running_or_notify_cancel():
                continue                     # cancelled before it started
            try:
                task.payload = pickle.dumps((task.id, task.verifier, task.row, task.token_ids))
            except Exception as e:           # not picklable: the request's fault
                self._finish(task, {"kind": "error", "score": 0.0, "error": f"request not sendable: {e}",
                                    "reason": "bad_field"})
                continue
            return task

    def _hand_out(self) -> None:
        """Least-loaded first: every worker gets a task before any gets a second. A large row goes only
        to an idle worker, which is reading its pipe, so sending it never blocks the dispatcher."""
        while True:
            w = min(self._workers, key=lambda w: len(w.inflight))
            if len(w.inflight) >= PIPELINE_DEPTH:
                return
            task = self._peek or self._next_task()
            self._peek = None
            if task is None:
                return
            queued = sum(len(t.payload) for t in list(w.inflight)[1:])   # sent, not yet read by the worker
            if w.inflight and queued + len(task.payload) > MAX_PIPELINED_BYTES:
                self._peek = task            # wait for an idle worker
                return
            self._send(w, task)

    def _dispatch(self) -> None:
        try:
            self._dispatch_loop()
        except BaseException as e:           # never leave a caller waiting on a dead dispatcher
            err = f"reward service failed: {type(e).__name__}: {e}"
            for w in self._workers:
                for t in w.inflight:
                    self._finish(t, {"kind": "crash", "score": 0.0, "error": err})
            while (t := self._next_task()) is not None:
                self._finish(t, {"kind": "crash", "score": 0.0, "error": err})
            raise

    def _dispatch_loop(self) -> None:
        while True:
            self._hand_out()
            busy = [w for w in self._workers if w.inflight]
            if self._closed and not busy and self._peek is None and not self._retry and self._pending.empty():
                return
            now = time.perf_counter()
            wait_s = min([w.inflight[0].deadline - now for w in busy], default=1.0)
            ready = wait([self._wake_r] + [w.conn for w in busy], timeout=max(0.0, wait_s))
            for r in ready:
                if r is self._wake_r:
                    while self._wake_r.poll():
                        self._wake_r.recv_bytes()
                    continue
                w = next(w for w in busy if w.conn is r)
                while w.inflight:
                    try:
                        if not w.conn.poll():
                            break
                        task_id, result = w.conn.recv()
                    except (EOFError, OSError):
                        self._replace(w, why="worker died")
                        break
                    if task_id != w.inflight[0].id:      # cannot happen with an in-order worker: treat as a fault
                        self._replace(w, why="worker answered out of order")
                        break
                    self._finish(w.inflight.popleft(), result)
                    if w.inflight:           # the next task starts now: its deadline starts now
                        w.inflight[0].deadline = time.perf_counter() + self._timeout(w.inflight[0])
            now = time.perf_counter()
            for w in list(self._workers):
                if w.inflight and now >= w.inflight[0].deadline:
                    self._replace(w, why="timeout")
