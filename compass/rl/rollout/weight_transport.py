"""Moving the policy's weights from the trainer to the rollout engine, in memory.

STANDALONE: this file imports only the standard library, numpy and torch at module level, because the vLLM
worker (another Python, ``.venv-vllm``, without the compass package) imports it by putting this file's
directory on ``sys.path``. For the same reason every message is built of builtins (dict, list, tuple, str,
int, float) and torch objects only: the two ends import this module under different names, so none of its
classes may cross the pipe. The ``file`` fallback alone imports ``safetensors`` (a transformers dependency,
present in both environments), when it is used.

Methods (``SENDERS`` / ``RECEIVERS``, keyed by name):

- ``file``: one safetensors file in a directory, loaded back by the receiver. The fallback, and what the
  ``vllm`` backend does before this module (the baseline of ``compass bench weight-sync``).
- ``shm``: same host, CPU. Each bucket is copied (and cast) into a POSIX shared-memory segment; only the
  segments' names and layout cross the pipe; the receiver maps the segments and hands zero-copy views to
  the loader. The copies run in a background thread of the sender, bucket after bucket, and each bucket is
  flagged ready in its segment's header as soon as it is written: the receiver yields a bucket's tensors
  once it is ready, so the loader copies bucket i while the sender writes bucket i+1. Segments are kept and
  rewritten in place while the layout is unchanged (the same model syncs every step), unlinked by the
  sender's ``close`` (or by its resource tracker if the sender dies).
- ``cuda_ipc``: one GPU shared by trainer and engine. Each bucket is packed into one CUDA tensor whose IPC
  handle (``torch.multiprocessing.reductions.reduce_tensor``) crosses the pipe; all buckets stay allocated
  on the sender until ``finish``.
- ``collective``: separate GPUs (NCCL), or separate processes without a shared ``/dev/shm`` (gloo). The
  sender and its ``receivers`` (one engine, or every worker of a Ray rollout pool) form their own process
  group from a ``TCPStore`` the sender hosts (never the default group, which vLLM owns in the worker); each
  bucket is broadcast from rank 0 as one flat uint8 tensor, to every receiver at once. Receiver ``k`` (of
  ``1 .. receivers``) gets the message with ``"rank": k`` added.

Both ends, as the ``vllm`` client and worker use them::

    # sender (trainer side)                        # receiver (worker side), one per process
    sender = make_sender("shm", dtype="bfloat16")   receiver = Receiver()
    message = sender.send(state_dict.items())      weights = receiver.receive(message)   # an iterator
    <pipe round trip: message -> worker ------->   <load weights, copying each as it comes>; del weights
     ... the worker's reply>                       ...
    sender.finish()                                receiver.close()      # at shutdown
    ...
    sender.close()                                 # at shutdown

``send`` takes an ordered iterable of ``(name, tensor)``: any shape, any device, contiguous or not.
Floating-point tensors are cast to ``dtype`` (``"float32"``, ``"bfloat16"``, ``"float16"``; ``None`` keeps
each tensor's own); other dtypes (int, bool) travel as they are. ``receive`` yields ``(name, tensor)`` in
the same order, with the cast dtype and the original shape, contiguous: CPU tensors for ``file``/``shm``/
gloo, CUDA for ``cuda_ipc``/NCCL. Use them before the next sync (``shm``: they view memory the sender's
next ``send`` rewrites): the loader copies them (vLLM's ``reload_weights`` does). Consume the iterator as it
comes (``shm`` and ``collective`` yield a bucket once it has arrived): ``list(...)`` works too, it just
waits for the last bucket before the loader starts. The order is send -> the receiver consumes everything
-> ``finish`` -> the next send; ``shm`` refuses a ``send`` before the previous sync's ``finish``, since the
receiver may still be reading the buckets it would overwrite.
"""
from __future__ import annotations

import datetime
import math
import mmap
import os
import secrets
import shutil
import tempfile
import threading
import time
import weakref
from multiprocessing import shared_memory
from typing import Iterable, Iterator

import numpy as np
import torch

DEFAULT_BUCKET_BYTES = 512 << 20
# shm: small buckets, so the receiver starts copying as soon as the first tensors are in (a 110M Qwen3's
# embedding alone is 49 MB in bf16: 32 MiB makes it a bucket of its own; 64 MiB adds layer 0, later)
SHM_BUCKET_BYTES = 32 << 20
# shm: threads filling the buckets. Two: while the receiver waits for the first bucket both cores cast, and
# the fill keeps ahead of the receiver's copies after (measured: 1 -> 2 saves ~1-2 ms of ~28 on 2 CPUs)
SHM_FILL_THREADS = 2
FILL_PIECE_BYTES = 4 << 20      # shm: a big tensor is filled in slices of this size, shared by the fill threads
SHM_TIMEOUT_S = 60.0            # shm: the receiver gives up when no bucket gets ready for this long
ALIGN = 64                      # tensor offsets in a bucket: any dtype can view them, cache-line aligned
ROLLOUT_DTYPES = ("float32", "bfloat16", "float16")
SHM_DIR = "/dev/shm"
SHM_PREFIX = "compass-wt-"

Named = Iterable[tuple[str, torch.Tensor]]


# -- dtypes and buckets ------------------------------------------------------------------------------------
def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"weight transport: {name!r} is not a torch dtype")
    return dt


def _rollout_dtype(dtype) -> torch.dtype | None:
    if dtype is None:
        return None
    name = _dtype_name(dtype) if isinstance(dtype, torch.dtype) else str(dtype)
    if name not in ROLLOUT_DTYPES:
        raise ValueError(f"weight transport: dtype must be one of {list(ROLLOUT_DTYPES)} or None, got {dtype!r}")
    return _dtype(name)


def _target_dtype(t: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype:
    return dtype if dtype is not None and t.is_floating_point() else t.dtype


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def plan_buckets(named: Named, dtype=None, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> list[dict]:
    """Cut the ordered ``(name, tensor)`` list into buckets of at most ``bucket_bytes`` (after the cast to
    ``dtype``, offsets aligned to ``ALIGN``); a tensor larger than a bucket gets a bucket of its own.

    Per bucket, a picklable dict: ``names``, ``dtypes`` (torch dtype names, after the cast), ``shapes``
    (tuples of ints), ``offsets`` (bytes from the bucket's start) and ``nbytes`` (the bucket's used size).
    Concatenated, the buckets list every tensor once, in the input order."""
    if bucket_bytes <= 0:
        raise ValueError(f"weight transport: bucket_bytes must be positive, got {bucket_bytes}")
    dt = _rollout_dtype(dtype)
    buckets: list[dict] = []
    cur = None
    for name, t in named:
        tdt = _target_dtype(t, dt)
        size = t.numel() * tdt.itemsize
        start = _align(cur["nbytes"]) if cur is not None else 0
        if cur is None or (cur["names"] and start + size > bucket_bytes):
            cur = {"names": [], "dtypes": [], "shapes": [], "offsets": [], "nbytes": 0}
            buckets.append(cur)
            start = 0
        cur["names"].append(name)
        cur["dtypes"].append(_dtype_name(tdt))
        cur["shapes"].append(tuple(int(s) for s in t.shape))
        cur["offsets"].append(start)
        cur["nbytes"] = start + size
    return buckets


def _next_named(it: Iterator[tuple[str, torch.Tensor]], name: str) -> torch.Tensor:
    """The next tensor of ``it``, which must be ``name``'s (the plan and the tensors walk the same order)."""
    src_name, src = next(it)
    if src_name != name:
        raise RuntimeError(f"weight transport: tensor {src_name!r} where the plan has {name!r}")
    return src


def _entries(meta: dict):
    for name, dt, shape, off in zip(meta["names"], meta["dtypes"], meta["shapes"], meta["offsets"]):
        dtype = _dtype(dt)
        yield name, dtype, shape, off, math.prod(shape) * dtype.itemsize


def _pack(meta: dict, named: Iterator[tuple[str, torch.Tensor]], buf: torch.Tensor) -> None:
    """Copy the bucket's tensors (the next ones of ``named``) into the flat uint8 ``buf``, casting on the way."""
    for name, dtype, shape, off, n in _entries(meta):
        src = _next_named(named, name)
        if n == 0:
            continue
        src = src.detach()
        if src.dtype != dtype and src.device != buf.device:
            src = src.to(dtype)               # cast where the tensor is: fewer bytes cross the bus
        buf[off:off + n].view(dtype).view(shape).copy_(src)


def _views(meta: dict, buf: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """The bucket's tensors as views of the flat uint8 ``buf`` (no copy)."""
    return [(name, buf[off:off + n].view(dtype).view(shape)) for name, dtype, shape, off, n in _entries(meta)]


def _require_cuda(what: str) -> None:
    if not torch.cuda.is_available():
        raise RuntimeError(f"weight transport {what!r} needs CUDA, and torch.cuda.is_available() is False in "
                           f"this process; use 'shm' (same host) or 'collective' (gloo) instead")


def _unknown(method) -> ValueError:
    return ValueError(f"unknown weight transport {method!r}; choose one of {', '.join(map(repr, SENDERS))}")


# -- the sending end ---------------------------------------------------------------------------------------
class Sender:
    """One per trainer and method; ``send`` -> message (picklable) -> receiver; then ``finish``."""
    method = ""

    def __init__(self, dtype=None, bucket_bytes: int = DEFAULT_BUCKET_BYTES):
        self.dtype = _rollout_dtype(dtype)
        self.bucket_bytes = int(bucket_bytes)

    def send(self, named_tensors: Named) -> dict:
        """Stage the weights; returns the message for the receiver (``{"method": ..., ...}``). The weights
        must not change until ``finish`` (``collective`` reads them while the message travels)."""
        raise NotImplementedError

    def finish(self) -> None:
        """Call after the receiver has loaded the message: frees what only that sync needed and raises what
        went wrong on this side (``collective``: waits for the broadcasts)."""

    def close(self) -> None:
        """Free everything (shared memory, process group, files); the sender cannot send again."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class FileSender(Sender):
    """The fallback: one safetensors file in ``directory`` (a fresh temporary one by default), removed by
    ``finish``. Message: ``{"method": "file", "path": str, "names": [str]}`` (the file's own order is not the
    sender's)."""
    method = "file"

    def __init__(self, dtype=None, bucket_bytes: int = DEFAULT_BUCKET_BYTES, directory: str | None = None):
        super().__init__(dtype, bucket_bytes)
        self._own_dir = directory is None
        self.directory = tempfile.mkdtemp(prefix="compass-weights-") if directory is None else str(directory)
        self._path: str | None = None

    def send(self, named_tensors: Named) -> dict:
        from safetensors.torch import save_file
        tensors = {}
        for name, t in named_tensors:
            t = t.detach()
            tensors[name] = t.to("cpu", _target_dtype(t, self.dtype)).contiguous()
        self._path = os.path.join(self.directory, f"weights-{secrets.token_hex(4)}.safetensors")
        save_file(tensors, self._path)
        return {"method": self.method, "path": self._path, "names": list(tensors)}

    def finish(self) -> None:
        path, self._path = self._path, None
        if path is not None:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def close(self) -> None:
        self.finish()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)


def _unlink_all(segments: list, *views: list) -> None:
    for v in views:
        v.clear()                         # our arrays export seg.buf: drop them before closing the mappings
    for seg in segments:
        try:
            seg.close()
        except BufferError:               # a view still alive: the mapping goes with it, the name goes now
            pass
        try:
            seg.unlink()
        except FileNotFoundError:
            pass
    segments.clear()


# shm segment layout: HEADER bytes of int64 flags, then the bucket (offsets of the plan count from there).
# Flags hold sync generations (1, 2, ... per sender; a new segment is zero-filled, so 0 is "never").
HEADER = ALIGN
_READY, _FAILED = 0, 1            # the last generation whose bucket was written / could not be (the fill failed)
_ORDER = threading.Lock()


def _order() -> None:
    """Publish / observe a bucket: x86-64 keeps stores in order anyway, but a weakly ordered CPU (aarch64)
    may make the flag visible before the data; a lock's release followed by an acquire is a barrier both
    ways, the only one plain Python has."""
    with _ORDER:
        pass
    with _ORDER:
        pass


def _pid_namespace():
    try:
        st = os.stat("/proc/self/ns/pid")
    except OSError:
        return None
    return [st.st_dev, st.st_ino]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:                   # EPERM: it exists
        pass
    return False


def _pieces(plan: list[dict], named: list) -> list[tuple]:
    """The copies that fill the buckets, in order, as ``(bucket, offset, dtype, shape, source, start, stop)``:
    a contiguous CPU tensor is cut into flat element ranges ``[start, stop)`` of ``FILL_PIECE_BYTES`` (after the
    cast), so the fill threads share a big one; any other goes whole (``start`` None). Plain tuples: views
    cost microseconds each, made by the fill threads rather than before ``send`` returns."""
    out = []
    it = iter(named)
    for b, meta in enumerate(plan):
        for name, dtype, shape, off, n in _entries(meta):
            src = _next_named(it, name)
            if n == 0:
                continue
            if src.device.type == "cpu" and src.is_contiguous():
                numel, step = n // dtype.itemsize, max(FILL_PIECE_BYTES // dtype.itemsize, 1)
                out += [(b, off, dtype, shape, src, i, min(i + step, numel)) for i in range(0, numel, step)]
            else:
                out.append((b, off, dtype, shape, src, None, None))
    return out


def _fill_piece(buf: torch.Tensor, piece: tuple) -> None:
    """One copy of the shm fill into the bucket area ``buf`` (a module function: the tests hold it back to
    stage a slow sender)."""
    _, off, dtype, shape, src, start, stop = piece
    if start is None:
        dst = buf[off:off + math.prod(shape) * dtype.itemsize].view(dtype).view(shape)
        if src.dtype != dtype and src.device != buf.device:
            src = src.to(dtype)               # cast where the tensor is: fewer bytes cross the bus
    else:
        dst = buf[off + start * dtype.itemsize:off + stop * dtype.itemsize].view(dtype)
        src = src.view(-1)[start:stop]
    dst.copy_(src)


class ShmSender(Sender):
    """Same host, CPU: one shared-memory segment per bucket, rewritten in place while its size is unchanged.

    ``send`` plans the buckets, makes the segments and returns at once; ``fill_threads`` background threads
    (torch copies release the GIL) fill the buckets in order, a big tensor in slices of ``FILL_PIECE_BYTES``,
    and set each bucket's ready flag to the sync's generation once all of it is written. Flags in the
    segments themselves, polled by the receiver, rather than a pipe or an eventfd: nothing to hand over
    besides the names, no fd that must reach the worker, and the flags stay readable -- a second receiver
    (or a retry) can read the same sync again. The receiver's polling sleeps (back-off to 0.2 ms): it takes
    no CPU the fill needs, for at most that much latency per bucket. A sender that dies mid-sync leaves a
    flag unset: the receiver raises ``TimeoutError`` after ``timeout_s`` without a new bucket, at once if it
    sees the sender's process gone (same pid namespace only); a fill that raises flags its unwritten buckets
    failed (the receiver raises, the sender's ``finish`` raises the cause).

    The sender creates segments with ``multiprocessing.shared_memory.SharedMemory``, so its resource tracker
    unlinks them if the trainer dies; the receiver maps ``/dev/shm/<name>`` with plain ``mmap`` instead of
    attaching a ``SharedMemory``: in Python < 3.13 attaching registers the segment with the *receiver's*
    tracker too, which unlinks it when the receiver exits -- under the sender, who reuses it.
    Message: ``{"method": "shm", "generation", "pid", "pid_ns", "timeout_s",
    "buckets": [plan bucket + {"segment": name}, ...]}``."""
    method = "shm"

    def __init__(self, dtype=None, bucket_bytes: int = SHM_BUCKET_BYTES, timeout_s: float = SHM_TIMEOUT_S,
                 fill_threads: int | None = None):
        super().__init__(dtype, bucket_bytes)
        if fill_threads is None:
            fill_threads = min(SHM_FILL_THREADS, os.cpu_count() or 1)
        if fill_threads < 1:
            raise ValueError(f"weight transport 'shm': fill_threads must be at least 1, got {fill_threads}")
        self.fill_threads = int(fill_threads)
        if not os.path.isdir(SHM_DIR):
            raise RuntimeError(f"weight transport 'shm' needs {SHM_DIR} (Linux); use 'collective' or 'file'")
        self.timeout_s = float(timeout_s)
        self._segments: list[shared_memory.SharedMemory] = []
        self._bufs: list[torch.Tensor] = []          # each segment's bucket area (after the header)
        self._flags: list[np.ndarray] = []           # each segment's header, int64
        self._token = f"{SHM_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        self._made = 0
        self._generation = 0
        self._pending = False                        # a send whose finish has not come yet
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._closing = False
        self.fill_s: float | None = None             # the last fill's duration, in the background
        # unlinks the segments at interpreter exit when close() was never called (the fill thread is not a
        # daemon: the interpreter joins it before running this)
        self._finalizer = weakref.finalize(self, _unlink_all, self._segments, self._bufs, self._flags)

    @property
    def segment_names(self) -> list[str]:
        return [s.name for s in self._segments]

    def _segment(self, i: int, nbytes: int) -> None:
        size = HEADER + nbytes
        if i < len(self._segments) and self._segments[i].size == size:
            return                        # same layout as last sync: rewrite in place, pages already mapped
        seg = shared_memory.SharedMemory(name=f"{self._token}-{self._made}", create=True, size=size)
        self._made += 1
        flags = np.frombuffer(seg.buf, dtype=np.int64, count=HEADER // 8)
        buf = torch.from_numpy(np.frombuffer(seg.buf, dtype=np.uint8, count=nbytes, offset=HEADER))
        if i < len(self._segments):
            old = self._segments[i]
            self._segments[i], self._bufs[i], self._flags[i] = seg, buf, flags
            _unlink_all([old])
        else:
            self._segments.append(seg)
            self._bufs.append(buf)
            self._flags.append(flags)

    def send(self, named_tensors: Named) -> dict:
        if self._pending:
            raise RuntimeError("weight transport 'shm': send() before the previous sync's finish(): its receiver "
                               "may still be reading the buckets this send would overwrite")
        if self._closing:
            raise RuntimeError("weight transport 'shm': the sender is closed")
        named = list(named_tensors)
        plan = plan_buckets(named, self.dtype, self.bucket_bytes)
        for i, meta in enumerate(plan):
            self._segment(i, meta["nbytes"])
            meta["segment"] = self._segments[i].name
        extra = self._segments[len(plan):]      # the model shrank: fewer buckets than last sync
        del self._segments[len(plan):], self._bufs[len(plan):], self._flags[len(plan):]
        _unlink_all(extra)
        pieces = _pieces(plan, named)
        self._generation += 1
        self._pending, self._error = True, None
        self._thread = threading.Thread(target=self._fill, name="compass-weight-shm-fill",
                                        args=(pieces, list(self._bufs), list(self._flags), self._generation))
        self._thread.start()
        return {"method": self.method, "generation": self._generation, "pid": os.getpid(),
                "pid_ns": _pid_namespace(), "timeout_s": self.timeout_s, "buckets": plan}

    def _fill(self, pieces: list, bufs: list, flags: list, generation: int) -> None:
        """``fill_threads`` workers take the pieces in order; the one that writes a bucket's last piece
        flags it ready, so buckets get ready in order, give or take the pieces in flight."""
        t0 = time.perf_counter()
        n_buckets = len(bufs)
        left = [0] * n_buckets
        for piece in pieces:
            left[piece[0]] += 1
        lock = threading.Lock()
        state = {"next": 0, "error": None}
        for b in range(n_buckets):
            if not left[b]:                           # only empty tensors: nothing to wait for
                flags[b][_READY] = generation

        def work() -> None:
            while True:
                with lock:
                    j = state["next"]
                    if j >= len(pieces) or state["error"] is not None or self._closing:
                        return
                    state["next"] = j + 1
                b = pieces[j][0]
                try:
                    with torch.no_grad():             # grad mode is per thread: the source may require grad
                        _fill_piece(bufs[b], pieces[j])
                except BaseException as e:        # noqa: BLE001 - re-raised by finish()
                    with lock:
                        state["error"] = state["error"] or e
                    return
                with lock:
                    left[b] -= 1
                    ready = not left[b]
                if ready:
                    _order()                      # the bucket's bytes before its flag
                    flags[b][_READY] = generation

        helpers = [threading.Thread(target=work, name="compass-weight-shm-fill") for _ in range(self.fill_threads - 1)]
        for h in helpers:
            h.start()
        work()
        for h in helpers:
            h.join()
        if state["error"] is None and self._closing and any(left):
            state["error"] = RuntimeError("the sender was closed mid-sync")
        if state["error"] is not None:
            self._error = state["error"]
            for b in range(n_buckets):
                if left[b]:
                    flags[b][_FAILED] = generation
        self.fill_s = time.perf_counter() - t0

    def finish(self, timeout: float | None = None) -> None:
        """Waits for the fill (over when the receiver has had every bucket) and raises its error."""
        thread = self._thread
        if thread is not None:
            thread.join(self.timeout_s if timeout is None else timeout)
            if thread.is_alive():
                raise TimeoutError(f"weight transport 'shm': the fill of sync {self._generation} did not end in "
                                   f"{self.timeout_s if timeout is None else timeout:g} s")
            self._thread = None
        self._pending = False
        err, self._error = self._error, None
        if err is not None:
            raise RuntimeError(f"weight transport 'shm': filling the buckets failed: {err}") from err

    def close(self) -> None:
        self._closing = True
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()                             # never unmap under it; it stops at the next piece
        self._pending = False
        self._finalizer()


class CudaIpcSender(Sender):
    """One GPU shared by trainer and engine: each bucket packed into one CUDA tensor on ``device`` (the
    current one by default), its IPC handle sent; the buckets stay allocated until ``finish``.
    Message: ``{"method": "cuda_ipc", "buckets": [plan bucket + {"ipc": (rebuild_fn, args)}, ...]}``."""
    method = "cuda_ipc"

    def __init__(self, dtype=None, bucket_bytes: int = DEFAULT_BUCKET_BYTES, device=None):
        _require_cuda(self.method)
        super().__init__(dtype, bucket_bytes)
        self.device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        self._held: list[torch.Tensor] = []

    def send(self, named_tensors: Named) -> dict:
        from torch.multiprocessing.reductions import reduce_tensor
        named = list(named_tensors)
        plan = plan_buckets(named, self.dtype, self.bucket_bytes)
        it = iter(named)
        self._held.clear()
        for meta in plan:
            buf = torch.empty(max(meta["nbytes"], 1), dtype=torch.uint8, device=self.device)
            _pack(meta, it, buf)
            self._held.append(buf)        # alive until the receiver is done with it
            meta["ipc"] = reduce_tensor(buf)
        torch.cuda.synchronize(self.device)   # the receiver reads on its own streams
        return {"method": self.method, "buckets": plan}

    def finish(self) -> None:
        self._held.clear()

    def close(self) -> None:
        self.finish()


def _new_group(backend: str, store, rank: int, world: int, host: str, timeout_s: float):
    """A ``world``-rank process group of its own over ``store`` (not torch.distributed's default group)."""
    import torch.distributed as dist
    store = dist.PrefixStore("compass-weights", store)
    timeout = datetime.timedelta(seconds=timeout_s)
    if backend == "gloo":
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = timeout
        local = host in ("127.0.0.1", "localhost", "::1")
        # loopback stays loopback; across nodes each end binds the interface it reaches the sender through (not
        # what its hostname resolves to: 127.0.1.1 on many Linux hosts), unless GLOO_SOCKET_IFNAME names one
        if local:
            device = dist.ProcessGroupGloo.create_device(hostname=host)
        elif os.environ.get("GLOO_SOCKET_IFNAME"):
            device = dist.ProcessGroupGloo.create_device(interface=os.environ["GLOO_SOCKET_IFNAME"])
        else:
            device = dist.ProcessGroupGloo.create_device(hostname=_address_towards(host))
        opts._devices = [device]
        return dist.ProcessGroupGloo(store, rank, world, opts)
    if backend == "nccl":
        if not dist.is_nccl_available():
            raise RuntimeError("weight transport 'collective': this torch has no NCCL; use backend='gloo'")
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, world, opts)
    raise ValueError(f"weight transport 'collective': backend must be 'nccl' or 'gloo', got {backend!r}")


def _shut(pg) -> None:
    """Shut a process group of this module down (gloo and NCCL groups both have ``shutdown``); errors ignored:
    it may be broken already."""
    if pg is None:
        return
    try:
        pg.shutdown()
    except Exception:                             # noqa: BLE001
        pass


def _address_towards(host: str) -> str:
    """This machine's address on the interface that routes to ``host`` (no packet is sent)."""
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))
        return s.getsockname()[0]


def _broadcast(pg, buf: torch.Tensor) -> None:
    import torch.distributed as dist
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    pg.broadcast([buf], opts).wait()


class CollectiveSender(Sender):
    """Rank 0 of a group of ``1 + receivers``: hosts the ``TCPStore`` at ``host``:``port`` (0: a free port) and
    broadcasts each bucket, packed into a reused staging tensor, from a background thread -- the receivers
    join while the message is on its way, so ``send`` must return before the data moves. ``backend``:
    ``"nccl"`` (CUDA tensors; the default where CUDA is available) or ``"gloo"`` (CPU). The group is made on
    the first send and kept; the same receivers take every later sync.
    Message: ``{"method": "collective", "backend", "host", "port", "world", "group", "timeout_s", "buckets": plan}``;
    receiver ``k`` adds ``"rank": k`` (1 when there is one receiver)."""
    method = "collective"

    def __init__(self, dtype=None, bucket_bytes: int = DEFAULT_BUCKET_BYTES, backend: str | None = None,
                 host: str = "127.0.0.1", port: int = 0, timeout_s: float = 300.0, receivers: int = 1):
        import torch.distributed as dist
        super().__init__(dtype, bucket_bytes)
        if receivers < 1:
            raise ValueError(f"weight transport 'collective': receivers must be at least 1, got {receivers}")
        self.world = receivers + 1
        self.backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if self.backend not in ("nccl", "gloo"):
            raise ValueError(f"weight transport 'collective': backend must be 'nccl' or 'gloo', got {backend!r}")
        if self.backend == "nccl":
            _require_cuda("collective (nccl)")
        self.device = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else None
        self.host, self.timeout_s = host, float(timeout_s)
        self._store = dist.TCPStore(host, port, self.world, True, timeout=datetime.timedelta(seconds=timeout_s),
                                    wait_for_workers=False)
        self.port = self._store.port
        self.group_id = secrets.token_hex(8)      # a later group on a reused port is not mistaken for this one
        self._pg = None
        self._staging: torch.Tensor | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def send(self, named_tensors: Named) -> dict:
        self.finish()                     # one sync at a time on the group
        named = list(named_tensors)
        plan = plan_buckets(named, self.dtype, self.bucket_bytes)
        self._thread = threading.Thread(target=self._push, args=(plan, named), daemon=True,
                                        name="compass-weight-broadcast")
        self._thread.start()
        return {"method": self.method, "backend": self.backend, "host": self.host, "port": self.port,
                "world": self.world, "group": self.group_id, "timeout_s": self.timeout_s, "buckets": plan}

    def _push(self, plan: list[dict], named: list) -> None:
        try:
            if self.device is not None:
                torch.cuda.set_device(self.device)
            if self._pg is None:          # blocks until every receiver joins (on its first message)
                self._pg = _new_group(self.backend, self._store, 0, self.world, self.host, self.timeout_s)
            need = max([m["nbytes"] for m in plan] + [1])
            if self._staging is None or self._staging.numel() < need:
                self._staging = None
                self._staging = torch.empty(need, dtype=torch.uint8, device=self.device or torch.device("cpu"))
            it = iter(named)
            for meta in plan:
                buf = self._staging[:meta["nbytes"]]
                _pack(meta, it, buf)
                if meta["nbytes"]:
                    _broadcast(self._pg, buf)     # wait(): the next pack may overwrite the staging tensor
            if self.device is not None:
                torch.cuda.synchronize(self.device)
        except BaseException as e:                # noqa: BLE001 - re-raised by finish()
            self._error = e

    def finish(self, timeout: float | None = None) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                raise TimeoutError("weight transport 'collective': the broadcasts did not finish")
        err, self._error = self._error, None
        if err is not None:
            raise RuntimeError(f"weight transport 'collective': sending failed: {err}") from err

    def close(self, timeout: float | None = None) -> None:
        """End the group: wait up to ``timeout`` (default ``timeout_s``) for a sync still in flight, then shut the
        group down (its connections, an NCCL communicator): members blocked in a broken broadcast get an error."""
        try:
            self.finish(timeout=self.timeout_s if timeout is None else timeout)
        except Exception:                         # noqa: BLE001 - the sync's own finish() reported it
            pass
        _shut(self._pg)
        self._pg = self._staging = self._store = None


SENDERS: dict[str, type[Sender]] = {"file": FileSender, "shm": ShmSender, "cuda_ipc": CudaIpcSender,
                                    "collective": CollectiveSender}


def make_sender(method: str, **options) -> Sender:
    """``SENDERS[method](**options)``; options: ``dtype``, ``bucket_bytes`` and the method's own."""
    if method not in SENDERS:
        raise _unknown(method)
    return SENDERS[method](**options)


# -- the receiving end -------------------------------------------------------------------------------------
class _FileReceiver:
    def receive(self, message: dict) -> Iterator[tuple[str, torch.Tensor]]:
        from safetensors.torch import load_file
        tensors = load_file(message["path"])
        return iter([(name, tensors[name]) for name in message.get("names") or tensors])

    def close(self) -> None:
        pass


class _ShmReceiver:
    """Maps each segment once (``/dev/shm/<name>`` + mmap, never a ``SharedMemory``: see ``ShmSender``) and
    keeps the mapping while the sender reuses the segment."""

    def __init__(self):
        self._maps: dict[str, tuple[np.ndarray, torch.Tensor]] = {}    # name -> (header flags, bucket area)

    def _map(self, name: str) -> tuple[np.ndarray, torch.Tensor]:
        if "/" in name:
            raise ValueError(f"weight transport 'shm': bad segment name {name!r}")
        try:
            with open(os.path.join(SHM_DIR, name), "r+b") as f:
                mm = mmap.mmap(f.fileno(), 0)
        except FileNotFoundError:
            raise RuntimeError(f"weight transport 'shm': segment {name} is gone: the sender closed or exited "
                               f"before this receiver mapped it") from None
        if len(mm) < HEADER:
            raise RuntimeError(f"weight transport 'shm': segment {name} holds {len(mm)} bytes, less than a header")
        # numpy holds a buffer export on the mmap, so the mapping lives as long as any view of it
        # (torch.frombuffer would not keep it mapped)
        raw = np.frombuffer(mm, dtype=np.uint8)
        return raw[:HEADER].view(np.int64), torch.from_numpy(raw[HEADER:])

    def receive(self, message: dict) -> Iterator[tuple[str, torch.Tensor]]:
        live = {b["segment"] for b in message["buckets"]}
        for name in [n for n in self._maps if n not in live]:
            del self._maps[name]          # the sender replaced it; unmapped once its views are gone
        # every segment mapped now, before any wait: a sender that dies unlinks them, mapped ones stay readable
        maps = []
        for b in message["buckets"]:
            m = self._maps.get(b["segment"])
            if m is None:
                m = self._maps[b["segment"]] = self._map(b["segment"])
            if m[1].numel() < b["nbytes"]:
                raise RuntimeError(f"weight transport 'shm': segment {b['segment']} holds {m[1].numel()} bytes, "
                                   f"the layout needs {b['nbytes']}")
            maps.append(m)
        return self._yield(message, maps)

    def _yield(self, message: dict, maps: list) -> Iterator[tuple[str, torch.Tensor]]:
        # the sender's pid tells "gone" only in our pid namespace
        pid = message["pid"] if message.get("pid_ns") is not None and message["pid_ns"] == _pid_namespace() else None
        n = len(maps)
        for i, (b, (flags, buf)) in enumerate(zip(message["buckets"], maps)):
            _wait_ready(flags, message["generation"], f"bucket {i + 1} of {n} ({b['segment']})",
                        message["timeout_s"], pid)
            yield from _views(b, buf)

    def close(self) -> None:
        self._maps.clear()


def _wait_ready(flags: np.ndarray, generation: int, what: str, timeout_s: float, pid: int | None) -> None:
    """Returns once ``flags`` say the sender has written this generation; raises when it failed, moved on
    to a later sync, died (``pid`` gone) or wrote nothing for ``timeout_s``."""
    start = time.monotonic()
    delay, check_pid = 20e-6, start + 0.05
    while True:
        ready, failed = int(flags[_READY]), int(flags[_FAILED])
        if ready == generation and failed != generation:
            _order()                                  # the flag before the bucket's bytes
            return
        if failed == generation:
            raise RuntimeError(f"weight transport 'shm': the sender failed to write {what} of sync {generation} "
                               f"(its finish() raises why)")
        if ready > generation or failed > generation:
            raise RuntimeError(f"weight transport 'shm': {what} already holds sync {max(ready, failed)}, not "
                               f"{generation}: the sender sent again before this receiver was done")
        now = time.monotonic()
        if pid is not None and now >= check_pid:
            if _gone(pid):
                raise TimeoutError(f"weight transport 'shm': the sender (pid {pid}) exited mid-sync, {what} of "
                                   f"sync {generation} was never written")
            check_pid = now + 0.05
        if now - start > timeout_s:
            raise TimeoutError(f"weight transport 'shm': {what} of sync {generation} not ready after "
                               f"{timeout_s:g} s: the sender (pid {pid or '?'}) stalled or died mid-sync")
        time.sleep(delay)
        delay = min(delay * 2, 2e-4)


class _CudaIpcReceiver:
    def __init__(self):
        _require_cuda("cuda_ipc")

    def receive(self, message: dict) -> Iterator[tuple[str, torch.Tensor]]:
        device = torch.cuda.current_device()
        out = []
        for b in message["buckets"]:
            fn, args = b["ipc"]
            if getattr(fn, "__name__", "") == "rebuild_cuda_tensor":
                # the sender's device index: the same physical GPU (the method's premise), which this
                # process may number differently (CUDA_VISIBLE_DEVICES)
                args = (*args[:6], device, *args[7:])
            out += _views(b, fn(*args))
        return iter(out)

    def close(self) -> None:
        pass


class _CollectiveReceiver:
    """Rank ``message["rank"]`` (1 by default): joins the sender's group on the first message (and again if the
    sender's address or the group changes)."""

    def __init__(self):
        self._pg = self._store = self._key = None

    def receive(self, message: dict) -> Iterator[tuple[str, torch.Tensor]]:
        import torch.distributed as dist
        backend = message["backend"]
        if backend == "nccl":
            _require_cuda("collective (nccl)")
        rank, world = message.get("rank", 1), message.get("world", 2)
        key = (backend, message["host"], message["port"], rank, world, message.get("group"))
        if self._pg is None or self._key != key:
            _shut(self._pg)
            self._pg = None
            self._store = dist.TCPStore(message["host"], message["port"], world, False,
                                        timeout=datetime.timedelta(seconds=message["timeout_s"]))
            self._pg = _new_group(backend, self._store, rank, world, message["host"], message["timeout_s"])
            self._key = key
        device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
        return self._pull(message["buckets"], device)

    def _pull(self, buckets: list[dict], device: torch.device) -> Iterator[tuple[str, torch.Tensor]]:
        # A fresh tensor per bucket: the loader may keep the views of earlier buckets (list(...)).
        # The sender broadcasts every bucket: consume the whole iterator.
        for b in buckets:
            buf = torch.empty(b["nbytes"], dtype=torch.uint8, device=device)
            if b["nbytes"]:
                _broadcast(self._pg, buf)
            yield from _views(b, buf)

    def close(self) -> None:
        _shut(self._pg)
        self._pg = self._store = self._key = None


RECEIVERS = {"file": _FileReceiver, "shm": _ShmReceiver, "cuda_ipc": _CudaIpcReceiver,
             "collective": _CollectiveReceiver}


class Receiver:
    """The engine's end, one per process: ``receive(message)`` picks the method from the message and keeps
    that method's state (shm mappings, the process group) between syncs."""

    def __init__(self):
        self._ends: dict[str, object] = {}

    def receive(self, message: dict) -> Iterator[tuple[str, torch.Tensor]]:
        """``(name, tensor)`` in the sender's order, valid until the next sync; consume it all."""
        method = message.get("method") if isinstance(message, dict) else None
        if method not in RECEIVERS:
            raise _unknown(method)
        end = self._ends.get(method)
        if end is None:
            end = self._ends[method] = RECEIVERS[method]()
        return end.receive(message)

    def close(self) -> None:
        for end in self._ends.values():
            end.close()
        self._ends.clear()
