"""Weight sync trainer -> rollout engine: the safetensors file the ``vllm`` backend writes today vs the
in-memory paths of ``compass/rl/rollout/weight_transport.py``.

A Qwen3 of ~110M parameters (hidden 768, 12 layers, 12 heads of 64, 4 KV heads, MLP 1536, vocabulary
32,000, untied head) is built with transformers, random init, fp32: the trainer's weights. ONE receiver
process (this Python) holds a model-shaped set of tensors per path, zero-filled, and for each sync consumes
the receiver's iterator lazily, copying each tensor into its set as it arrives, what the vLLM worker's
``reload_weights`` does with the iterator. Timed per sync, on the sender, from ``send`` to ``finish`` after
the receiver's reply (the whole round trip):

- ``file`` fp32: a safetensors file written to a temporary directory on disk, read back by the receiver
  (the worker today);
- ``shm`` bf16 and fp32: buckets copied (and cast) into shared memory by a background thread of the sender,
  each bucket's views handed over as soon as it is written (the receiver copies bucket i while the sender
  writes bucket i+1); buckets of ``SHM_BUCKET_BYTES``;
- ``collective`` bf16: buckets broadcast over a 2-rank gloo group (NCCL on GPUs; gloo here, on a CPU),
  buckets of ``DEFAULT_BUCKET_BYTES``.

Each path syncs once untimed-but-reported (``first``: creates segments, joins the group, faults pages in),
then ``--repeats`` timed syncs in blocks, paths in order then in reverse, each block after one untimed sync;
the median is reported. Each process runs ``--threads`` torch threads (1 by default), the receiver with
``OMP_WAIT_POLICY=PASSIVE`` unless set (see ``Remote``). Afterwards every receiver set is hashed and
compared with the sender's weights cast to the path's dtype (bitwise). ``--quick`` runs a tiny model with
small buckets, for the test.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import torch

from compass.rl.rollout import weight_transport as wt

SIZES = {
    "full": dict(vocab=32000, hidden=768, layers=12, heads=12, kv=4, head_dim=64, inter=1536),
    "quick": dict(vocab=512, hidden=64, layers=2, heads=2, kv=1, head_dim=32, inter=128),
}
# (label, method, rollout dtype): the file baseline first, as the worker does it today
PATHS = [("file", "file", "float32"), ("shm-bf16", "shm", "bfloat16"), ("shm-fp32", "shm", "float32"),
         ("collective-bf16", "collective", "bfloat16")]


def build_model(spec: dict, seed: int = 0):
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.for_model("qwen3", vocab_size=spec["vocab"], hidden_size=spec["hidden"],
                               num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"],
                               num_key_value_heads=spec["kv"], head_dim=spec["head_dim"],
                               intermediate_size=spec["inter"], max_position_embeddings=2048,
                               tie_word_embeddings=False)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)


def _cast(t: torch.Tensor, dtype: str) -> torch.Tensor:
    return t.to(getattr(torch, dtype)) if t.is_floating_point() else t


def digest(named, dtype: str | None = None) -> str:
    """Names, dtypes, shapes and bytes of ``named`` (cast to ``dtype`` first when given)."""
    h = hashlib.blake2b(digest_size=16)
    for name, t in named:
        t = _cast(t.detach(), dtype) if dtype else t.detach()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)};".encode())
        h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


# -- the pipe (the vllm worker's framing: 8-byte length, then a pickle) -----------------------------------
def _write(f, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def _read(f):
    head = f.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack("<Q", head)
    return pickle.loads(f.read(size))


def serve() -> int:
    """The receiver process: ``alloc`` a zeroed set of tensors per label, ``sync`` a message into one,
    ``digest`` one; replies ``{"ok": ..., "result"|"error": ...}``."""
    import traceback
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    rx = wt.Receiver()
    sets: dict[str, dict[str, torch.Tensor]] = {}
    while (msg := _read(inp)) is not None and msg["cmd"] != "close":
        try:
            if msg["cmd"] == "alloc":
                dt = getattr(torch, msg["dtype"])
                sets[msg["label"]] = {n: torch.zeros(s, dtype=dt) for n, s in msg["shapes"]}
                result = None
            elif msg["cmd"] == "sync":
                target = sets[msg["label"]]
                n = 0
                for name, t in rx.receive(msg["message"]):
                    target[name].copy_(t)
                    n += 1
                result = n
            elif msg["cmd"] == "digest":
                result = digest(sets[msg["label"]].items())
            else:
                raise ValueError(f"unknown command {msg['cmd']!r}")
            _write(out, {"ok": True, "result": result})
        except BaseException:                                   # noqa: BLE001 - reported to the sender
            _write(out, {"ok": False, "error": traceback.format_exc()})
    rx.close()
    return 0


class Remote:
    def __init__(self, threads: int):
        # The receiver waits on the pipe while the sender works and the other way round: idle OpenMP threads
        # must sleep, not spin (libgomp's default), or they take one of the two cores from the side at work.
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(threads)}
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self.proc = subprocess.Popen([sys.executable, "-c", "import sys; from compass.bench.weight_sync import serve;"
                                      " sys.exit(serve())"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    def __call__(self, cmd: str, **args):
        _write(self.proc.stdin, {"cmd": cmd, **args})
        reply = _read(self.proc.stdout)
        if reply is None:
            raise RuntimeError(f"weight-sync receiver died (exit code {self.proc.wait()})")
        if not reply["ok"]:
            raise RuntimeError(f"weight-sync receiver failed {cmd!r}:\n{reply['error']}")
        return reply["result"]

    def close(self) -> None:
        try:
            _write(self.proc.stdin, {"cmd": "close"})
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench weight-sync", description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10, help="timed syncs per path (the median is reported)")
    ap.add_argument("--bucket-mb", type=float, default=None,
                    help=f"bucket size of the in-memory paths, MiB (default: each method's own, shm "
                         f"{wt.SHM_BUCKET_BYTES / 2**20:g}, collective {wt.DEFAULT_BUCKET_BYTES / 2**20:g})")
    ap.add_argument("--dir", default=None, help="where the file path writes (default: a temporary directory)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of the sender and of the receiver (default 1: the copies are memory-bound, "
                         "and two threads per process on two shared cores stall on OpenMP barriers when a "
                         "neighbour is busy)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a tiny model, small buckets: a seconds-long smoke run")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = min(args.repeats, 2)
    size = "quick" if args.quick else "full"
    bucket_bytes = 4096 if args.quick else None if args.bucket_mb is None else int(args.bucket_mb * 2**20)

    threads_before = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        return _run(args, size, bucket_bytes)
    finally:
        torch.set_num_threads(threads_before)         # run_bench may be called in-process (tests)


def _run(args, size: str, bucket_bytes: int | None) -> int:
    t0 = time.perf_counter()
    model = build_model(SIZES[size], args.seed)
    build_s = time.perf_counter() - t0
    named = [(n, t.detach()) for n, t in model.state_dict().items()]
    n_params = sum(t.numel() for _, t in named)
    shapes = [(n, tuple(t.shape)) for n, t in named]
    workdir = tempfile.mkdtemp(prefix="compass-weight-sync-", dir=args.dir)

    remote = Remote(args.threads)
    senders: dict[str, wt.Sender] = {}
    try:
        for label, method, dtype in PATHS:
            remote("alloc", label=label, dtype=dtype, shapes=shapes)
            opts = {"directory": workdir} if method == "file" else {} if bucket_bytes is None else \
                {"bucket_bytes": bucket_bytes}
            if method == "collective":
                opts["backend"] = "gloo"
            senders[label] = wt.make_sender(method, dtype=dtype, **opts)

        fills: dict[str, list[float]] = {label: [] for label, method, _ in PATHS if method == "shm"}

        def sync(label: str) -> float:
            sender = senders[label]
            t = time.perf_counter()
            message = sender.send(named)
            remote("sync", label=label, message=message)
            sender.finish()
            took = time.perf_counter() - t
            if label in fills:
                fills[label].append(sender.fill_s)      # the sender's background fill, within that round trip
            return took

        first = {label: sync(label) for label, _, _ in PATHS}
        times: dict[str, list[float]] = {label: [] for label, _, _ in PATHS}
        # Each path in a block of consecutive syncs, the blocks in order then in reverse (ABBA: a drift of the
        # machine's load hits every path alike). Not alternated sync by sync: the file path leaves the kernel
        # work of freeing its page cache behind, which would be billed to whichever path runs next.
        labels = [label for label, _, _ in PATHS]
        for order, k in ((labels, (args.repeats + 1) // 2), (labels[::-1], args.repeats // 2)):
            for label in order:
                sync(label)                             # untimed: absorbs the previous block's aftermath
                times[label] += [sync(label) for _ in range(k)]
        # new values, one more sync per path, then the check: a bucket left stale by any sync cannot pass
        with torch.no_grad():
            for _, t in named:
                if t.is_floating_point():
                    t.add_(0.5)
        for label in labels:
            sync(label)
        identical = {label: remote("digest", label=label) == digest(named, dtype) for label, _, dtype in PATHS}
    finally:
        for sender in senders.values():
            sender.close()
        remote.close()
        shutil.rmtree(workdir, ignore_errors=True)

    med = {label: statistics.median(ts) for label, ts in times.items()}
    gb = {label: sum(t.numel() * getattr(torch, dtype).itemsize if t.is_floating_point() else t.nbytes
                     for _, t in named) / 1e9 for label, _, dtype in PATHS}
    base = med["file"]
    fill = {label: statistics.median(fs[1:] or fs) for label, fs in fills.items()}   # the first one makes pages
    buckets = {label: senders[label].bucket_bytes / 2**20 for label, method, _ in PATHS if method != "file"}
    policy = os.environ.get("OMP_WAIT_POLICY")
    print(f"# Weight sync trainer -> receiver process: Qwen3 {n_params / 1e6:.1f}M parameters ({len(named)} "
          f"tensors, fp32 on the trainer; built in {build_s:.1f} s), buckets (MiB): "
          f"{', '.join(f'{label} {mb:g}' for label, mb in buckets.items())}, "
          f"median of {args.repeats} syncs per path, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}, {args.threads} torch thread(s) per process, OMP_WAIT_POLICY sender "
          f"{policy or 'unset'} / receiver {policy or 'PASSIVE'}\n")
    print("| path | dtype | GB moved | first sync s | median s | GB/s | speedup vs file | identical |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for label, _, dtype in PATHS:
        print(f"| {label} | {dtype} | {gb[label]:.3f} | {first[label]:.3f} | {med[label]:.3f} | "
              f"{gb[label] / med[label]:.2f} | {base / med[label]:.2f} | {identical[label]} |")
    print("\nper-sync seconds: " + "; ".join(f"{label} " + ", ".join(f"{t:.3f}" for t in ts)
                                           for label, ts in times.items()))
    print("shm sender's fill (background thread, overlapping the receiver's copies), median s: "
          + "; ".join(f"{label} {f:.3f} of {med[label]:.3f}" for label, f in fill.items()))
    print("file: fp32 safetensors on disk + load + copy (the vllm worker's fallback); shm: shared memory, "
          "buckets filled in the background, zero-copy views + copy as each bucket is ready; collective: gloo "
          "broadcast. Times are whole round trips, the receiver's copy included.\n")
    print(json.dumps({
        "bench": "weight-sync", "speedup": round(base / med["shm-bf16"], 2),
        "speedup_shm_fp32": round(base / med["shm-fp32"], 2),
        "speedup_collective_bf16": round(base / med["collective-bf16"], 2),
        "identical": all(identical.values()), "identical_file": identical["file"],
        "identical_shm_bf16": identical["shm-bf16"], "identical_shm_fp32": identical["shm-fp32"],
        "identical_collective_bf16": identical["collective-bf16"],
        "file_fp32_s": round(base, 4), "shm_bf16_s": round(med["shm-bf16"], 4),
        "shm_fp32_s": round(med["shm-fp32"], 4), "collective_bf16_s": round(med["collective-bf16"], 4),
        "params": n_params, "gb_fp32": round(gb["file"], 4), "gb_bf16": round(gb["shm-bf16"], 4),
        "shm_bf16_fill_s": round(fill["shm-bf16"], 4),
        "repeats": args.repeats, "threads": args.threads, "bucket_mb": round(buckets["shm-bf16"], 4),
        "bucket_mb_collective": round(buckets["collective-bf16"], 4), "load_average": round(os.getloadavg()[0], 2),
        "quick": args.quick}))
    return 0 if all(identical.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
