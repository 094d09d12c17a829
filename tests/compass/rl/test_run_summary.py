"""The RL run's markdown summary: headline numbers recomputed by hand from the metrics rows."""
from __future__ import annotations

from compass.rl.run_summary import MAX_ROWS, run_summary_md
from tests.helpers import gfm_table_problems


def _row(step, tokens, zp, zf, n=4):
    return {"step": step, "tokens": tokens, "groups": 8, "group_size": n, "prompts_skipped": 1,
            "reward_mean": 0.25, "zero_variance_rate": 0.5, "zero_variance_all_pass_rate": 0.25,
            "zero_variance_all_fail_rate": 0.25, "zero_variance_token_share_all_pass": zp,
            "zero_variance_token_share_all_fail": zf, "adv_abs_token_mean": 0.4}


def test_headline_and_at_most_max_rows_steps():
    rows = [_row(i, 100 if i % 2 else 300, 0.1, 0.2, n=4 if i < 10 else 8) for i in range(30)]
    md = run_summary_md("reasoning_rl", rows, {"reward_mean_first": 0.1, "reward_mean_last": None,
                                              "zero_variance_rate": 0.5})
    tokens = 15 * 100 + 15 * 300
    assert f"30 steps, {tokens:,} rollout tokens" in md and "0.100 → —" in md
    assert "50% of 240 groups, 30% of rollout tokens; 30 prompt draw(s) skipped" in md and "N 4, 8" in md
    table = [ln for ln in md.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    assert len(table) == MAX_ROWS and table[0].startswith("| 0 |") and table[-1].startswith("| 29 |")
    assert gfm_table_problems(md) == []          # a header cell "|A|" made the Prefect UI show raw "|" text


def test_the_table_checker_sees_a_pipe_inside_a_cell():
    assert gfm_table_problems("| a | |A| |\n|---|---|\n| 1 | 2 |\n") == ["4 cells, not 2: | a | |A| |"]
    assert gfm_table_problems("| a | \\|A\\| |\n|---|---|\n| 1 | 2 |\n") == []


def test_no_step():
    assert "No step ran." in run_summary_md("x", [], {})
