"""``compass bench learning-efficiency``: its curve arithmetic, and a ``--quick`` run end to end."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compass.bench.learning_efficiency import _interp, tokens_to_target

ROOT = Path(__file__).resolve().parents[3]


def test_learning_efficiency_interp_uses_the_tokens_where_each_point_was_measured():
    pts = [(0, 0.4), (12_000, 0.46), (30_000, 0.5)]
    assert _interp(pts, 0) == 0.4
    assert _interp(pts, 6_000) == pytest.approx(0.43)
    assert _interp(pts, 21_000) == pytest.approx(0.48)
    assert _interp(pts, 50_000) == 0.5                      # held flat past the last point
    assert _interp([(0, 0.4), (10, 0.5), (10, 0.6)], 10) == 0.5   # two evaluations after one step


def test_learning_efficiency_tokens_to_target():
    curve = [(0, 0.4), (100, 0.5), (200, 0.6)]
    assert tokens_to_target(curve, 0.45) == (pytest.approx(50), True)
    assert tokens_to_target(curve, 0.4) == (0, True)
    assert tokens_to_target(curve, 0.7) == (200, False)     # never reached: the whole budget, flagged


def test_learning_efficiency_quick_run(tmp_path: Path):
    env = {**os.environ, "COMPASS_PROGRESS": "0"}
    proc = subprocess.run([sys.executable, "-m", "compass.cli.main", "bench", "learning-efficiency", "--quick",
                           "--threads", "1", "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["bench"] == "learning-efficiency"
    assert set(out["final"]) == {"grpo", "dapo", "ours"}
    assert "tokens_ratio_vs_grpo" in out and "tokens_ratio_vs_dapo" in out
    assert 0 < out["held_out_se"] < 1
    assert (tmp_path / "out" / "curves.png").exists() and (tmp_path / "out" / "runs.json").exists()
