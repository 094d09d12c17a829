"""compass bench recipe: its headline figures from an evaluation summary and RL metrics, by hand."""
from __future__ import annotations

import json

import pytest

from compass.bench.recipe import figures, zero_variance_tokens

THINK, DOMAIN = ["math", "code"], ["ecommerce"]


def _ck(**acc):
    return {"accuracy": acc}


def test_figures_by_hand():
    ck = {"base": _ck(math=0.0, code=0.0, ecommerce=0.25),
          "sft_longcot": _ck(math=0.3, code=0.1, ecommerce=0.2),
          "sft_domain": _ck(math=0.0, code=0.0, ecommerce=0.6),
          "merged": _ck(math=0.25, code=0.1, ecommerce=0.62),
          "phase1": _ck(math=0.45, code=0.15, ecommerce=0.55),
          "model": _ck(math=0.4, code=0.14, ecommerce=0.7)}
    f = figures(ck, THINK, DOMAIN, zv_tokens=300, tokens=1000)
    assert f["sft_longcot_home_gain"] == pytest.approx(0.2)            # (0.3 + 0.1)/2 - 0
    assert f["sft_domain_home_gain"] == pytest.approx(0.35)
    assert f["merge_min_margin"] == pytest.approx(-0.025)              # min(0.175 - 0.2, 0.62 - 0.6)
    assert f["reasoning_rl_gain"] == pytest.approx(0.125)              # 0.3 - 0.175
    assert f["domain_rl_gain"] == pytest.approx(0.15)
    assert f["reasoning_forgetting"] == pytest.approx(0.03)            # 0.3 - 0.27
    assert f["rl_zero_variance_token_share"] == pytest.approx(0.3)


def test_missing_checkpoints_give_none():
    f = figures({"model": _ck(math=0.1)}, THINK, DOMAIN, 0, 0)
    assert f["reasoning_rl_gain"] is None and f["merge_min_margin"] is None
    assert f["rl_zero_variance_token_share"] is None


def test_zero_variance_tokens_from_metrics_files(tmp_path):
    rows = [{"tokens": 100, "zero_variance_token_share_all_pass": 0.2, "zero_variance_token_share_all_fail": 0.3},
            {"tokens": 300, "zero_variance_token_share_all_pass": 0.0, "zero_variance_token_share_all_fail": 0.1}]
    f = tmp_path / "metrics.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert zero_variance_tokens([f, f]) == (2 * (50 + 30), 800)
