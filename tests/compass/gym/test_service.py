"""The reward service (process pool, deadlines, retries, metrics) and ``compass gym score``."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from compass.lm.model_factory import build_tokenizer
from compass.gym.penalties import OverlongConfig, ShapingConfig
from compass.gym.service import RewardService

TOOL_ROW = {"response": '<think>x</think><tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>',
            "gold_calls": [{"name": "f", "arguments": {"a": 1}}]}
JSON_ROW = {"response": '{"a": 1}', "schema": {"type": "object", "required": ["a"]}, "gold": {"a": 2}}


@pytest.fixture(scope="module")
def service():
    with RewardService(2, timeouts={"code": 2.0}) as svc:
        yield svc


def test_scores_in_order_with_fields_and_counts_metrics(service):
    before = service.metrics()["verifiers"].get("tool_call", {}).get("requests", 0)
    reqs = [("tool_call", TOOL_ROW), ("json_schema", JSON_ROW)] * 20
    results = service.score_many(reqs)
    assert [r.verifier for r in results] == [v for v, _ in reqs]
    assert all(r.kind == "ok" for r in results)
    assert results[0].score == 4.0 and results[0].fields == {"format": 1, "correct": 3.0}
    assert results[1].score == pytest.approx(0.5) and results[1].fields["valid"] is True
    m = service.metrics()
    assert m["verifiers"]["tool_call"]["requests"] == before + 20
    assert 0 < m["verifiers"]["tool_call"]["p50_latency_s"] <= m["verifiers"]["tool_call"]["p99_latency_s"]
    assert m["throughput_per_s"] > 0


@pytest.mark.parametrize("verifier,row,needle", [
    ("no-such-verifier", {"response": "x"}, "unknown gym verifier"),
    ("json_schema", {"response": "{}"}, "schema"),
    ("tool_call", {"response": "x" * 10_000_000, "gold_calls": []}, "too long"),
    ("tool_call", {"response": "\ud800 lone surrogate", "gold_calls": "not json"}, "gold_calls"),
])
def test_bad_input_is_a_scored_failure(service, verifier, row, needle):
    res = service.submit(verifier, row).result(60)
    # the verifier's error score: its minimum (tool_call: -3), never above a wrong answer
    assert (res.kind, res.score) == ("error", -3.0 if verifier == "tool_call" else 0.0) and needle in res.error
    assert service.submit("tool_call", TOOL_ROW).result(30).score == 4.0       # and the service goes on


def test_world_specs(service):
    ok = service.submit_spec('{"type": "math_exact"}', "<think>6*7</think>42", "42").result(30)
    bad = service.submit_spec('{"type": "nope"}', "42", "42").result(30)
    assert (ok.kind, ok.score) == ("ok", 1.0)
    assert bad.kind == "error" and "unknown verifier type" in bad.error


def test_a_worker_killed_mid_task_is_replaced_and_the_task_retried():
    with RewardService(1) as svc:
        assert svc.submit("tool_call", TOOL_ROW).result(30).kind == "ok"
        pid = svc._workers[0].proc.pid
        fut = svc.submit("code", {"response": "import time\ntime.sleep(1.5)\ndef f(): return 1",
                                  "tests": ["assert f() == 1"], "timeout_s": 10})
        time.sleep(0.5)
        os.kill(pid, signal.SIGKILL)                   # an infrastructure fault, injected for real
        res = fut.result(60)
        assert (res.kind, res.score) == ("ok", 1.0)
        assert svc._workers[0].proc.pid != pid


def test_a_hung_verifier_times_out_without_stopping_the_service(service):
    t0 = time.perf_counter()
    hung = service.submit("code", {"response": "import time\ntime.sleep(60)", "tests": ["assert True"],
                                   "timeout_s": 120})
    res = hung.result(30)
    assert res.kind == "timeout" and res.score == 0.0
    assert time.perf_counter() - t0 < 15
    assert service.submit("tool_call", TOOL_ROW).result(30).score == 4.0
    assert service.metrics()["verifiers"]["code"]["failures"].get("timeout", 0) >= 1


def test_token_ids_are_detokenized_in_workers_and_shaped(tmp_path):
    tok = build_tokenizer(["<think>x</think> the answer is 42 and more words here"] * 50)
    tok.save_pretrained(tmp_path)
    text = "<think>6*7</think>42"
    content = tok(text, add_special_tokens=False)["input_ids"]
    ids = content + [tok.eos_token_id] + [tok.pad_token_id] * 30      # eos and padding: not response length
    shaping = ShapingConfig(overlong=OverlongConfig(max_len=len(content) + 2, cache_len=4))
    with RewardService(1, tokenizer_dir=str(tmp_path), shaping=shaping) as svc:
        res = svc.submit_spec('{"type": "math_exact"}', None, "42", token_ids=ids).result(60)
    assert res.kind == "ok"
    # the content is max_len - 2 tokens: 2 tokens into the 4-token soft zone, penalty -0.5
    assert res.fields["shaping_verifier"] == 1.0 and res.fields["shaping_overlong"] == pytest.approx(-0.5)
    assert res.score == pytest.approx(0.5)


# -- compass gym score -------------------------------------------------------------------------
def _cli(*args, **kw):
    env = {**os.environ, "COMPASS_PROGRESS": "0"}
    return subprocess.run([sys.executable, "-m", "compass.cli.main", "gym", "score", *args], capture_output=True,
                          text=True, env=env, timeout=180, **kw)


def test_cli_keeps_rows_in_order_and_survives_bad_lines(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    with open(src, "wb") as f:
        f.write((json.dumps({**TOOL_ROW, "id": "a"}) + "\n").encode())
        f.write(b"\xff\xfe not utf-8\n")
        f.write(b"{malformed json\n")
        f.write(b"\n")
        f.write((json.dumps({"id": "b", "response": "no calls", "gold_calls": TOOL_ROW["gold_calls"]}) + "\n").encode())
        f.write(b"[1, 2]\n")
        f.write((json.dumps({"id": "c", "response": "x"}) + "\n").encode())
    for workers in ("1", "2"):
        p = _cli("tool_call", str(src), str(out), "--workers", workers)
        assert p.returncode == 0, p.stderr
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r.get("id") for r in rows] == ["a", None, None, "b", None, "c"]
        assert rows[0]["score"] == 4.0 and rows[0]["format"] == 1 and "error" not in rows[0]
        assert rows[1]["line"] == 2 and "UTF-8" in rows[1]["error"]
        assert rows[2]["line"] == 3 and "malformed JSON" in rows[2]["error"]
        assert rows[3]["correct"] == -3.0 and rows[3]["format"] == 0
        assert rows[4]["line"] == 6 and "object" in rows[4]["error"]
        assert "gold_calls" in rows[5]["error"] and rows[5]["score"] == -3.0 and rows[5]["correct"] == -3.0
        assert "scored 6 rows" in p.stderr


def test_cli_usage_errors(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(TOOL_ROW) + "\n")
    p = _cli("nope", str(src), str(tmp_path / "o.jsonl"))
    assert p.returncode == 2 and "unknown gym verifier 'nope'" in p.stderr and "math" in p.stderr
    p = _cli("tool_call", str(tmp_path / "missing.jsonl"), str(tmp_path / "o.jsonl"))
    assert p.returncode == 2 and "no such input file" in p.stderr
    p = _cli("genrm", str(src), str(tmp_path / "o.jsonl"))
    assert p.returncode == 2 and "--judge" in p.stderr
    for old_name, name in (("tool", "tool_call"), ("json", "json_schema")):    # names from before one registry
        p = _cli(old_name, str(src), str(tmp_path / "o.jsonl"))
        assert p.returncode == 2 and f"'{old_name}' is now called '{name}'" in p.stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_cli_genrm_judges_with_a_checkpoint(tmp_path):
    from compass.lm.model_config import ModelConfig
    from compass.lm.model_factory import build_model, save_checkpoint
    tok = build_tokenizer(["<answer>A</answer> <answer>B</answer> <answer>TIE</answer> Judge which"] * 20)
    model = build_model(ModelConfig(hidden_size=32, num_layers=1, head_dim=32, intermediate_size=64,
                                    expert_size=32), tok, seed=0)
    save_checkpoint(model, tok, tmp_path / "judge")
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join([json.dumps({"id": 1, "prompt": "2+2?", "response": "4", "reference": "4"}),
                              json.dumps({"id": 2, "prompt": "2+2?", "response": "5"}),          # no reference
                              "{oops"]) + "\n")
    p = _cli("genrm", str(src), str(out), "--judge", str(tmp_path / "judge"), "--max-new-tokens", "6")
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r.get("id") for r in rows] == [1, 2, None]
    assert rows[0]["verdict"] in ("A", "B", "TIE", None) and rows[0]["score"] in (0.0, 1.0)
    assert rows[0]["malformed"] == (rows[0]["verdict"] is None)
    assert "reference" in rows[1]["error"] and rows[1]["score"] == 0.0
    assert "malformed JSON" in rows[2]["error"]
    assert '"asked": 1' in p.stderr


# -- faults found in review ---------------------------------------------------------------------
SLEEP = "import time\ntime.sleep({s})\ndef f(): return 1"


def _code(seconds: float, timeout_s: float = 30) -> dict:
    return {"response": SLEEP.format(s=seconds), "tests": ["assert f() == 1"], "timeout_s": timeout_s}


def _orphan_sandbox_workers() -> int:
    import psutil
    n = 0
    for p in psutil.process_iter(["cmdline", "ppid"]):
        try:
            if p.info["ppid"] == 1 and any("sandbox/worker.py" in a for a in p.info["cmdline"] or []):
                n += 1
        except psutil.Error:
            pass
    return n


def test_a_cancelled_future_is_skipped_and_the_service_goes_on():
    from compass.gym.service import PIPELINE_DEPTH
    with RewardService(1) as svc:
        # one worker takes PIPELINE_DEPTH tasks at once; the last of these stays queued until the first is done
        futs = [svc.submit("code", _code(0.5)) for _ in range(PIPELINE_DEPTH + 2)]
        assert futs[-1].cancel()                        # still queued: cancellable
        assert all(f.result(60).score == 1.0 for f in futs[:-1])
        assert svc._thread.is_alive()
        assert svc.submit("tool_call", TOOL_ROW).result(30).score == 4.0


def test_work_is_spread_before_it_is_pipelined():
    with RewardService(2) as svc:
        [f.result(60) for f in [svc.submit("code", _code(0)) for _ in range(4)]]     # both workers warm
        futs = [svc.submit("code", _code(2.0)) for _ in range(4)]
        deadline = time.monotonic() + 30
        while sum(len(w.inflight) for w in list(svc._workers)) < 4 and not any(f.done() for f in futs):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        # 2 per worker in parallel, not 4 on one (held tasks, not wall time: a slow machine proves it too)
        assert sorted(len(w.inflight) for w in list(svc._workers)) == [2, 2]
        assert all(f.result(60).score == 1.0 for f in futs)


def test_a_large_row_does_not_stall_the_service_behind_a_slow_task():
    before = _orphan_sandbox_workers()
    with RewardService(2, timeouts={"code": 2.0}) as svc:
        [f.result(60) for f in [svc.submit("code", _code(0)) for _ in range(2)]]
        t0 = time.perf_counter()
        slow = svc.submit("code", _code(300))          # far past every bound below: only the time-out ends it
        big = svc.submit("math", {"response": "x " * 1_500_000 + "\\boxed{2}", "gold": "2"})
        small = svc.submit("math", {"response": "\\boxed{3}", "gold": "3"})
        assert small.result(60).score == 1.0 and time.perf_counter() - t0 < 60
        assert big.result(30).kind == "ok"
        res = slow.result(60)
        assert res.kind == "timeout" and time.perf_counter() - t0 < 60
    time.sleep(0.5)
    assert _orphan_sandbox_workers() <= before          # the killed worker's sandbox went with it


def test_cli_overwrites_stale_fields_and_writes_lone_surrogates(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"response": "\\boxed{3}", "gold": "2", "correct": True, "error": "old",
                               "note": "\ud800"}) + "\n")
    for workers in ("1", "2"):
        p = _cli("math", str(src), str(out), "--workers", workers)
        assert p.returncode == 0, p.stderr
        row = json.loads(out.read_text())
        assert row["correct"] is False and row["score"] == 0.0 and "error" not in row
        assert row["note"] == "\ud800"


def test_cli_timeout_applies_with_one_worker_and_bad_output_dirs_are_refused(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"response": _code(60)["response"], "tests": ["assert True"], "timeout_s": 120}) + "\n")
    t0 = time.perf_counter()
    p = _cli("code", str(src), str(out), "--workers", "1", "--timeout", "2")
    assert p.returncode == 0, p.stderr
    row = json.loads(out.read_text())
    assert row["error"].startswith("timeout") and row["reason"] == "verifier_timeout"
    assert row["passed"] == 0 and time.perf_counter() - t0 < 30
    p = _cli("code", str(src), str(tmp_path / "missing" / "out.jsonl"))
    assert p.returncode == 2 and "cannot write" in p.stderr
