"""Weight transport trainer -> rollout engine (``compass/rl/rollout/weight_transport.py``).

The receiving end runs in another process, as the vLLM worker does: the second environment's Python
(``.venv-vllm``) where it exists, else this one, importing the module by its directory on ``sys.path``
without the compass package. Every path that runs on a CPU (``file``, ``shm``, ``collective`` over gloo)
must deliver every tensor bitwise equal to the sender's after the cast to the rollout dtype.
"""
from __future__ import annotations

import ast
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from compass.rl.rollout import weight_transport as wt

pytestmark = pytest.mark.timeout(120)

MODULE_DIR = Path(wt.__file__).resolve().parent
REPO = Path(__file__).resolve().parents[3]
VLLM_PY = REPO / ".venv-vllm" / "bin" / "python"
RECEIVER_PY = str(VLLM_PY) if VLLM_PY.is_file() else sys.executable

# The worker's side: imports the module standalone, receives, replies with copies of what it got.
RECEIVER = r"""
import pickle, struct, sys, traceback
sys.path.insert(0, sys.argv[1])
import weight_transport as wt
assert not [m for m in sys.modules if m.split(".")[0] == "compass"], "the standalone module imported compass"
inp, out = sys.stdin.buffer, sys.stdout.buffer
rx = wt.Receiver()
while True:
    head = inp.read(8)
    if len(head) < 8:
        break
    msg = pickle.loads(inp.read(struct.unpack("<Q", head)[0]))
    try:
        reply = [(name, t.clone()) for name, t in rx.receive(msg)]
    except BaseException:
        reply = {"error": traceback.format_exc()}
    data = pickle.dumps(reply)
    out.write(struct.pack("<Q", len(data)) + data)
    out.flush()
rx.close()
"""


class RemoteReceiver:
    def __init__(self):
        self.proc = subprocess.Popen([RECEIVER_PY, "-c", RECEIVER, str(MODULE_DIR)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env={k: v for k, v in os.environ.items()
                                                                  if k not in ("PYTHONPATH", "VIRTUAL_ENV")})

    def receive(self, message) -> list[tuple[str, torch.Tensor]]:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.write(struct.pack("<Q", len(data)) + data)
        self.proc.stdin.flush()
        head = self.proc.stdout.read(8)
        assert len(head) == 8, f"receiver died (exit code {self.proc.poll()})"
        reply = pickle.loads(self.proc.stdout.read(struct.unpack("<Q", head)[0]))
        assert not isinstance(reply, dict), reply["error"]
        return reply

    def close(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def remote():
    r = RemoteReceiver()
    yield r
    r.close()


def weights(seed: int = 0, rows: int = 300) -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        ("embed", torch.randn(rows, 16, generator=g)),                     # 19,200 B fp32: over a 4 KiB bucket
        ("special", torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1e-40, 3e38, 70000.0])),
        ("proj_t", torch.randn(24, 10, generator=g).t()),                  # not contiguous
        ("bias", torch.randn(40, generator=g) + seed),
        ("scale", torch.tensor(0.5 + seed)),                               # 0-d
        ("empty", torch.empty(0, 8)),
        ("steps", torch.arange(7) * (seed + 1)),                           # int64: never cast
        ("mask", torch.tensor([True, False, True])),
        ("bf16_src", torch.randn(5, 3, generator=g).to(torch.bfloat16)),
    ]


def expected(named, dtype: str | None):
    dt = getattr(torch, dtype) if dtype else None
    return [(n, t.to(dt) if dt is not None and t.is_floating_point() else t) for n, t in named]


def assert_bitwise(got, want) -> None:
    assert [n for n, _ in got] == [n for n, _ in want]
    for (name, a), (_, b) in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, b.dtype, a.shape, b.shape)
        assert torch.equal(a.reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)), name


def our_segments(sender) -> set[str]:
    return {f for f in os.listdir(wt.SHM_DIR) if f.startswith(sender._token)}


# -- buckets -----------------------------------------------------------------------------------------------
def test_buckets_split_at_the_limit_after_the_cast_and_an_oversized_tensor_gets_its_own():
    f = torch.zeros
    named = [("a", f(64)), ("b", f(64)), ("c", f(64)), ("d", f(64)),       # 4 x 256 B fp32: exactly 1 KiB
             ("e", f(64)), ("big", f(300)), ("g", f(3)), ("h", f(3)), ("ids", torch.arange(5))]
    plan = wt.plan_buckets(named, "float32", bucket_bytes=1024)
    assert [b["names"] for b in plan] == [["a", "b", "c", "d"], ["e"], ["big"], ["g", "h", "ids"]]
    assert plan[0]["offsets"] == [0, 256, 512, 768] and plan[0]["nbytes"] == 1024
    assert plan[2]["nbytes"] == 1200                                        # larger than a bucket: alone
    assert plan[3]["offsets"] == [0, 64, 128] and plan[3]["nbytes"] == 128 + 40   # aligned starts
    assert plan[3]["dtypes"] == ["float32", "float32", "int64"] and plan[3]["shapes"] == [(3,), (3,), (5,)]
    # in bf16 every float is half the size: 8 x 128 B fit where 4 x 256 B did
    plan16 = wt.plan_buckets(named, "bfloat16", bucket_bytes=1024)
    assert [b["names"] for b in plan16] == [["a", "b", "c", "d", "e"], ["big", "g", "h", "ids"]]
    assert plan16[0]["dtypes"] == ["bfloat16"] * 5 and plan16[1]["dtypes"][-1] == "int64"
    assert pickle.loads(pickle.dumps(plan16)) == plan16


def test_the_module_imports_only_the_standard_library_numpy_and_torch():
    tree = ast.parse(Path(wt.__file__).read_text())
    top = set()
    for node in tree.body:                                                  # module level only
        if isinstance(node, ast.Import):
            top |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            top.add(node.module.split(".")[0])
    assert top - set(sys.stdlib_module_names) <= {"numpy", "torch"}, top


# -- round trips into another process ----------------------------------------------------------------------
@pytest.mark.parametrize("method,dtype", [("shm", "bfloat16"), ("shm", "float32"), ("file", "float32"),
                                          ("file", "bfloat16"), ("collective", "bfloat16"),
                                          ("collective", None)])
def test_round_trip_is_bitwise_identical_after_the_cast(remote, method, dtype):
    options = {"bucket_bytes": 4096} if method != "file" else {}
    with wt.make_sender(method, dtype=dtype, **options) as sender:
        for seed in (0, 1):                                 # a second sync: reused segments / process group
            named = weights(seed)
            message = sender.send(named)
            got = remote.receive(message)
            sender.finish()
            assert_bitwise(got, expected(named, dtype))
        if method != "file":
            assert len(message["buckets"]) >= 2 and message["buckets"][0]["names"] == ["embed"]


@pytest.mark.parametrize("fill_threads", [1, 3])
def test_shm_fills_big_tensors_in_slices_with_any_number_of_threads(remote, monkeypatch, fill_threads):
    monkeypatch.setattr(wt, "FILL_PIECE_BYTES", 1000)     # embed (9,600 B in bf16) in 10 slices, 1000 B apart
    named = weights(0) + [("odd", torch.randn(333, 3)), ("big_t", torch.randn(64, 50).t())]
    with wt.ShmSender(dtype="bfloat16", bucket_bytes=4096, fill_threads=fill_threads) as sender:
        plan = wt.plan_buckets(named, "bfloat16", 4096)
        pieces = wt._pieces(plan, named)
        assert [p[5:] for p in pieces if p[4] is named[0][1]] == [(i, min(i + 500, 4800)) for i in range(0, 4800, 500)]
        assert [p[5] for p in pieces if p[4] is named[-1][1]] == [None]     # not contiguous: whole
        for seed in (0, 1):
            named = weights(seed) + [("odd", torch.randn(333, 3)), ("big_t", torch.randn(64, 50).t()),
                                     ("param", torch.nn.Parameter(torch.randn(700)))]   # requires grad
            want = expected([(n, t.detach()) for n, t in named], "bfloat16")
            assert_bitwise(remote.receive(sender.send(named)), want)
            sender.finish()


def test_shm_rewrites_its_segments_in_place_and_replaces_one_whose_size_changed(remote):
    with wt.ShmSender(dtype="bfloat16", bucket_bytes=4096) as sender:
        m1 = sender.send(weights(0))
        remote.receive(m1)
        sender.finish()
        names1 = [b["segment"] for b in m1["buckets"]]
        m2 = sender.send(weights(1))
        assert_bitwise(remote.receive(m2), expected(weights(1), "bfloat16"))
        sender.finish()
        assert [b["segment"] for b in m2["buckets"]] == names1 == sender.segment_names
        assert our_segments(sender) == set(names1)
        m3 = sender.send(weights(2, rows=310))              # the first bucket grows: a new segment for it
        assert_bitwise(remote.receive(m3), expected(weights(2, rows=310), "bfloat16"))
        sender.finish()
        names3 = [b["segment"] for b in m3["buckets"]]
        assert names3[0] != names1[0] and names3[1:] == names1[1:]
        assert our_segments(sender) == set(names3)           # the old one is unlinked
    assert our_segments(sender) == set()


def test_shm_segments_outlive_the_receiver_process_and_close_unlinks_them():
    # Python < 3.13: a receiver that attached with SharedMemory would have its resource tracker unlink
    # the segments when it exits; this receiver maps them with mmap, so they stay until the sender's close.
    sender = wt.ShmSender(dtype="float32", bucket_bytes=4096)
    message = sender.send(weights(3))
    first = RemoteReceiver()
    assert_bitwise(first.receive(message), expected(weights(3), "float32"))
    first.close()
    assert our_segments(sender) == {b["segment"] for b in message["buckets"]}
    second = RemoteReceiver()
    assert_bitwise(second.receive(message), expected(weights(3), "float32"))
    second.close()
    sender.close()
    assert our_segments(sender) == set()
    assert not [f for f in os.listdir(wt.SHM_DIR) if f.startswith(f"{wt.SHM_PREFIX}{os.getpid()}-")]


def test_shm_hands_the_loader_views_of_the_shared_memory_not_copies():
    with wt.ShmSender(dtype="bfloat16", bucket_bytes=4096) as sender:
        rx = wt.Receiver()
        got = list(rx.receive(sender.send(weights(0))))
        by_name = dict(got)
        # one bucket, one mapping: its tensors share a storage
        assert by_name["bias"].untyped_storage().data_ptr() == by_name["scale"].untyped_storage().data_ptr()
        sender.finish()
        sender.send(weights(5))                              # rewrites the segments in place
        sender.finish()
        assert_bitwise(got, expected(weights(5), "bfloat16"))   # the old views see the new weights
        del got, by_name
        rx.close()


# -- shm: buckets filled in the background, each handed over once written ---------------------------------
@pytest.fixture
def gate(monkeypatch):
    """Holds every fill thread before a piece of the second bucket or later until ``gate.set()``;
    ``gate.written`` lists the buckets of the pieces written."""
    real, gate = wt._fill_piece, threading.Event()
    gate.written = []

    def gated(buf, piece):
        if piece[0] > 0:
            assert gate.wait(10)
        real(buf, piece)
        gate.written.append(piece[0])
    monkeypatch.setattr(wt, "_fill_piece", gated)
    yield gate
    gate.set()                                   # never leave a fill thread blocked


def test_shm_yields_a_bucket_as_soon_as_it_is_written_while_the_next_is_being_filled(gate):
    named = weights(0)
    with wt.ShmSender(dtype="bfloat16", bucket_bytes=512) as sender:
        message = sender.send(named)
        assert len(message["buckets"]) >= 3 and message["buckets"][0]["names"] == ["embed"]
        it = wt.Receiver().receive(message)
        first = next(it)                                 # bucket 1 is ready; the fill waits before bucket 2
        assert first[0] == "embed" and gate.written == [0] and sender._thread.is_alive()
        assert_bitwise([first], expected(named[:1], "bfloat16"))
        waiter = threading.Timer(0.3, gate.set)
        waiter.start()
        t0 = time.monotonic()
        rest = list(it)                                  # waits for bucket 2, then the rest as they come
        assert time.monotonic() - t0 >= 0.25
        assert_bitwise([first] + rest, expected(named, "bfloat16"))
        sender.finish()
        assert sender.fill_s >= 0.25


def test_shm_refuses_a_send_before_the_previous_finish_and_detects_a_stale_message():
    with wt.ShmSender(dtype="float32", bucket_bytes=4096) as sender:
        old = sender.send(weights(0))
        with pytest.raises(RuntimeError, match=r"send\(\) before the previous sync's finish\(\)"):
            sender.send(weights(1))
        sender.finish()
        sender.send(weights(1))
        sender.finish()
        rx = wt.Receiver()
        with pytest.raises(RuntimeError, match="already holds sync 2, not 1: the sender sent again"):
            list(rx.receive(old))
        rx.close()


def test_shm_receiver_times_out_with_a_clear_error_when_the_sender_stalls(gate):
    with wt.ShmSender(dtype="bfloat16", bucket_bytes=4096, timeout_s=0.3) as sender:
        it = wt.Receiver().receive(sender.send(weights(0)))
        assert next(it)[0] == "embed"
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match=r"bucket 2 of \d+ \(compass-wt-.*\) of sync 1 not ready after "
                                               r"0.3 s: the sender \(pid \d+\) stalled or died mid-sync"):
            next(it)
        assert 0.3 <= time.monotonic() - t0 < 5
        gate.set()
        sender.finish()


def test_shm_receiver_raises_when_the_fill_fails_and_finish_raises_the_cause(monkeypatch):
    real = wt._fill_piece

    def failing(buf, piece):
        if piece[0] == 1:
            raise ValueError("boom")
        real(buf, piece)
    monkeypatch.setattr(wt, "_fill_piece", failing)
    with wt.ShmSender(dtype="bfloat16", bucket_bytes=4096) as sender:
        message = sender.send(weights(0))
        got = []
        with pytest.raises(RuntimeError, match="the sender failed to write bucket 2 of"):
            got += wt.Receiver().receive(message)
        assert [n for n, _ in got] == ["embed"]          # bucket 1 was written and handed over
        with pytest.raises(RuntimeError, match="filling the buckets failed: boom"):
            sender.finish()
        monkeypatch.setattr(wt, "_fill_piece", real)
        assert_bitwise(list(wt.Receiver().receive(sender.send(weights(1)))), expected(weights(1), "bfloat16"))
        sender.finish()


# The sender in a process of its own that fills bucket 1 and then blocks forever: killed mid-sync.
DYING_SENDER = r"""
import pickle, sys, threading
sys.path.insert(0, sys.argv[1])
import torch, weight_transport as wt
real = wt._fill_piece
def stuck(buf, piece):
    if piece[0] > 0:
        threading.Event().wait()
    real(buf, piece)
wt._fill_piece = stuck
sender = wt.ShmSender(dtype="float32", bucket_bytes=4096, timeout_s=float(sys.argv[2]))
message = sender.send([(f"w{i}", torch.full((1000,), float(i))) for i in range(3)])
sys.stdout.write(pickle.dumps(message).hex() + "\n")
sys.stdout.flush()
threading.Event().wait()
"""


@pytest.mark.parametrize("same_pid_namespace", [True, False])
def test_shm_receiver_gives_a_clear_error_when_the_sender_dies_mid_sync(same_pid_namespace):
    proc = subprocess.Popen([sys.executable, "-c", DYING_SENDER, str(MODULE_DIR), "1.0"], stdout=subprocess.PIPE,
                            text=True)
    try:
        message = pickle.loads(bytes.fromhex(proc.stdout.readline()))
    finally:
        if not same_pid_namespace:
            message["pid_ns"] = None           # its pid means nothing here: only the timeout can tell
    rx = wt.Receiver()
    it = rx.receive(message)                   # maps every segment: they outlive the sender's tracker
    name, t = next(it)
    assert name == "w0" and torch.equal(t, torch.zeros(1000))
    proc.kill()
    proc.wait()
    t0 = time.monotonic()
    if same_pid_namespace:                     # seen gone at once, not after the timeout
        with pytest.raises(TimeoutError, match=rf"the sender \(pid {proc.pid}\) exited mid-sync, bucket 2 of 3"):
            next(it)
        assert time.monotonic() - t0 < 0.9
    else:
        with pytest.raises(TimeoutError, match=r"bucket 2 of 3 .* not ready after 1 s: the sender \(pid \?\) "
                                               r"stalled or died mid-sync"):
            next(it)
        assert 1.0 <= time.monotonic() - t0 < 5
    del it, name, t
    rx.close()


# -- errors ------------------------------------------------------------------------------------------------
@pytest.mark.skipif(torch.cuda.is_available(), reason="the error is for hosts without CUDA")
def test_cuda_ipc_without_cuda_is_a_clear_one_line_error():
    for make in (lambda: wt.make_sender("cuda_ipc", dtype="bfloat16"),
                 lambda: wt.Receiver().receive({"method": "cuda_ipc", "buckets": []}),
                 lambda: wt.make_sender("collective", backend="nccl")):
        with pytest.raises(RuntimeError, match="needs CUDA") as e:
            make()
        assert "\n" not in str(e.value) and "'shm'" in str(e.value)


def test_unknown_method_or_dtype_is_rejected_with_the_choices():
    with pytest.raises(ValueError, match="unknown weight transport 'rdma'.*'file', 'shm', 'cuda_ipc', 'collective'"):
        wt.make_sender("rdma")
    with pytest.raises(ValueError, match="unknown weight transport 'rdma'"):
        wt.Receiver().receive({"method": "rdma"})
    with pytest.raises(ValueError, match="dtype must be one of"):
        wt.make_sender("shm", dtype="int8")
    assert set(wt.SENDERS) == set(wt.RECEIVERS) == {"file", "shm", "cuda_ipc", "collective"}


def test_a_killed_sender_leaves_no_segment_behind():
    # the sender's resource tracker outlives it and unlinks what it created
    code = ("import os, sys, torch; sys.path.insert(0, sys.argv[1]); import weight_transport as wt; "
            "m = wt.ShmSender().send([('w', torch.ones(1000))]); print(m['buckets'][0]['segment'], flush=True); "
            "os.kill(os.getpid(), 9)")
    proc = subprocess.run([sys.executable, "-c", code, str(MODULE_DIR)], capture_output=True, text=True, timeout=60)
    name = proc.stdout.strip()
    assert proc.returncode == -9 and name.startswith(wt.SHM_PREFIX), proc.stderr
    deadline = time.monotonic() + 10
    while os.path.exists(os.path.join(wt.SHM_DIR, name)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(os.path.join(wt.SHM_DIR, name))
