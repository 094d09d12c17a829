"""What both RL stages do around the engine: load the policy, train, write the three outputs.

Outputs (slots of both RL stages):
- ``checkpoint``: HF folder (``save_checkpoint``) plus ``metrics.jsonl`` (one JSON
  object per step) and ``compass.json``; run summary in the manifest's ``extra``.
- ``prompt_stats``: one row per prompt measured in this run.
- ``rollouts``: one row per sampled completion.
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Sequence

import torch

from compass.lm.model_factory import load_checkpoint, save_checkpoint
from compass.runtime.stage_state import state_dir_for
from compass.store.store import Artifact, ArtifactWriter
from compass.rl.config import RLConfig
from compass.rl.sampling.prompt_data import RLPrompt, filter_by_pass_rate
from compass.rl.engine import RLResult, ScoreFn, rollouts_table, train
from compass.rl.run_summary import PLOTS, run_summary_md


def run_rl(cfg: RLConfig, policy: Artifact, prompts: Sequence[RLPrompt], outputs: dict[str, ArtifactWriter], *,
           log: logging.Logger, desc: str, extra: dict | None = None,
           score_fn: ScoreFn | None = None) -> RLResult:
    """Train ``policy`` on ``prompts`` with ``cfg`` and fill ``outputs`` (checkpoint, prompt_stats, rollouts).

    ``extra`` (stage-specific facts, e.g. carryover counts) goes into every
    output's manifest ``extra`` beside the run summary.
    """
    if not prompts:
        raise ValueError(f"{desc}: no prompts to train on")
    extra = dict(extra or {})
    if cfg.sampling.pass_rate_filter is not None:
        lo, hi = cfg.sampling.pass_rate_filter
        prompts, dropped = filter_by_pass_rate(prompts, lo, hi)
        extra.update(dropped)
        log.info("%s: zero-variance elimination before rollout dropped %s", desc, dropped)
        if not prompts:
            raise ValueError(f"{desc}: sampling.pass_rate_filter {cfg.sampling.pass_rate_filter} left no prompt to "
                             "train on")
    model, tok = load_checkpoint(policy.local_dir(), dtype=torch.float32)
    ckpt = outputs["checkpoint"]
    if cfg.sampling.pool is not None:
        prompts = _pool(cfg, model, tok, prompts, score_fn, extra, ckpt, log=log, desc=desc)
    log.info("%s: %d prompts, %d steps x %d prompts x %d samples from %s", desc, len(prompts), cfg.steps,
             min(cfg.sampling.prompts_per_step, len(prompts)), cfg.sampling.group_size, policy.uri)
    # what the phase trains on, by domain: the recipe bench measures each phase's gain on these suites
    extra["pool_domains"] = dict(sorted(Counter(p.domain or "?" for p in prompts).items()))
    # the run's state dir (compass.runtime.stage_state): a re-run of this version after a kill resumes from it,
    # and the runner removes it once the outputs are committed
    state_dir = state_dir_for(ckpt) if cfg.checkpoint_every else None
    # metrics.jsonl, tensorboard/ and plots/ go beside the checkpoint
    result = train(model, tok, prompts, cfg, score_fn=score_fn, log=log, desc=desc, out_dir=ckpt.dir,
                   state_dir=state_dir)
    if hasattr(score_fn, "counters"):                 # a judge's audit (compass.rl.genrm_reward)
        extra.update(score_fn.counters())
    summary = {**result.summary(), **extra, "policy": policy.uri}
    save_checkpoint(model, tok, ckpt.dir, meta={"stage": desc, **summary})
    outputs["prompt_stats"].write_table(result.prompt_stats.table())
    plots = [f"plots/{p}.png" for p in PLOTS if (ckpt.dir / "plots" / f"{p}.png").exists()]
    ckpt.path("summary.md").write_text(run_summary_md(desc, result.metrics, summary, plots))   # for the Prefect UI
    outputs["rollouts"].write_table(rollouts_table(result.rollouts))
    for w in outputs.values():
        w.extra.update(summary)
    log.info("%s: reward %.3f -> %.3f, zero-variance rate %.2f, %d tokens in %.1fs", desc,
             summary["reward_mean_first"], summary["reward_mean_last"], summary["zero_variance_rate"],
             summary["tokens"], summary["time_s"])
    reasons = summary["reward_errors_by_reason"]
    log.info("%s: reward audit: %.1f%% of all-fail groups were the verifier's doing; reasons given: %s", desc,
             100 * summary["all_fail_verifier_fault_share"],
             ", ".join(f"{k} {v}" for k, v in list(reasons.items())[:10]) or "none")
    return result


def _pool(cfg: RLConfig, model, tok, prompts: Sequence[RLPrompt], score_fn, extra: dict, ckpt: ArtifactWriter, *,
          log: logging.Logger, desc: str) -> list[RLPrompt]:
    """``sampling.pool``: the prompts graded by the starting policy and selected (compass.rl.sampling.pool); the
    per-prompt grades go beside the checkpoint (``pool.parquet``), the counts into ``extra``."""
    import pyarrow.parquet as pq
    from compass.gym.score import judge
    from compass.rl.sampling.pool import build_pool
    pc = cfg.sampling.pool
    kept, table, rep = build_pool(model, tok, prompts, pc, rollout_backend=cfg.rollout.backend.kind,
                                  temperature=cfg.rollout.temperature, max_new_tokens=cfg.rollout.max_new_tokens,
                                  pass_threshold=cfg.reward.pass_threshold, score_fn=score_fn or judge,
                                  seed=cfg.seed * 1_000_003 + 17)
    pq.write_table(table, ckpt.path("pool.parquet"))
    extra.update(rep)
    log.info("%s: pool graded by the starting policy: %d of %d prompts x %d samples (%d tokens, %.0fs): "
             "%.0f%% all-pass, %.0f%% all-fail; dropped %d always solved, %d never solved; kept %d (mean pass "
             "rate %s)", desc, rep["pool_graded"], len(prompts), pc.k, rep["pool_tokens"], rep["pool_grading_s"],
             100 * (rep["pool_all_pass_share"] or 0), 100 * (rep["pool_all_fail_share"] or 0),
             rep["pool_dropped_always_solved"], rep["pool_dropped_never_solved"], rep["pool_kept"],
             "-" if rep["pool_kept_mean_pass_rate"] is None else f"{rep['pool_kept_mean_pass_rate']:.2f}")
    if not kept:
        raise ValueError(f"{desc}: sampling.pool kept no prompt: all {rep['pool_graded']} graded were dropped "
                         f"({rep['pool_dropped_always_solved']} always solved, {rep['pool_dropped_never_solved']} "
                         "never solved); raise pool.candidates or turn a drop off")
    return kept
