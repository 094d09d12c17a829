"""``compass bench learning-efficiency``: its statistics on hand-made numbers, and a ``--quick`` run end to end."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from compass.bench.learning_efficiency import stats
from compass.bench.learning_efficiency.regimes import REGIMES
from compass.bench.learning_efficiency.signal_vs_n import curves, hypergeom, measured_at_n
from compass.bench.learning_efficiency.summary import summarize



def test_interp_uses_the_tokens_where_each_point_was_measured():
    pts = [(0, 0.4), (12_000, 0.46), (30_000, 0.5)]
    assert stats.interp(pts, 0) == 0.4
    assert stats.interp(pts, 6_000) == pytest.approx(0.43)
    assert stats.interp(pts, 21_000) == pytest.approx(0.48)
    assert stats.interp(pts, 50_000) == 0.5                       # held flat past the last point
    assert stats.interp([(0, 0.4), (10, 0.5), (10, 0.6)], 10) == 0.5   # two evaluations after one step
    assert stats.at_milestones(pts, [0, 6_000, 40_000]) == [(0, 0.4), (6_000, pytest.approx(0.43)), (40_000, 0.5)]


def test_tokens_to_target():
    curve = [(0, 0.4), (100, 0.5), (200, 0.6)]
    assert stats.tokens_to_target(curve, 0.45) == (pytest.approx(50), True)
    assert stats.tokens_to_target(curve, 0.4) == (0, True)
    assert stats.tokens_to_target(curve, 0.6) == (200, True)
    assert stats.tokens_to_target(curve, 0.7) == (200, False)     # never reached: the whole budget, flagged
    assert stats.tokens_to_target([(0, 0.4), (100, 0.6), (200, 0.3)], 0.5) == (pytest.approx(50), True)  # first
    assert stats.target_from_gain(0.4, 0.6) == pytest.approx(0.5)


def test_mean_curve_and_spread():
    a, b = [(0, 0.2), (10, 0.4)], [(0, 0.4), (10, 0.8)]
    assert stats.mean_curve([a, b]) == [(0, pytest.approx(0.3)), (10, pytest.approx(0.6))]
    assert stats.mean_std([1.0, 3.0]) == (2.0, pytest.approx(math.sqrt(2)))
    assert stats.var([5.0]) == 0.0
    assert stats.percentile([1, 2, 3, 4], 0.5) == 2.5
    assert stats.percentile([1, 2, 3, 4], 0.0) == 1 and stats.percentile([1, 2, 3, 4], 1.0) == 4


def test_held_out_se():
    # prompt 1: rewards 1, 0 (variance 0.5, over 2 samples 0.25); prompt 2: 1, 1 -> sqrt(0.25) / 2 prompts
    assert stats.held_out_se([[1, 0], [1, 1]]) == pytest.approx(0.25)
    # one sample per prompt: the plain standard error of the four values
    assert stats.held_out_se([[1], [0], [1], [0]]) == pytest.approx(math.sqrt(1 / 3 / 4))


DEN = [(0, 0.0), (100, 0.5), (200, 1.0)]                # reaches 0.5 at 100 tokens


def test_paired_bootstrap_ratio_by_hand():
    fast = [(0, 0.0), (100, 1.0), (200, 1.0)]           # reaches 0.5 at 50
    out = stats.paired_bootstrap_ratio([fast, DEN], [DEN, DEN], 0.5, n_boot=2000, seed=1)
    # both seeds: mean curve (0, 0.75 at 100) reaches 0.5 at 66.7 -> 0.667; resamples (0,0) -> 0.5, (1,1) -> 1.0,
    # each a quarter of the time, so they are the 2.5% and 97.5% percentiles
    assert out["ratio"] == pytest.approx(2 / 3)
    assert out["ci_low"] == pytest.approx(0.5) and out["ci_high"] == pytest.approx(1.0)
    assert out["n"] == 2000


def test_paired_bootstrap_pairs_the_seeds():
    # seeds that differ a lot but a method identical to its baseline on each: ratio 1, no spread at all
    slow = [(0, 0.0), (100, 0.1), (200, 0.6)]
    out = stats.paired_bootstrap_ratio([DEN, slow], [DEN, slow], 0.5, n_boot=500)
    assert (out["ratio"], out["ci_low"], out["ci_high"]) == (pytest.approx(1.0),) * 3
    # half the tokens on every seed: 0.5 whatever the resample
    half = [(0, 0.0), (50, 0.5), (100, 1.0), (200, 1.0)]
    den = [(0, 0.0), (100, 0.5), (200, 1.0), (400, 1.0)]
    ms = [0, 50, 100, 200, 400]
    h, d = stats.at_milestones(half, ms), stats.at_milestones(den, ms)
    out = stats.paired_bootstrap_ratio([h, h], [d, d], 0.5, n_boot=200)
    assert out["ci_low"] == pytest.approx(0.5) and out["ci_high"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        stats.paired_bootstrap_ratio([DEN], [DEN, DEN], 0.5)


def test_paired_bootstrap_delta_and_bound():
    out = stats.paired_bootstrap_delta([0.5, 0.7], [0.4, 0.6], n_boot=300)
    assert out["delta"] == pytest.approx(0.1) and out["ci_low"] == pytest.approx(0.1)
    out = stats.paired_bootstrap_delta([0.5, 0.6], [0.5, 0.5], n_boot=2000, seed=3)
    assert out["delta"] == pytest.approx(0.05) and out["ci_low"] == pytest.approx(0.0)
    assert out["ci_high"] == pytest.approx(0.1)
    assert stats.zero_variance_bound(0.6) == pytest.approx(0.4)


def test_fig3_maths_by_hand():
    # 2 of 4 graded samples pass; groups of 2 drawn from them: 1/6 both fail, 1/6 both pass, 4/6 one each
    assert hypergeom(0, 4, 2, 2) == pytest.approx(1 / 6)
    m = measured_at_n(4, 2, 2)
    assert m["zero_variance"] == pytest.approx(1 / 3)
    assert m["pass_at_n"] == pytest.approx(5 / 6)
    assert m["abs_adv_per_sample"] == pytest.approx(4 / 6 * 1.0)     # 2 sqrt(1/2 * 1/2) = 1
    assert measured_at_n(8, 0, 8) == {"zero_variance": 1.0, "pass_at_n": 0.0, "abs_adv_per_sample": 0.0}
    rows = curves([{"passes": 2, "k": 4, "mean_len": 10.0}, {"passes": 0, "k": 4, "mean_len": 30.0}], [2, 8], 4)
    assert rows[0]["zero_variance"] == pytest.approx((1 / 3 + 1) / 2)
    # every token of a sample carries its |A|: (10 + 10) / 2 * 4/6 over 0.5 * 10 + 0.5 * 10 and 30 tokens
    assert rows[0]["abs_adv_per_token"] == pytest.approx((10 * 4 / 6) / 40)
    assert rows[1]["zero_variance"] is None and 0 < rows[1]["belief_zero_variance"] < 1   # n > k: beliefs only


def _run(seed, evals, groups=8, zv=4, size=8, skipped=0):
    steps = [{"rollout_tokens_total": 100 * (i + 1), "tokens": 100, "groups": groups, "groups_kept": groups,
              "zero_variance_all_pass": 0, "zero_variance_all_fail": zv, "prompts_skipped": skipped,
              "group_size": size, "informative_token_share": 1 - zv / groups, "adv_abs_token_mean": 0.5,
              "updated": 1.0} for i in range(2)]
    return {"seed": seed, "evals": [{"tokens": t, "reward": r, "se": 0.01, "by_group": {"a": r}} for t, r in evals],
            "steps": steps, "time_s": 1.0, "eval_time_s": 0.5}


def test_summarize_on_hand_made_runs():
    eval0 = {"reward": 0.2, "se": 0.01, "by_group": {"a": 0.2}}
    runs = {"grpo": [_run(0, [(100, 0.4), (200, 0.6)]), _run(1, [(100, 0.4), (200, 0.6)])],
            "ours": [_run(0, [(100, 0.6), (200, 0.6)], zv=0, skipped=8),
                     _run(1, [(100, 0.6), (200, 0.6)], zv=0, skipped=8)]}
    s = summarize(runs, eval0, [0, 100, 200], n_boot=100)
    assert s["target"] == pytest.approx(0.4)                     # half grpo's gain 0.2 -> 0.6
    assert s["methods"]["grpo"]["to_target"] == (pytest.approx(100), True)
    assert s["methods"]["ours"]["to_target"] == (pytest.approx(50), True)
    assert s["methods"]["ours"]["vs_grpo"]["ratio"] == pytest.approx(0.5)
    assert s["methods"]["ours"]["vs_grpo"]["final_delta"]["delta"] == pytest.approx(0.0)
    assert s["z_grpo"] == pytest.approx(0.5) and s["bound_ratio"] == pytest.approx(0.5)
    assert s["methods"]["ours"]["zero_variance"] == 0 and s["methods"]["ours"]["skipped"] == pytest.approx(0.5)


def test_regime_milestones_and_overrides():
    r = REGIMES["paper"].with_overrides({"budget": "1000", "milestones": "4", "tiers": "1,5", "spacing": "1.5"})
    assert r.milestone_tokens() == (0, 125, 354, 650, 1000)
    assert r.tiers == (1, 5) and r.rl_settings()["budget"] == 1000
    with pytest.raises(ValueError, match="cannot set"):
        REGIMES["paper"].with_overrides({"nonsense": "1"})


def test_learning_efficiency_quick_run(tmp_path: Path, capsys):
    from tests.helpers import bench_here
    out, _ = bench_here("learning-efficiency", ["--quick", "--jobs", "1", "--cache", str(tmp_path / "cache"),
                                                "--out", str(tmp_path / "out")], capsys)
    assert out["bench"] == "learning-efficiency" and out["regime"] == "paper"
    assert set(out["final"]) == {"grpo", "dapo", "greso", "ours", "ours-no-prefilter", "ours-no-autoN",
                                 "ours-no-zvp", "ours-no-espo", "ours-zvp-1.0"}
    for key in ("tokens_ratio_vs_grpo", "tokens_ratio_vs_grpo_ci_high", "tokens_ratio_vs_dapo",
                "final_reward_delta_vs_grpo", "residual_zero_variance", "z_grpo", "tokens_ratio_vs_grpo_ours-no-espo",
                "tokens_ratio_vs_grpo_ours-zvp-1.0", "lowz"):
        assert key in out
    assert "z_grpo" in out["lowz"] and "tokens_ratio_vs_grpo" in out["lowz"]
    for name in ("curves_paper.png", "fig3_paper.png", "runs_paper.json", "curves_lowz.png", "fig3_lowz.png"):
        assert (tmp_path / "out" / name).exists(), name
