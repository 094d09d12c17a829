"""Difficulty grading: pass rate -> level, rank correlation, and a real (tiny) grading run."""
from __future__ import annotations

import pytest

from stages.data_filter.grading import GradingConfig, grade, level, spearman


def test_level_maps_pass_rate_bands():
    th = GradingConfig().thresholds
    assert [level(p, th) for p in (1.0, 0.8, 0.75, 0.6, 0.5, 0.4, 0.25, 0.2, 0.1, 0.0)] == \
        [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]


def test_spearman_handles_ties_and_constants():
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2, 2], [1, 1, 2, 2]) == pytest.approx(1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) is None


def test_grading_fills_difficulty_and_pass_rate(world_arts):
    prompts = world_arts["raw_prompts"].read_table()
    import pyarrow.compute as pc
    prompts = prompts.filter(pc.not_equal(prompts.column("reference"), "")).slice(0, 10)
    sft = world_arts["raw_sft"].read_table().slice(0, 40)
    cfg = GradingConfig(train_steps=3, k=2, max_prompts=6, max_new_tokens=8, prompts_per_batch=4)
    out, report = grade(cfg, prompts, sft, world_arts["base"].local_dir())
    assert out.num_rows == prompts.num_rows
    assert out.column("difficulty_knob").to_pylist() == prompts.column("difficulty").to_pylist()
    levels, rates = out.column("difficulty").to_pylist(), out.column("pass_rate").to_pylist()
    assert all(1 <= lv <= 5 for lv in levels[:6]) and levels[6:] == [None] * 4
    assert all(r in (0.0, 0.5, 1.0) for r in rates[:6]) and rates[6:] == [None] * 4
    assert [level(r, cfg.thresholds) for r in rates[:6]] == levels[:6]
    assert report["graded"] == 6 and report["grader_trained_steps"] == 3
    assert sum(report["difficulty_levels"].values()) == 6


def test_grading_with_a_named_checkpoint_skips_training(world_arts):
    prompts = world_arts["raw_prompts"].read_table().slice(0, 4)
    cfg = GradingConfig(model=str(world_arts["base"].local_dir()), k=1, max_new_tokens=4)
    out, report = grade(cfg, prompts, prompts.slice(0, 0), None)
    assert report["grader_trained_steps"] == 0 and out.column("pass_rate").null_count == 0


def test_grading_without_a_model_is_a_clear_error(world_arts):
    prompts = world_arts["raw_prompts"].read_table().slice(0, 2)
    with pytest.raises(ValueError, match="grading needs a model"):
        grade(GradingConfig(k=1), prompts, prompts.slice(0, 0), None)
    with pytest.raises(ValueError, match="not a local checkpoint"):
        grade(GradingConfig(model="/nonexistent/ckpt"), prompts, prompts.slice(0, 0), None)


def test_disabled_grading_changes_nothing(world_arts):
    prompts = world_arts["raw_prompts"].read_table().slice(0, 3)
    out, report = grade(GradingConfig(enabled=False), prompts, prompts.slice(0, 0), None)
    assert out.equals(prompts) and report == {"graded": 0}
