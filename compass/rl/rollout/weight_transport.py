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
  segment's name and layout cross the pipe; the receiver maps the segment and hands zero-copy views to the
  loader. Segments are kept and rewritten in place while the layout is unchanged (the same model syncs
  every step), unlinked by the sender's ``close`` (or by its resource tracker if the sender dies).
- ``cuda_ipc``: one GPU shared by trainer and engine. Each bucket is packed into one CUDA tensor whose IPC
  handle (``torch.multiprocessing.reductions.reduce_tensor``) crosses the pipe; all buckets stay allocated
  on the sender until ``finish``.
- ``collective``: separate GPUs (NCCL), or separate processes without a shared ``/dev/shm`` (gloo). The two
  ends form their own 2-rank process group from a ``TCPStore`` the sender hosts (never the default group,
  which vLLM owns in the worker); each bucket is broadcast from rank 0 as one flat uint8 tensor.

Both ends, as the ``vllm`` client and worker use them::

    # sender (trainer side)                        # receiver (worker side), one per process
    sender = make_sender("shm", dtype="bfloat16")   receiver = Receiver()
    message = sender.send(state_dict.items())      weights = list(receiver.receive(message))
    <pipe round trip: message -> worker ------->   <load weights>; del weights
     ... the worker's reply>                       ...
    sender.finish()                                receiver.close()      # at shutdown
    ...
    sender.close()                                 # at shutdown

``send`` takes an ordered iterable of ``(name, tensor)``: any shape, any device, contiguous or not.
Floating-point tensors are cast to ``dtype`` (``"float32"``, ``"bfloat16"``, ``"float16"``; ``None`` keeps
each tensor's own); other dtypes (int, bool) travel as they are. ``receive`` yields ``(name, tensor)`` in
the same order, with the cast dtype and the original shape, contiguous: CPU tensors for ``file``/``shm``/
gloo, CUDA for ``cuda_ipc``/NCCL. Use them before the next sync (``shm``: they view memory the sender's
next ``send`` rewrites): the loader copies them (vLLM's ``reload_weights`` does).
"""
from __future__ import annotations

import datetime
import mmap
import os
import secrets
import shutil
import tempfile
import threading
import weakref
from multiprocessing import shared_memory
from typing import Iterable, Iterator

import numpy as np
import torch

DEFAULT_BUCKET_BYTES = 512 << 20
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


def _entries(meta: dict):
    for name, dt, shape, off in zip(meta["names"], meta["dtypes"], meta["shapes"], meta["offsets"]):
        dtype = _dtype(dt)
        numel = 1
        for s in shape:
            numel *= s
        yield name, dtype, shape, off, numel * dtype.itemsize


def _pack(meta: dict, named: Iterator[tuple[str, torch.Tensor]], buf: torch.Tensor) -> None:
    """Copy the bucket's tensors (the next ones of ``named``) into the flat uint8 ``buf``, casting on the way."""
    for name, dtype, shape, off, n in _entries(meta):
        src_name, src = next(named)
        if src_name != name:
            raise RuntimeError(f"weight transport: tensor {src_name!r} where the plan has {name!r}")
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


def _unlink_all(segments: list, bufs: list | None = None) -> None:
    if bufs is not None:
        bufs.clear()                      # our tensors export seg.buf: drop them before closing the mappings
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


class ShmSender(Sender):
    """Same host, CPU: one shared-memory segment per bucket, rewritten in place while its size is unchanged.

    The sender creates segments with ``multiprocessing.shared_memory.SharedMemory``, so its resource tracker
    unlinks them if the trainer dies; the receiver maps ``/dev/shm/<name>`` with plain ``mmap`` instead of
    attaching a ``SharedMemory``: in Python < 3.13 attaching registers the segment with the *receiver's*
    tracker too, which unlinks it when the receiver exits -- under the sender, who reuses it.
    Message: ``{"method": "shm", "buckets": [plan bucket + {"segment": name}, ...]}``."""
    method = "shm"

    def __init__(self, dtype=None, bucket_bytes: int = DEFAULT_BUCKET_BYTES):
        super().__init__(dtype, bucket_bytes)
        if not os.path.isdir(SHM_DIR):
            raise RuntimeError(f"weight transport 'shm' needs {SHM_DIR} (Linux); use 'collective' or 'file'")
        self._segments: list[shared_memory.SharedMemory] = []
        self._bufs: list[torch.Tensor] = []
        self._token = f"{SHM_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        self._made = 0
        # unlinks the segments at interpreter exit when close() was never called
        self._finalizer = weakref.finalize(self, _unlink_all, self._segments, self._bufs)

    @property
    def segment_names(self) -> list[str]:
        return [s.name for s in self._segments]

    def _segment(self, i: int, nbytes: int) -> torch.Tensor:
        size = max(nbytes, 1)             # a segment cannot be empty
        if i < len(self._segments) and self._segments[i].size == size:
            return self._bufs[i]          # same layout as last sync: rewrite in place, pages already mapped
        seg = shared_memory.SharedMemory(name=f"{self._token}-{self._made}", create=True, size=size)
        self._made += 1
        buf = torch.from_numpy(np.frombuffer(seg.buf, dtype=np.uint8, count=size))
        if i < len(self._segments):
            old, self._segments[i], self._bufs[i] = self._segments[i], seg, buf
            _unlink_all([old])
        else:
            self._segments.append(seg)
            self._bufs.append(buf)
        return buf

    def send(self, named_tensors: Named) -> dict:
        named = list(named_tensors)
        plan = plan_buckets(named, self.dtype, self.bucket_bytes)
        it = iter(named)
        for i, meta in enumerate(plan):
            _pack(meta, it, self._segment(i, meta["nbytes"]))
            meta["segment"] = self._segments[i].name
        extra = self._segments[len(plan):]      # the model shrank: fewer buckets than last sync
        del self._segments[len(plan):], self._bufs[len(plan):]
        _unlink_all(extra)
        return {"method": self.method, "buckets": plan}

    def close(self) -> None:
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


def _new_group(backend: str, store, rank: int, host: str, timeout_s: float):
    """A 2-rank process group of its own over ``store`` (not torch.distributed's default group)."""
    import torch.distributed as dist
    store = dist.PrefixStore("compass-weights", store)
    timeout = datetime.timedelta(seconds=timeout_s)
    if backend == "gloo":
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = timeout
        local = host in ("127.0.0.1", "localhost", "::1")
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=host if local else "")]
        return dist.ProcessGroupGloo(store, rank, 2, opts)
    if backend == "nccl":
        if not dist.is_nccl_available():
            raise RuntimeError("weight transport 'collective': this torch has no NCCL; use backend='gloo'")
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, 2, opts)
    raise ValueError(f"weight transport 'collective': backend must be 'nccl' or 'gloo', got {backend!r}")


def _broadcast(pg, buf: torch.Tensor) -> None:
    import torch.distributed as dist
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    pg.broadcast([buf], opts).wait()


class CollectiveSender(Sender):
    """Rank 0 of a 2-rank group: hosts the ``TCPStore`` at ``host``:``port`` (0: a free port) and broadcasts
    each bucket, packed into a reused staging tensor, from a background thread -- the receiver joins while
    the message is in the pipe, so ``send`` must return before the data moves. ``backend``: ``"nccl"``
    (CUDA tensors; the default where CUDA is available) or ``"gloo"`` (CPU).
    Message: ``{"method": "collective", "backend", "host", "port", "timeout_s", "buckets": plan}``."""
    method = "collective"

    def __init__(self, dtype=None, bucket_bytes: int = DEFAULT_BUCKET_BYTES, backend: str | None = None,
                 host: str = "127.0.0.1", port: int = 0, timeout_s: float = 300.0):
        import torch.distributed as dist
        super().__init__(dtype, bucket_bytes)
        self.backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if self.backend not in ("nccl", "gloo"):
            raise ValueError(f"weight transport 'collective': backend must be 'nccl' or 'gloo', got {backend!r}")
        if self.backend == "nccl":
            _require_cuda("collective (nccl)")
        self.device = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else None
        self.host, self.timeout_s = host, float(timeout_s)
        self._store = dist.TCPStore(host, port, 2, True, timeout=datetime.timedelta(seconds=timeout_s),
                                    wait_for_workers=False)
        self.port = self._store.port
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
                "timeout_s": self.timeout_s, "buckets": plan}

    def _push(self, plan: list[dict], named: list) -> None:
        try:
            if self.device is not None:
                torch.cuda.set_device(self.device)
            if self._pg is None:          # blocks until the receiver joins (on its first message)
                self._pg = _new_group(self.backend, self._store, 0, self.host, self.timeout_s)
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

    def close(self) -> None:
        try:
            self.finish(timeout=self.timeout_s)
        except Exception:                         # noqa: BLE001 - the sync's own finish() reported it
            pass
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
        self._maps: dict[str, torch.Tensor] = {}

    def _map(self, name: str) -> torch.Tensor:
        if "/" in name:
            raise ValueError(f"weight transport 'shm': bad segment name {name!r}")
        with open(os.path.join(SHM_DIR, name), "r+b") as f:
            mm = mmap.mmap(f.fileno(), 0)
        # numpy holds a buffer export on the mmap, so the mapping lives as long as any view of it
        # (torch.frombuffer would not keep it mapped)
        return torch.from_numpy(np.frombuffer(mm, dtype=np.uint8))

    def receive(self, message: dict) -> Iterator[tuple[str, torch.Tensor]]:
        live = {b["segment"] for b in message["buckets"]}
        for name in [n for n in self._maps if n not in live]:
            del self._maps[name]          # the sender replaced it; unmapped once its views are gone
        out = []
        for b in message["buckets"]:
            buf = self._maps.get(b["segment"])
            if buf is None:
                buf = self._maps[b["segment"]] = self._map(b["segment"])
            if buf.numel() < b["nbytes"]:
                raise RuntimeError(f"weight transport 'shm': segment {b['segment']} holds {buf.numel()} bytes, "
                                   f"the layout needs {b['nbytes']}")
            out += _views(b, buf)
        return iter(out)

    def close(self) -> None:
        self._maps.clear()


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
    """Rank 1: joins the sender's group on the first message (and again if the sender's address changes)."""

    def __init__(self):
        self._pg = self._store = self._key = None

    def receive(self, message: dict) -> Iterator[tuple[str, torch.Tensor]]:
        import torch.distributed as dist
        backend = message["backend"]
        if backend == "nccl":
            _require_cuda("collective (nccl)")
        key = (backend, message["host"], message["port"])
        if self._pg is None or self._key != key:
            self._pg = None
            self._store = dist.TCPStore(message["host"], message["port"], 2, False,
                                        timeout=datetime.timedelta(seconds=message["timeout_s"]))
            self._pg = _new_group(backend, self._store, 1, message["host"], message["timeout_s"])
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
