"""`compass bench weight-sync --quick`: every path (file, shm bf16/fp32, collective gloo) runs through a receiver
process and delivers the sender's weights bitwise (its timings mean nothing at this size)."""
from __future__ import annotations

import json
import os

from compass.bench import run_bench
from compass.rl.rollout import weight_transport as wt


def test_bench_weight_sync_quick_delivers_identical_weights_on_every_path(capsys):
    before = {f for f in os.listdir(wt.SHM_DIR) if f.startswith(f"{wt.SHM_PREFIX}{os.getpid()}-")}
    assert run_bench("weight-sync", ["--quick"]) == 0
    out = capsys.readouterr().out
    head = json.loads(out.strip().splitlines()[-1])
    assert head["bench"] == "weight-sync" and head["quick"] is True
    assert head["identical"] is True
    for key in ("identical_file", "identical_shm_bf16", "identical_shm_fp32", "identical_collective_bf16"):
        assert head[key] is True, key
    for key in ("speedup", "speedup_shm_fp32", "speedup_collective_bf16", "file_fp32_s", "shm_bf16_s",
                "shm_fp32_s", "collective_bf16_s"):
        assert head[key] > 0, key
    assert head["params"] > 0 and abs(head["gb_bf16"] * 2 - head["gb_fp32"]) < 1e-3
    for label in ("file", "shm-bf16", "shm-fp32", "collective-bf16"):
        assert f"| {label} |" in out
    # the senders' segments are gone
    assert {f for f in os.listdir(wt.SHM_DIR) if f.startswith(f"{wt.SHM_PREFIX}{os.getpid()}-")} == before
