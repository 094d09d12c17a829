"""The evaluation's scoreboard by hand: every figure ± its standard error over prompts, each change ± its SE
paired by prompt, the mean score beside accuracy, and the mean@k pass in its own tables."""
from __future__ import annotations

from compass.lm.suite_scoring import summarize
from stages.evaluation.config import EvalConfig
from stages.evaluation.stage import checkpoint_table, per_prompt, summary_md
from tests.helpers import gfm_table_problems


def _rows(correct: list[int], scores: list[float] | None = None, samples: int = 1) -> list[dict]:
    scores = scores or [float(c) for c in correct]
    return [{"suite": "math", "prompt_id": f"p{i}", "sample_idx": k, "correct": bool(c), "score": s,
             "num_tokens": 5, "finished": True, "response": "x", "difficulty": None, "reason": None}
            for i, (c, s) in enumerate(zip(correct, scores)) for k in range(samples)]


def _ckpt(rows: list[dict], sampled: list[dict] | None = None) -> dict:
    v = {"uri": "u", **summarize(rows), "k": {}, "per_prompt": per_prompt(rows)}
    if sampled:
        v["sampled"] = {**summarize(sampled), "per_prompt": per_prompt(sampled)}
    return v


def test_each_cell_carries_its_se_and_the_paired_se_of_its_change():
    base = _ckpt(_rows([0, 0, 0, 1]))                 # 0.25; SE sqrt(0.25 * 0.75 / 3) = 0.25
    model = _ckpt(_rows([1, 1, 0, 1]))                # 0.75; SE 0.25
    lines = checkpoint_table({"base": base, "model": model})
    # change: per-prompt differences 1, 1, 0, 0: mean 0.5, sample variance 1/3, SE sqrt(1/3 / 4) = 0.289
    assert lines[2] == "| base | 0.250 ± 0.250 | 0.250 ± 0.250 |"
    assert lines[3] == "| final | 0.750 ± 0.250 (+0.500 ± 0.289) | 0.750 ± 0.250 (+0.500 ± 0.289) |"


def test_mean_score_and_the_sampled_pass_have_their_own_tables():
    base = _ckpt(_rows([0, 0], [0.5, 0.0]), sampled=_rows([0, 1], samples=2))
    model = _ckpt(_rows([1, 0], [1.0, 0.5]), sampled=_rows([1, 1], samples=2))
    by = {"base": base, "model": model}
    assert checkpoint_table(by, "mean_score")[3].startswith("| final | 0.750 ± 0.250 (+0.500 ± 0.000) |")
    assert checkpoint_table(by, "accuracy", "sampled")[3].startswith("| final | 1.000 ± 0.000 (+0.500 ± 0.500) |")
    md = summary_md(by, EvalConfig(sampled={"k": 2, "temperature": 1.0}))
    assert "### Mean score (partial credit" in md and "### mean@2 at temperature 1.0" in md
    assert "one standard error over prompts" in md and gfm_table_problems(md) == []
    assert "mean@" not in summary_md(by, EvalConfig()).replace("pass@k, mean@k", "")   # only when configured
