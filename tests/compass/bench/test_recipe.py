"""compass bench recipe: its headline figures from an evaluation summary and RL metrics, by hand."""
from __future__ import annotations

import json
import math

import pytest

from compass.bench.recipe import figures, trained_suites, zero_variance_tokens

THINK, DOMAIN = ["math", "code"], ["ecommerce"]


def _rows(decoding="main", **checkpoints) -> list[dict]:
    """eval_results rows: checkpoint -> suite -> one 0/1 per prompt (4 prompts a suite, one sample each)."""
    return [{"checkpoint": ck, "suite": suite, "prompt_id": f"{suite}{i}", "correct": bool(c), "score": float(c),
             "decoding": decoding}
            for ck, suites in checkpoints.items() for suite, cs in suites.items() for i, c in enumerate(cs)]


RUN = dict(base={"math": [0, 0, 0, 0], "code": [0, 0, 0, 0], "ecommerce": [1, 0, 0, 0]},
           sft_longcot={"math": [1, 1, 0, 0], "code": [1, 0, 0, 0], "ecommerce": [0, 0, 0, 0]},
           sft_domain={"math": [0, 0, 0, 0], "code": [0, 0, 0, 0], "ecommerce": [1, 1, 1, 0]},
           merged={"math": [1, 0, 0, 0], "code": [1, 0, 0, 0], "ecommerce": [1, 1, 0, 0]},
           phase1={"math": [1, 1, 1, 0], "code": [1, 1, 0, 0], "ecommerce": [1, 1, 0, 0]},
           model={"math": [1, 1, 0, 0], "code": [1, 1, 0, 0], "ecommerce": [1, 1, 1, 1]})


def test_figures_by_hand():
    f = figures(_rows(**RUN), THINK, DOMAIN, zv_tokens=300, tokens=1000)
    assert f["sft_longcot_home_gain"] == pytest.approx(0.375)          # (0.5 + 0.25)/2 - 0
    # paired per prompt: math differences 1,1,0,0 (SE sqrt(1/12)), code 1,0,0,0 (SE 1/4); suites equal weight
    assert f["sft_longcot_home_gain_se"] == pytest.approx(math.sqrt(1 / 12 + 1 / 16) / 2)
    assert f["sft_domain_home_gain"] == pytest.approx(0.5)
    assert f["merge_min_margin"] == pytest.approx(-0.25)               # min(0.25 - 0.375, 0.5 - 0.75)
    assert f["merge_min_margin_se"] == pytest.approx(0.25)             # the domain margin's: differences 0,0,-1,0
    assert f["reasoning_rl_gain"] == pytest.approx(0.375)              # 0.625 - 0.25
    assert f["domain_rl_gain"] == pytest.approx(0.5)
    assert f["reasoning_forgetting"] == pytest.approx(0.125)           # 0.625 - 0.5
    assert f["rl_zero_variance_token_share"] == pytest.approx(0.3)
    score = figures(_rows(**RUN), THINK, DOMAIN, 300, 1000, measure="mean score")
    assert score["reasoning_rl_gain_score"] == f["reasoning_rl_gain"]  # 0/1 scores here: the same numbers
    assert "rl_zero_variance_token_share" not in score
    assert figures(_rows(**RUN), THINK, DOMAIN, 0, 0, measure="mean@k")["reasoning_rl_gain_mean_at_k"] is None
    sampled = figures(_rows("sampled", **RUN), THINK, DOMAIN, 0, 0, measure="mean@k")
    assert sampled["reasoning_rl_gain_mean_at_k"] == pytest.approx(0.375)


def test_each_rl_phase_measured_on_the_suites_it_trains_and_the_others_beside():
    assert trained_suites({"math": 100, "code": 4, "ecommerce": 6}) == ["ecommerce", "math"]   # >= 5% of 110
    assert trained_suites(None) is None and trained_suites({}) is None
    f = figures(_rows(**RUN), THINK, DOMAIN, 0, 0, phase1=["math"], phase2=["ecommerce", "code"])
    assert f["reasoning_rl_gain"] == pytest.approx(0.5)                # math 0.75 - 0.25
    assert f["reasoning_rl_gain_untrained"] == pytest.approx(0.125)    # code +0.25, e-commerce 0
    assert f["domain_rl_gain"] == pytest.approx(0.25)                  # (e-commerce +0.5, code 0) / 2
    assert f["domain_rl_gain_untrained"] == pytest.approx(-0.25)       # math 0.5 - 0.75
    assert f["reasoning_forgetting"] == pytest.approx(0.25)            # math 0.75 - 0.5


def test_missing_checkpoints_give_none():
    f = figures(_rows(model={"math": [1, 0]}), THINK, DOMAIN, 0, 0)
    assert f["reasoning_rl_gain"] is None and f["merge_min_margin"] is None and f["reasoning_rl_gain_se"] is None
    assert f["rl_zero_variance_token_share"] is None


def test_zero_variance_tokens_from_metrics_files(tmp_path):
    rows = [{"tokens": 100, "zero_variance_token_share_all_pass": 0.2, "zero_variance_token_share_all_fail": 0.3},
            {"tokens": 300, "zero_variance_token_share_all_pass": 0.0, "zero_variance_token_share_all_fail": 0.1}]
    f = tmp_path / "metrics.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert zero_variance_tokens([f, f]) == (2 * (50 + 30), 800)


def test_phase_means_over_the_runs_that_recorded_each_figure():
    from compass.bench.recipe import PHASE_KEYS, phase_means
    runs = [{"reasoning_rl_zv_all_pass": 0.1, "reasoning_rl_zv_all_fail": 0.3, "domain_rl_pool_tokens": 1000},
            {"reasoning_rl_zv_all_pass": 0.2, "reasoning_rl_zv_all_fail": None, "domain_rl_pool_tokens": 3000}]
    out = phase_means(runs)
    assert len(out) == 2 * len(PHASE_KEYS)
    assert out["reasoning_rl_zv_all_pass"] == pytest.approx(0.15) and out["reasoning_rl_zv_all_fail"] == 0.3
    assert out["domain_rl_pool_tokens"] == 2000 and out["domain_rl_zv_all_pass"] is None
