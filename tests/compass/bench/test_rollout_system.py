"""``compass bench length-balance / reward-overlap / system-ablation --quick``: each runs its real parts end to end
and ends with one JSON line whose figures are consistent (speed targets are the benchmarks' business).

They run in the test process (as `compass bench NAME` calls them), on the loopback Ray it keeps across modules:
a subprocess each would start Python, torch and a Ray of its own (~10 s of a 2-core machine each)."""
from __future__ import annotations

import pytest

from tests.helpers import bench_here

pytestmark = [pytest.mark.slow, pytest.mark.ray]


@pytest.fixture
def bench(ray_up, capsys):
    return lambda name: bench_here(name, ["--quick"], capsys)


def test_length_balance_quick(bench):
    out, text = bench("length-balance")
    for split in ("round_robin", "prompt_length", "history_lpt", "history_kk", "oracle"):
        assert f"| {split} |" in text
    assert out["idle_reduction_points"] == pytest.approx(out["idle_share_round_robin"] - out["idle_share_history_lpt"])
    assert 0 <= out["idle_share_history_lpt"] < 1 and out["makespan_over_ideal"] >= 1.0
    assert out["prediction_rel_error"] is not None and out["prediction_rel_error"] >= 0


def test_reward_overlap_quick(bench):
    out, _ = bench("reward-overlap")
    assert out["identical"] is True                      # the same samples and rewards either way
    assert out["reward_time_hidden"] <= 1.0 and out["reward_s_after"] > 0


def test_system_ablation_quick(bench):
    out, text = bench("system-ablation")
    assert out["identical_outputs"] is True              # every row sampled, scored and trained the same
    assert out["speedup_0"] == 1.0 and out["overall_speedup"] == out["speedup_3"] > 0
    assert "not measured" in text and out["fp8"] == "not measured"
