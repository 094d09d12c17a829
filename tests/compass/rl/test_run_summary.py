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
    assert "50% of 240 groups (all-pass —, all-fail —), 30% of rollout tokens; 30 prompt draw(s) skipped" in md
    assert "N 4, 8" in md and "Pool:" not in md
    table = [ln for ln in md.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    assert len(table) == MAX_ROWS and table[0].startswith("| 0 |") and table[-1].startswith("| 29 |")
    assert gfm_table_problems(md) == []          # a header cell "|A|" made the Prefect UI show raw "|" text


def test_the_pool_and_the_zero_variance_split_when_the_run_has_them():
    summary = {"reward_mean_first": 0.1, "reward_mean_last": 0.2, "zero_variance_rate": 0.5,
               "zero_variance_all_pass_rate": 0.125, "zero_variance_all_fail_rate": 0.375, "pool_graded": 1024,
               "pool_k": 4, "pool_tokens": 143210, "pool_grading_s": 24.6, "pool_all_pass_share": 0.16,
               "pool_all_fail_share": 0.42, "pool_dropped_always_solved": 164, "pool_dropped_never_solved": 430,
               "pool_kept": 384, "pool_kept_mean_pass_rate": 0.49, "pool_kept_by_domain": {"code": 40, "math": 344}}
    md = run_summary_md("reasoning_rl", [_row(0, 100, 0.1, 0.2)], summary)
    assert "(all-pass 12%, all-fail 38%)" in md
    assert ("Pool: 1024 prompts graded by the starting policy, 4 samples each (143,210 tokens, 25 s, not in the "
            "rollout tokens above): 16% all-pass, 42% all-fail; dropped 164 always solved and 430 never solved; "
            "trained on 384 (mean pass rate 0.49: code 40, math 344).") in md
    assert gfm_table_problems(md) == []


def test_the_table_checker_sees_a_pipe_inside_a_cell():
    assert gfm_table_problems("| a | |A| |\n|---|---|\n| 1 | 2 |\n") == ["4 cells, not 2: | a | |A| |"]
    assert gfm_table_problems("| a | \\|A\\| |\n|---|---|\n| 1 | 2 |\n") == []


def test_no_step():
    assert "No step ran." in run_summary_md("x", [], {})
