"""GenRM-judged evaluation suites (paper §2.5.2: open-ended tasks are judged by the learned judge).

Samples of a prompt whose verifier is open-ended (``is_judged``: the world's ``title_rules``) or the judge
itself (``genrm``) are judged by the run's GenRM checkpoint against the prompt's reference, in both orders
(the policy's answer as Response A, then as B). Each sample gets:

- ``score`` / ``correct``: 1 when both orders say better-or-equal (``compass.gym.genrm_judge``), else 0;
- ``verdict``: ``win`` / ``tie`` / ``loss`` against the reference (the two orders' verdicts added, A +1,
  TIE 0, B -1: two that disagree are a tie), or ``malformed`` when either is not well formed;
- ``consistent``: whether the two orders gave the same verdict (position bias, measured);
- ``rule_score``: what the rules verifier said, kept to show how often judge and rules agree.
"""
from __future__ import annotations

from collections import defaultdict

from compass.gym.genrm_judge import GenRMJudge, outcome
from compass.gym.score import is_judged, needs_judge

PASS = 0.5        # a rules score above it is a pass, as the RL engine's pass threshold


def judged_rows(rows: list[dict]) -> set[str]:
    """Ids of the prompts whose samples the GenRM judges."""
    return {r["id"] for r in rows if is_judged(r["verifier"]) or needs_judge(r["verifier"])}


def judge_results(judge: GenRMJudge, results: list[dict], prompts: dict[str, dict], ids: set[str]) -> None:
    """Judge, in place, the samples in ``results`` whose prompt id is in ``ids`` (``prompts``: id -> row)."""
    todo = [r for r in results if r["prompt_id"] in ids]
    if not todo:
        return
    got = judge.judge([prompts[r["prompt_id"]]["prompt"] for r in todo], [r["response"] for r in todo],
                      [prompts[r["prompt_id"]]["reference"] for r in todo])
    for r, j in zip(todo, got):
        learned = needs_judge(prompts[r["prompt_id"]]["verifier"])
        r["rule_score"] = None if learned else r["score"]
        r["score"], r["correct"] = j.reward, j.reward >= 1.0
        r["verdict"] = outcome(j) or "malformed"
        r["consistent"] = j.consistent
        r["reason"] = "genrm_malformed" if j.malformed else (None if j.reward else "genrm_worse")


def judged_summary(results: list[dict]) -> dict:
    """Per judged suite: samples, the win / tie / loss / malformed shares, swap consistency (of the
    well-formed pairs) and how often the rules verifier agrees with the judge."""
    by_suite: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        if r.get("verdict") is not None:
            by_suite[r["suite"]].append(r)
    out = {}
    for suite, rs in sorted(by_suite.items()):
        n = len(rs)
        formed = [r for r in rs if r["verdict"] != "malformed"]
        ruled = [r for r in rs if r.get("rule_score") is not None]
        out[suite] = {"samples": n, **{k: sum(r["verdict"] == k for r in rs) / n
                                       for k in ("win", "tie", "loss", "malformed")},
                      "swap_consistency": (sum(bool(r["consistent"]) for r in formed) / len(formed)) if formed else None,
                      "rules_agree": (sum((r["rule_score"] > PASS) == r["correct"] for r in ruled) / len(ruled))
                      if ruled else None}
    return out


def judged_table(by_ckpt: dict[str, dict], labels: dict[str, str]) -> list[str]:
    """Markdown: one row per (checkpoint, judged suite)."""
    def pct(x):
        return "—" if x is None else f"{x:.3f}"
    lines = ["| checkpoint | suite (its judged prompts only) | samples | win | tie | loss | malformed "
             "| swap-consistent | rules agree |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for slot, v in by_ckpt.items():
        for suite, m in v.get("judged", {}).items():
            lines.append(f"| {labels[slot]} | {suite} | {m['samples']} | {pct(m['win'])} | {pct(m['tie'])} | "
                         f"{pct(m['loss'])} | {pct(m['malformed'])} | {pct(m['swap_consistency'])} | "
                         f"{pct(m['rules_agree'])} |")
    return lines if len(lines) > 2 else []
