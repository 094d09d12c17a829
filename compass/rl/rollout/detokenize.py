"""Parallel detokenization of completions (paper "Each Prompt Matters" §3.2.1, multi-detokenize).

Why: turning many long rollouts back into text before scoring is a serial CPU cost of the reward stage
(the paper: up to 20-30% of pipeline latency), and ``tok.decode`` holds the GIL, so threads do not help.
:class:`DetokenizerPool` spreads it over worker processes and gathers the texts in order.
Identical: every text equals :func:`completion_text` ``(tok, ids)``, the rollout's rule (eos and pad
dropped, the rest through ``tok.decode``): workers apply the same filter and call ``decode`` on an
unpickled copy of the same tokenizer.
Failure: a dead worker is restarted and its unfinished requests re-sent, each at most ``retries``
(default 1) times; then the request fails with a ``RuntimeError`` naming the worker, pid and exit code.
A worker that dies before loading the tokenizer is not restarted: the pool fails every request. No wait
is ever on a dead process.
"""
from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import pickle
import queue
import signal
import threading
import weakref
from concurrent.futures import Future, InvalidStateError
from multiprocessing.connection import wait

import numpy as np

__all__ = ["completion_text", "DetokenizerPool"]


def completion_text(tok, ids) -> str:
    """The text of a completion's ``ids`` (list[int]): eos and pad dropped, the rest ``tok.decode``-d."""
    drop = (tok.eos_token_id, tok.pad_token_id)
    return tok.decode([t for t in ids if t not in drop])


def _pack(seqs) -> tuple[np.ndarray, np.ndarray]:
    """``(flat int32[total], offsets int64[n + 1])``: one buffer to pickle, not a list of Python ints each."""
    offsets = np.zeros(len(seqs) + 1, np.int64)
    np.cumsum([len(s) for s in seqs], out=offsets[1:])
    return np.fromiter(itertools.chain.from_iterable(seqs), np.int32, int(offsets[-1])), offsets


def _decode_packed(tok, flat: np.ndarray, offsets: np.ndarray) -> list[str]:
    keep = np.ones(len(flat), bool)
    for t in {tok.eos_token_id, tok.pad_token_id} - {None}:     # completion_text's filter, vectorised
        keep &= flat != t
    return [tok.decode(flat[a:b][keep[a:b]].tolist()) for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]


def _worker_main(blob: bytes, requests, results) -> None:
    # one thread each (the pool is the parallelism), set before the tokenizer's libraries load
    os.environ.update(TOKENIZERS_PARALLELISM="false", RAYON_NUM_THREADS="1", OMP_NUM_THREADS="1")
    signal.signal(signal.SIGINT, signal.SIG_IGN)                 # the parent decides when workers stop
    tok = pickle.loads(blob)                                     # 1.4 s; from_pretrained 7 s (imports torch)
    results.send(("ready", None, None))
    while True:
        try:
            msg = requests.recv()
        except EOFError:                                         # the parent is gone: so are we
            msg = None
        if msg is None:
            return
        try:
            results.send((msg[0], _decode_packed(tok, msg[1], msg[2]), None))
        except Exception as e:                                   # noqa: BLE001 -- the caller gets it
            results.send((msg[0], None, f"{type(e).__name__}: {e}"))


class _Worker:
    """A process, its request and result pipes, and a sender thread (no caller blocks on a full pipe)."""

    def __init__(self, ctx, index: int, blob: bytes):
        req_r, self.req_w = ctx.Pipe(duplex=False)
        self.res_r, res_w = ctx.Pipe(duplex=False)
        self.index, self.tokens, self.ready = index, 0, False   # tokens in flight, for submit's choice
        self.proc = ctx.Process(target=_worker_main, args=(blob, req_r, res_w), daemon=True, name=f"detok-{index}")
        self.proc.start()
        req_r.close()
        res_w.close()                                            # so its death reads as EOF here
        self.outbox: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._send_loop, daemon=True).start()

    def _send_loop(self) -> None:
        while True:
            msg = self.outbox.get()
            try:
                self.req_w.send(msg)
            except OSError:                                      # it died: the reader re-sends what was lost
                return
            if msg is None:
                return

    def describe(self) -> str:
        return f"detokenizer worker {self.index} (pid {self.proc.pid}, exit code {self.proc.exitcode})"


class DetokenizerPool:
    """``workers`` processes decoding with :func:`completion_text`; ``workers`` 0 or 1 decode in-process.

    ``decode_many(list[list[int]]) -> list[str]``, ``submit(list[int]) -> Future[str]``. Use as a context
    manager or call ``close()`` (idempotent; a dropped pool closes when collected). Workers are daemons and
    exit when the parent's pipe closes, so none outlives the pool's process.
    """

    def __init__(self, tok, workers: int, *, retries: int = 1, start_timeout_s: float = 300.0):
        self.tok, self.retries, self.n_workers = tok, retries, workers if workers > 1 else 0
        self._closed, self._broken = False, None
        if not self.n_workers:
            return
        self._ctx = mp.get_context("spawn")                     # never fork: the parent may hold Ray/torch threads
        self._blob = pickle.dumps(tok)
        self._jobs: dict[int, list] = {}                         # id -> [future, message, worker, tries]
        self._ids, self._lock = itertools.count(), threading.Lock()
        self._workers = [_Worker(self._ctx, i, self._blob) for i in range(self.n_workers)]
        for w in self._workers:                                  # started = every worker holds the tokenizer
            try:
                w.ready = w.res_r.poll(start_timeout_s) and w.res_r.recv()[0] == "ready"
            except (EOFError, OSError):
                pass
            if not w.ready:
                self.close()
                raise RuntimeError(f"{w.describe()} did not load the tokenizer (died, or over {start_timeout_s:.0f} s)")
        # the reader holds the pool weakly, so that a pool dropped without close() is collected
        threading.Thread(target=_read_loop, args=(weakref.ref(self),), name="detok-reader", daemon=True).start()

    def decode_many(self, seqs, timeout: float | None = None) -> list[str]:
        """``[completion_text(tok, ids) for ids in seqs]``: one contiguous chunk of about equal tokens per worker."""
        seqs = list(seqs)
        if not self.n_workers or not seqs:
            return [completion_text(self.tok, ids) for ids in seqs]
        cum = np.cumsum([len(s) + 1 for s in seqs])              # +1: a completion has a fixed cost too
        bounds = [0, *np.searchsorted(cum, cum[-1] * np.arange(1, self.n_workers) / self.n_workers).tolist(), len(seqs)]
        futs = [self._submit_packed(seqs[a:b], k)                 # packed and sent chunk by chunk, so the
                for k, (a, b) in enumerate(zip(bounds, bounds[1:])) if b > a]   # first worker starts early
        return [text for f in futs for text in f.result(timeout)]

    def submit(self, ids) -> Future:
        """A future of ``completion_text(tok, ids)``, decoded by the worker with the fewest tokens in flight."""
        out: Future = Future()
        if not self.n_workers:
            out.set_result(completion_text(self.tok, ids))
            return out
        self._submit_packed([ids], None).add_done_callback(
            lambda f: _settle(out, None if f.exception() else f.result()[0], f.exception()))
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self.n_workers:
            return
        with self._lock:
            workers, jobs = list(self._workers), list(self._jobs.values())
            self._jobs.clear()
        for w in workers:
            w.outbox.put(None)
        for w in workers:
            w.proc.join(5)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(5)
        for job in jobs:
            _settle(job[0], error=RuntimeError("detokenizer pool closed before this request was decoded"))

    def __enter__(self) -> "DetokenizerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        if hasattr(self, "_workers"):
            self.close()

    def _submit_packed(self, seqs, index: int | None) -> Future:
        flat, offsets = _pack(seqs)
        fut: Future = Future()
        with self._lock:
            if self._closed or self._broken:
                raise RuntimeError(self._broken or "detokenizer pool is closed")
            w = self._workers[index] if index is not None else min(self._workers, key=lambda x: x.tokens)
            job = next(self._ids)
            self._jobs[job] = [fut, (job, flat, offsets), w, 0]
            w.tokens += len(flat)
            w.outbox.put(self._jobs[job][1])
        return fut

    def _deliver(self, w: _Worker, job, texts, error) -> None:
        with self._lock:
            entry = self._jobs.pop(job, None)
            if entry is not None:
                w.tokens -= len(entry[1][1])
        if entry is not None:
            _settle(entry[0], texts, RuntimeError(f"{w.describe()} failed to decode: {error}") if error else None)

    def _restart(self, dead: _Worker) -> None:
        """Replace a dead worker and re-send its unfinished requests (each at most ``retries`` times)."""
        dead.outbox.put(None)
        dead.proc.join()
        new = _Worker(self._ctx, dead.index, self._blob) if dead.ready else None
        why = f"{dead.describe()} died while decoding this request (retried at most {self.retries} time(s))"
        failed = []
        with self._lock:
            if self._closed:
                if new is not None:
                    new.outbox.put(None)
                return
            if new is None:                                      # died loading the tokenizer: no restart loop
                why = self._broken = f"{dead.describe()} died before it loaded the tokenizer; the pool is broken"
            self._workers[dead.index] = new or dead
            for job, entry in list(self._jobs.items()):
                if new is not None and entry[2] is not dead:
                    continue
                if new is None or entry[3] >= self.retries:
                    failed.append(self._jobs.pop(job)[0])
                else:
                    entry[2], entry[3], new.tokens = new, entry[3] + 1, new.tokens + len(entry[1][1])
                    new.outbox.put(entry[1])
        for fut in failed:
            _settle(fut, error=RuntimeError(why))


def _settle(fut: Future, value=None, error: BaseException | None = None) -> None:
    try:
        fut.set_exception(error) if error is not None else fut.set_result(value)
    except InvalidStateError:                                    # cancelled by its caller
        pass


def _read_loop(ref) -> None:
    """The pool's reader thread: deliver results, restart dead workers; ends with the pool."""
    while (pool := ref()) is not None and not pool._closed and not pool._broken:
        with pool._lock:
            workers = list(pool._workers)
        del pool                                                 # no strong reference while waiting
        ready = wait([w.res_r for w in workers], 1.0)            # a dead worker's pipe reads as EOF
        if (pool := ref()) is None or pool._closed:
            return
        for w in (w for w in workers if w.res_r in ready):
            try:
                job, texts, error = w.res_r.recv()
            except (EOFError, OSError):
                pool._restart(w)
                continue
            if job == "ready":
                w.ready = True
            else:
                pool._deliver(w, job, texts, error)
