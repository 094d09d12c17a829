"""``compass bench vs-trl --quick``: both sides run, and TRL is configured to do our step's work."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[3]


def test_vs_trl_quick_runs_both_sides_on_matched_settings():
    env = {**os.environ, "COMPASS_PROGRESS": "0"}
    proc = subprocess.run([sys.executable, "-m", "compass.cli.main", "bench", "vs-trl", "--quick"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()]
    out = json.loads(lines[-1])                                   # the bench ends with ONE JSON line
    assert out["bench"] == "vs-trl" and out["quick"] is True

    # both sides really ran and produced samples
    assert out["ours_samples_per_s"] > 0 and out["trl_samples_per_s"] > 0
    assert out["ours_tokens_per_s"] > 0 and out["trl_tokens_per_s"] > 0
    assert out["speedup_vs_trl"] == pytest.approx(out["ours_samples_per_s"] / out["trl_samples_per_s"], rel=0.01)

    # the same work per step: group size, max tokens, completions per step (TRL's values read back from its trainer)
    per_step = out["prompts_per_step"] * out["group_size"]
    trl = out["trl_read_back"]
    assert trl["num_generations"] == out["group_size"]
    assert trl["max_completion_length"] == out["max_new_tokens"]
    assert trl["generation_batch_size"] == trl["completions_per_update"] == per_step
    assert out["ours_completions_per_step"] == out["trl_completions_per_step"] == per_step
    assert out["settings_matched"] is True
    assert out["threads"] == 2
