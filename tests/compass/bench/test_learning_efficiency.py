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


def test_resample_units_draws_starts_then_seeds_within_them():
    import random
    clusters = [[0, 1, 2], [3, 4, 5]]
    rng = random.Random(0)
    seen_mixed_start = False
    for _ in range(300):
        idx = stats.resample_units(clusters, rng)
        assert len(idx) == 6
        for part in (idx[:3], idx[3:]):           # each block of a draw comes from one start
            assert all(i in clusters[0] for i in part) or all(i in clusters[1] for i in part)
        seen_mixed_start |= (idx[0] in clusters[0]) != (idx[3] in clusters[0])
    assert seen_mixed_start
    with pytest.raises(ValueError, match="each unit once"):
        stats.paired_bootstrap_ratio([DEN, DEN], [DEN, DEN], 0.5, clusters=[[0], [0]])


def test_the_bootstrap_over_starts_covers_a_start_that_disagrees():
    # start A: the method halves the tokens on both seeds; start B: no saving on both. Seeds within a start
    # agree, so a seeds-only bootstrap within the pooled runs looks tighter than the truth across starts.
    ms = [0, 50, 100, 200, 400]
    half = stats.at_milestones([(0, 0.0), (50, 0.5), (100, 1.0), (200, 1.0)], ms)
    den = stats.at_milestones([(0, 0.0), (100, 0.5), (200, 1.0), (400, 1.0)], ms)
    num, base = [half, half, den, den], [den, den, den, den]
    by_start = stats.paired_bootstrap_ratio(num, base, 0.5, n_boot=2000, clusters=[[0, 1], [2, 3]])
    assert by_start["ratio"] == pytest.approx(2 / 3)
    assert by_start["ci_low"] == pytest.approx(0.5) and by_start["ci_high"] == pytest.approx(1.0)
    # each start alone: no spread at all
    assert stats.paired_bootstrap_ratio(num[:2], base[:2], 0.5, n_boot=200)["ci_high"] == pytest.approx(0.5)
    d = stats.paired_bootstrap_delta([0.6, 0.6, 0.5, 0.5], [0.5] * 4, n_boot=2000, clusters=[[0, 1], [2, 3]])
    assert d["delta"] == pytest.approx(0.05) and d["ci_low"] == pytest.approx(0.0) and d["ci_high"] == pytest.approx(0.1)


def test_bootstrap_se_counts_the_spread_between_starts():
    same = stats.bootstrap_se([0.1, 0.1, 0.3, 0.3], clusters=[[0, 1], [2, 3]], n_boot=4000)
    # two starts 0.2 apart, seeds identical within each: the mean of a resample is 0.1, 0.2 or 0.3 with
    # chances 1/4, 1/2, 1/4 -> sd 0.1/sqrt(2)
    assert same == pytest.approx(0.1 / math.sqrt(2), rel=0.05)
    # the same values with the spread inside each start: four independent draws, sd 0.1/2
    assert stats.bootstrap_se([0.1, 0.1, 0.3, 0.3], clusters=[[0, 2], [1, 3]], n_boot=4000) == pytest.approx(
        0.05, rel=0.05)
    assert stats.bootstrap_se([0.2] * 5) == pytest.approx(0, abs=1e-12)


def test_informative_ratio_bound():
    assert stats.informative_ratio_bound(0.36, 0.48) == pytest.approx(0.75)
    assert stats.informative_ratio_bound(0.4, 1.0) == pytest.approx(stats.zero_variance_bound(0.6))
    assert stats.informative_ratio_bound(0.4, 0.0) is None
    # the same shares, 1.5x the steps per token (smaller groups): the steps buy the saving
    assert stats.predicted_ratio(0.42, 39 / 80_000, 0.42, 58.5 / 80_000) == pytest.approx(2 / 3)
    assert stats.predicted_ratio(0.36, 1.0, 0.48, 1.0) == pytest.approx(0.75)
    assert stats.predicted_ratio(0.4, 1.0, 0.0, 1.0) is None


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


def _run(seed, evals, groups=8, zv=4, size=8, skipped=0, start=0):
    steps = [{"rollout_tokens_total": 100 * (i + 1), "tokens": 100, "groups": groups, "groups_kept": groups,
              "zero_variance_all_pass": 0, "zero_variance_all_fail": zv, "prompts_skipped": skipped,
              "group_size": size, "informative_token_share": 1 - zv / groups, "adv_abs_token_mean": 0.5,
              "updated": 1.0} for i in range(2)]
    return {"start": start, "seed": seed, "evals": [{"tokens": t, "reward": r, "se": 0.01, "by_group": {"a": r}} for t, r in evals],
            "steps": steps, "time_s": 1.0, "eval_time_s": 0.5}


def test_summarize_on_hand_made_runs():
    eval0 = {"reward": 0.2, "se": 0.01, "by_group": {"a": 0.2}}
    runs = {"grpo": [_run(0, [(100, 0.4), (200, 0.6)]), _run(1, [(100, 0.4), (200, 0.6)])],
            "ours": [_run(0, [(100, 0.6), (200, 0.6)], zv=0, skipped=8),
                     _run(1, [(100, 0.6), (200, 0.6)], zv=0, skipped=8)]}
    s = summarize(runs, {0: eval0}, [0, 100, 200], n_boot=100)
    assert s["target"] == pytest.approx(0.4)                     # half grpo's gain 0.2 -> 0.6
    assert s["target_gain"] == pytest.approx(0.2)
    assert s["methods"]["grpo"]["to_target"] == (pytest.approx(100), True)
    assert s["methods"]["ours"]["to_target"] == (pytest.approx(50), True)
    assert s["methods"]["ours"]["vs_grpo"]["ratio"] == pytest.approx(0.5)
    assert s["methods"]["ours"]["vs_grpo"]["final_delta"]["delta"] == pytest.approx(0.0)
    assert s["z_grpo"] == pytest.approx(0.5) and s["bound_ratio"] == pytest.approx(0.5)
    assert s["methods"]["ours"]["zero_variance"] == 0 and s["methods"]["ours"]["skipped"] == pytest.approx(0.5)
    # informative shares 0.5 (grpo) and 1.0 (ours): the shares alone predict half the tokens
    assert s["methods"]["ours"]["vs_grpo"]["informative_bound"] == pytest.approx(0.5)
    assert s["methods"]["ours"]["vs_grpo"]["predicted"] == pytest.approx(0.5)       # same steps per token


def test_summarize_reads_each_start_from_its_own_sft_reward():
    # two starts 0.1 apart; on each, grpo gains 0.2 by 200 tokens and ours gets there twice as fast on start 0
    # and as fast on start 1: the target is a gain (+0.1), not a reward, so neither start is favoured
    eval0s = {0: {"reward": 0.2, "se": 0.01, "by_group": {"a": 0.2}},
              1: {"reward": 0.3, "se": 0.01, "by_group": {"a": 0.3}}}
    runs = {"grpo": [_run(s, [(100, b + 0.1), (200, b + 0.2)], start=a)
                     for a, b in ((0, 0.2), (1, 0.3)) for s in (0, 1)],
            "ours": [_run(s, [(100, b + (0.2 if a == 0 else 0.1)), (200, b + 0.2)], start=a)
                     for a, b in ((0, 0.2), (1, 0.3)) for s in (0, 1)]}
    s = summarize(runs, eval0s, [0, 100, 200], n_boot=500)
    assert s["reward_sft"] == pytest.approx(0.25) and s["target_gain"] == pytest.approx(0.1)
    assert s["methods"]["grpo"]["final"][0] == pytest.approx(0.45) and s["methods"]["grpo"]["final_gain"] == pytest.approx(0.2)
    assert s["methods"]["grpo"]["to_target"] == (pytest.approx(100), True)
    assert s["methods"]["ours"]["to_target"] == (pytest.approx(200 / 3), True)   # mean gain 0.15 at 100
    ps = s["per_start"]
    assert ps[0]["methods"]["ours"]["vs_grpo"]["ratio"] == pytest.approx(0.5)
    assert ps[1]["methods"]["ours"]["vs_grpo"]["ratio"] == pytest.approx(1.0)
    v = s["methods"]["ours"]["vs_grpo"]
    assert v["ci_low"] == pytest.approx(0.5) and v["ci_high"] == pytest.approx(1.0)   # the starts disagree
    assert s["methods"]["ours"]["units"] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert s["gain_over_se"] == pytest.approx(20.0)
    assert s["se_gain"] == pytest.approx(0, abs=1e-12) and s["gain_over_se_milestone"] is None   # every grpo run gained exactly 0.2


def test_ours_is_the_reasoning_rl_stage_as_shipped(tmp_path: Path):
    import yaml
    from compass.bench.learning_efficiency.methods import methods, uses_grades
    from compass.dag.pipeline_yaml import EMBEDDED_DEFAULT
    stage = yaml.safe_load(EMBEDDED_DEFAULT.read_text())["reasoning_rl"]
    table = methods()
    assert table["ours"]["advantage"] == stage["advantage"] and table["ours"]["loss"] == stage["loss"]
    assert table["ours"]["sampling"] == {k: v for k, v in stage["sampling"].items()
                                         if k in ("prefilter", "auto_group_size", "dynamic")}
    assert table["ours+espo+zvp"]["loss"] == {"kind": "espo"} and table["ours+espo+zvp"]["advantage"]["kind"] == "rl_zvp"
    assert "prefilter" not in table["ours-no-prefilter"]["sampling"]
    assert "auto_group_size" not in table["ours-no-autoN"]["sampling"]
    assert uses_grades(table["ours"]) and not uses_grades(table["greso"]) and not uses_grades(table["grpo"])
    assert table["grpo-n4"]["sampling"] == {"group_size": 4} and not uses_grades(table["grpo-n4"])
    # another config's stage is what gets measured
    cfg = tmp_path / "p.yaml"
    cfg.write_text(yaml.safe_dump({"reasoning_rl": {"advantage": {"kind": "rl_zvp"}, "loss": {"kind": "espo"},
                                                    "sampling": {"prompts_per_step": 4, "dynamic": True}}}))
    ours = methods(cfg)["ours"]
    assert ours == {"advantage": {"kind": "rl_zvp"}, "loss": {"kind": "espo"}, "sampling": {"dynamic": True}}
    cfg.write_text("sft: {}\n")
    with pytest.raises(ValueError, match="no 'reasoning_rl' section"):
        methods(cfg)


def test_regime_milestones_and_overrides():
    r = REGIMES["paper"].with_overrides({"budget": "1000", "milestones": "4", "tiers": "1,5", "spacing": "1.5"})
    assert r.milestone_tokens() == (0, 125, 354, 650, 1000)
    assert r.tiers == (1, 5) and r.rl_settings()["budget"] == 1000
    assert r.tier_weights is None                                   # new tiers: equal shares
    assert REGIMES["paper"].with_overrides({"tiers": "2,5", "tier_weights": "1,3"}).tier_weights == (1.0, 3.0)
    with pytest.raises(ValueError, match="one weight per tier"):
        REGIMES["paper"].with_overrides({"tier_weights": "1,2"})
    with pytest.raises(ValueError, match="cannot set"):
        REGIMES["paper"].with_overrides({"nonsense": "1"})


def test_learning_efficiency_quick_run(tmp_path: Path, capsys):
    from tests.helpers import bench_here
    out, _ = bench_here("learning-efficiency", ["--quick", "--jobs", "1", "--cache", str(tmp_path / "cache"),
                                                "--out", str(tmp_path / "out")], capsys)
    assert out["bench"] == "learning-efficiency" and out["regime"] == "paper"
    assert out["starts"] == 2 and out["seeds"] == 1
    assert set(out["final"]) == {"grpo", "dapo", "greso", "ours", "ours-no-prefilter", "ours-no-autoN",
                                 "ours+espo", "ours+zvp", "ours+espo+zvp", "grpo-n4"}
    for key in ("tokens_ratio_vs_grpo", "tokens_ratio_vs_grpo_ci_high", "tokens_ratio_vs_dapo",
                "final_reward_delta_vs_grpo", "residual_zero_variance", "z_grpo", "tokens_ratio_vs_grpo_ours+espo",
                "tokens_ratio_vs_grpo_ours+espo+zvp_ci", "informative_bound_vs_grpo", "predicted_ratio_vs_grpo", "tokens_ratio_vs_grpo_per_start",
                "gain_over_se_milestone", "gain_over_se_eval", "lowz"):
        assert key in out
    assert set(out["tokens_ratio_vs_grpo_per_start"]) == {"0", "1"}
    assert "z_grpo" in out["lowz"] and "tokens_ratio_vs_grpo" in out["lowz"]
    for name in ("curves_paper.png", "fig3_paper.png", "runs_paper.json", "curves_lowz.png", "fig3_lowz.png"):
        assert (tmp_path / "out" / name).exists(), name
