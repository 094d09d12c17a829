"""``compass bench vs-trl --quick``: both sides run, and TRL is configured to do our step's work."""
from __future__ import annotations

import pytest

from tests.helpers import bench_here

pytest.importorskip("trl")


def test_vs_trl_quick_runs_both_sides_on_matched_settings(capsys):
    out, _ = bench_here("vs-trl", ["--quick"], capsys)            # the bench ends with ONE JSON line
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
