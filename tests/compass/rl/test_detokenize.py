"""``DetokenizerPool`` decodes exactly as ``completion_text`` (the rollout's rule), in order, and survives a
killed worker without hanging; ``compass bench detok --quick`` runs end to end."""
from __future__ import annotations

import os
import random
import signal
import time

import pytest

from compass.lm.model_factory import build_tokenizer
from compass.rl.rollout.detokenize import DetokenizerPool, completion_text

TEXT = ("The answer is 42, because 6 × 7 = 42. Đáp án là bốn mươi hai. คำตอบคือสี่สิบสอง "
        "答案是四十二。 Jawapannya empat puluh dua 🙂. <think>step by step</think>\n") * 30


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(TEXT)


@pytest.fixture(scope="module")
def seqs(tok):
    """Varied ids: empty, eos/pad only, pad in the middle, windows cutting multi-byte characters, raw byte tokens."""
    rng = random.Random(0)
    stream = tok(TEXT)["input_ids"]
    byte_ids = tok.convert_tokens_to_ids(["à", "¸", "Ħ", "ð", "Ł", "Ļ", "Ĥ"])   # byte-level pieces of ค / 🙂
    out = [[], [tok.eos_token_id], [tok.pad_token_id, tok.pad_token_id], [tok.pad_token_id, 5, tok.pad_token_id],
           byte_ids, byte_ids[:2], [byte_ids[3], tok.eos_token_id, byte_ids[4]]]
    for _ in range(60):
        a = rng.randrange(len(stream))
        ids = stream[a:a + rng.randint(0, 300)]
        if rng.random() < 0.6:
            ids = ids + [tok.eos_token_id] + [tok.pad_token_id] * rng.randint(0, 3)
        out.append(ids)
    return out


@pytest.fixture(scope="module")
def pool2(tok):
    with DetokenizerPool(tok, 2) as pool:
        yield pool


def test_completion_text_is_the_rollout_rule(tok):
    ids = tok("Đáp án 42")["input_ids"]
    assert completion_text(tok, [tok.pad_token_id] + ids + [tok.eos_token_id, tok.pad_token_id]) == "Đáp án 42"
    assert completion_text(tok, []) == ""


@pytest.mark.parametrize("workers", [0, 1])
def test_in_process_pool_is_identical(tok, seqs, workers):
    with DetokenizerPool(tok, workers) as pool:
        assert pool.decode_many(seqs) == [completion_text(tok, s) for s in seqs]
        assert [f.result() for f in [pool.submit(s) for s in seqs]] == [completion_text(tok, s) for s in seqs]
        assert pool.decode_many([]) == []


def test_two_workers_identical_and_in_order(tok, seqs, pool2):
    expected = [completion_text(tok, s) for s in seqs]
    assert any("\ufffd" in t for t in expected)                       # split multi-byte characters are exercised
    assert pool2.decode_many(seqs) == expected
    assert pool2.decode_many(seqs[:1]) == expected[:1]
    assert pool2.decode_many([[]]) == [""]
    assert pool2.decode_many(iter(seqs)) == expected                   # any iterable
    futs = [pool2.submit(s) for s in seqs]
    assert [f.result(timeout=30) for f in futs] == expected


def test_numpy_ids_decode_the_same(tok, seqs, pool2):
    import numpy as np
    arrays = [np.asarray(s, dtype=np.int64) for s in seqs]
    assert pool2.decode_many(arrays) == [completion_text(tok, s) for s in seqs]


def test_close_twice_and_use_after_close(tok):
    pool = DetokenizerPool(tok, 2)
    procs = [w.proc for w in pool._workers]
    pool.close()
    pool.close()
    assert not any(p.is_alive() for p in procs)
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit([1, 2])


def _kill_worker_during(pool, tok, seqs) -> tuple[list, int]:
    """Queue work on worker 0, SIGKILL its process; the futures of that work."""
    big = [s * 40 for s in seqs]                                      # enough work that some is in flight
    pid = pool._workers[0].proc.pid
    futs = [pool._submit_packed(big, 0) for _ in range(3)]
    os.kill(pid, signal.SIGKILL)
    return futs, pid


def test_killed_worker_is_restarted_and_retried_once_then_a_clear_error(tok, seqs):
    expected = [completion_text(tok, s * 40) for s in seqs]
    with DetokenizerPool(tok, 2) as pool:                             # retries=1: the lost work is re-sent
        futs, pid = _kill_worker_during(pool, tok, seqs)
        assert [f.result(timeout=60) for f in futs] == [expected] * 3
        assert pool._workers[0].proc.pid != pid

        pool.retries = 0                                              # no retry: the futures fail, never hang
        futs, pid = _kill_worker_during(pool, tok, seqs)
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match=rf"detokenizer worker 0 \(pid {pid}, exit code -9\) died"):
            [f.result(timeout=60) for f in futs]
        assert time.monotonic() - t0 < 30
        assert pool.decode_many(seqs) == [completion_text(tok, s) for s in seqs]   # replaced and usable

        pid = pool._workers[0].proc.pid                               # a worker that dies while it starts up
        os.kill(pid, signal.SIGKILL)                                  # is not restarted again: the pool breaks
        deadline = time.monotonic() + 30
        while pool._workers[0].proc.pid == pid and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(pool._workers[0].proc.pid, signal.SIGKILL)
        while not pool._broken and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(RuntimeError, match="died before it loaded the tokenizer"):
            pool.decode_many(seqs)


def test_bench_quick_runs_end_to_end(capsys):
    from tests.helpers import bench_here
    out, _ = bench_here("detok", ["--quick"], capsys)                # the bench ends with ONE JSON line
    for key in ("speedup", "identical", "workers", "completions", "tokens", "single_s", "pool_s", "pool_start_s"):
        assert key in out
    assert out["bench"] == "detok" and out["identical"] is True and out["workers"] == 2
