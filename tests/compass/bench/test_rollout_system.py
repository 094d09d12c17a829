"""``compass bench length-balance / reward-overlap / system-ablation --quick``: each runs its real parts end to end
and ends with one JSON line whose figures are consistent (speed targets are the benchmarks' business)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.slow, pytest.mark.ray]


def _bench(name: str) -> tuple[dict, str]:
    env = {**os.environ, "COMPASS_PROGRESS": "0"}
    proc = subprocess.run([sys.executable, "-m", "compass.cli.main", "bench", name, "--quick"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()]
    return json.loads(lines[-1]), proc.stdout


def test_length_balance_quick():
    out, text = _bench("length-balance")
    for split in ("round_robin", "prompt_length", "history_lpt", "history_kk", "oracle"):
        assert f"| {split} |" in text
    assert out["idle_reduction_points"] == pytest.approx(out["idle_share_round_robin"] - out["idle_share_history_lpt"])
    assert 0 <= out["idle_share_history_lpt"] < 1 and out["makespan_over_ideal"] >= 1.0
    assert out["prediction_rel_error"] is not None and out["prediction_rel_error"] >= 0


def test_reward_overlap_quick():
    out, _ = _bench("reward-overlap")
    assert out["identical"] is True                      # the same samples and rewards either way
    assert out["reward_time_hidden"] <= 1.0 and out["reward_s_after"] > 0


def test_system_ablation_quick():
    out, text = _bench("system-ablation")
    assert out["identical_outputs"] is True              # every row sampled, scored and trained the same
    assert out["speedup_0"] == 1.0 and out["overall_speedup"] == out["speedup_3"] > 0
    assert "not measured" in text and out["fp8"] == "not measured"
