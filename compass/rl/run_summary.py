"""An RL run in markdown (the stage's ``summary.md``, shown by orchestrators such as the Prefect UI).

The headline (reward first → last, zero-variance share by groups and by tokens, skipped prompts, N) and
the curves as a table of at most ``MAX_ROWS`` evenly spaced steps, from the engine's metrics rows.
"""
from __future__ import annotations

from typing import Sequence

MAX_ROWS = 12


def _f(x, fmt: str = ".3f") -> str:
    return "—" if x is None else format(x, fmt)


def _pick(rows: Sequence[dict], k: int) -> list[dict]:
    if len(rows) <= k:
        return list(rows)
    idx = sorted({round(i * (len(rows) - 1) / (k - 1)) for i in range(k)})
    return [rows[i] for i in idx]


def zero_variance_tokens(metrics: Sequence[dict]) -> tuple[float, int]:
    """(rollout tokens in zero-variance groups, all rollout tokens) over per-step metrics rows."""
    zv = sum((m["zero_variance_token_share_all_pass"] + m["zero_variance_token_share_all_fail"]) * m["tokens"]
             for m in metrics)
    return zv, sum(m["tokens"] for m in metrics)


def _pool_lines(summary: dict) -> list[str]:
    """The pool graded before RL (``sampling.pool``: compass.rl.sampling.pool), when there was one."""
    if not summary.get("pool_graded"):
        return []
    by = ", ".join(f"{d} {n}" for d, n in (summary.get("pool_kept_by_domain") or {}).items())
    return [f"Pool: {summary['pool_graded']} prompts graded by the starting policy, {summary['pool_k']} samples each "
            f"({summary['pool_tokens']:,} tokens, {summary['pool_grading_s']:.0f} s, not in the rollout tokens "
            f"above): {_f(summary['pool_all_pass_share'], '.0%')} all-pass, "
            f"{_f(summary['pool_all_fail_share'], '.0%')} all-fail; dropped {summary['pool_dropped_always_solved']} "
            f"always solved and {summary['pool_dropped_never_solved']} never solved; trained on "
            f"{summary['pool_kept']} (mean pass rate {_f(summary['pool_kept_mean_pass_rate'], '.2f')}: {by}).", ""]


PLOTS = ("reward", "zero_variance")      # compass.rl.metrics_log's plots shown in the summary, when drawn


def run_summary_md(desc: str, metrics: Sequence[dict], summary: dict, plots: Sequence[str] = ()) -> str:
    """Markdown of one RL run: ``metrics`` one row per step, ``summary`` the run's (``RLResult.summary``);
    ``plots``: PNG paths relative to the summary's artifact, shown after the table."""
    lines = [f"## {desc}: the run", ""]
    if not metrics:
        return "\n".join(lines + ["No step ran."]) + "\n"
    zv_tokens, tokens = zero_variance_tokens(metrics)
    groups = sum(m["groups"] for m in metrics)
    skipped = sum(m.get("prompts_skipped", 0) for m in metrics)
    lines += [f"{len(metrics)} steps, {tokens:,} rollout tokens. Training reward {_f(summary['reward_mean_first'])} "
              f"→ {_f(summary['reward_mean_last'])} (first → last step; held-out results are the evaluation "
              f"stage's).", "",
              f"Zero variance: {_f(summary['zero_variance_rate'], '.0%')} of {groups} groups (all-pass "
              f"{_f(summary.get('zero_variance_all_pass_rate'), '.0%')}, all-fail "
              f"{_f(summary.get('zero_variance_all_fail_rate'), '.0%')}), "
              f"{zv_tokens / max(tokens, 1):.0%} of rollout tokens; {skipped} prompt draw(s) skipped before "
              f"rollout; group size N {', '.join(str(n) for n in sorted({m['group_size'] for m in metrics}))}.", "",
              *_pool_lines(summary),
              "| step | reward | zero-var groups (all-pass / all-fail) | zero-var tokens | N | skipped | mean abs(A) per token |",
              "|---:|---:|---|---:|---:|---:|---:|"]
    for m in _pick(metrics, MAX_ROWS):
        zt = m["zero_variance_token_share_all_pass"] + m["zero_variance_token_share_all_fail"]
        lines.append(f"| {m['step']} | {_f(m['reward_mean'])} | {_f(m['zero_variance_rate'], '.2f')} "
                     f"({_f(m['zero_variance_all_pass_rate'], '.2f')} / {_f(m['zero_variance_all_fail_rate'], '.2f')}) "
                     f"| {zt:.2f} | {m['group_size']} | {m.get('prompts_skipped', 0)} | "
                     f"{_f(m.get('adv_abs_token_mean'))} |")
    for p in plots:
        lines += ["", f"![{p}]({p})"]
    return "\n".join(lines) + "\n"
