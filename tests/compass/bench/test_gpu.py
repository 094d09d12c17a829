"""`compass bench gpu --quick`: the GPU bench's own code paths at CPU size (its numbers mean nothing here; on a
GPU it runs full size, docs/gpu.md). Every phase runs, checks itself and prints its JSON line as it ends."""
from __future__ import annotations

import json

from compass.bench import run_bench


def test_bench_gpu_quick_runs_every_phase_and_every_check_passes(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    out_file = tmp_path / "gpu.jsonl"
    assert run_bench("gpu", ["--quick", "--out", str(out_file)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    phases = [(r.get("model"), r["phase"]) for r in lines[:-1]]
    assert phases[0] == (None, "env")
    for model in ("dense", "moe"):
        assert [p for m, p in phases if m == model][:7] == ["build", "sft", "rollout", "update", "fsdp",
                                                            "fsdp_offload", "vllm"]
    assert (("moe", "megatron") in phases) or any(r.get("not_measured") for r in lines if r["phase"] == "megatron")
    for r in lines[1:-1]:
        if r["phase"] == "fsdp_offload":                # offload moves GPU state to the host: nothing to do here
            assert r["not_measured"] == "CPU offload needs a GPU" and "checks" not in r
            continue
        assert r.get("checks") and all(r["checks"].values()), r
        if r["phase"] in ("sft", "rollout", "update", "fsdp", "vllm"):
            assert r["tokens_per_s"] > 0
        if r["phase"] == "vllm":    # make test builds vLLM's environment: the phase runs here, fp8 and sleep cannot
            assert r["dtype"] == "float32" and r["sync_memory_s_per_gb"] > 0 and r["sync_file_s_per_gb"] > 0
            assert r["fp8_tokens_per_s"].startswith("not measured") and r["sleep_s"].startswith("not measured")
            assert r["logp_gap_mean_abs"] < 1e-3
    head = lines[-1]
    assert head["bench"] == "gpu" and head["all_checks_pass"] is True and head["device"] == "cpu"
    assert head["dense_update_logp_gap_mean_abs"] < 1e-4           # fp32 rollout copy vs fp32 trainer on a CPU
    assert head["dense_update_mfu"].startswith("not measured")     # no peak for a CPU: never an estimate
    # each phase's line reached the file as it ended (what a time-out leaves behind)
    assert [json.loads(x) for x in out_file.read_text().splitlines()] == lines[:-1]
