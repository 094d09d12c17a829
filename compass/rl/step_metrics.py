"""The per-step metrics row (one line of ``metrics.jsonl``) and the measurements that feed it.

Every function here is pure: tensors and counts in, python numbers out.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from compass.gym.reasons import is_verifier_fault
from compass.rl.algos.advantages import completion_advantages, zero_variance_groups
from compass.rl.trainer.batch import TrainBatch, routes_batch
from compass.rl.algos.losses import masked_mean

# the phases a step times, in order; each becomes ``time_<phase>_s``
PHASES = ("rollout", "reward", "old_logp", "update", "sync")


@dataclass
class StepCounts:
    """What a step's rollout rounds generated, dropped groups included (DAPO's rounds are all paid for).
    Filled round by round by the engine; :func:`step_row` turns it into the metrics row."""
    group_size: int
    rounds: int = 0
    prompts_skipped: int = 0               # skipped before rollout (predicted zero-variance): no tokens spent
    groups_generated: int = 0
    samples_generated: int = 0
    tokens_generated: int = 0
    reward_failures: int = 0
    zero_variance: int = 0                 # groups whose rewards are all equal
    all_pass: int = 0
    all_fail: int = 0
    tokens_all_pass: int = 0               # generated tokens in all-pass / all-fail groups: the waste in tokens
    tokens_all_fail: int = 0
    reasons: dict[str, int] = field(default_factory=dict)     # reward reason code -> samples
    all_fail_verifier_fault: int = 0
    verifier_fault_samples: int = 0
    reward_tail_s: float = 0.0
    draft_tokens: int = 0
    # the rollout system's split (paper §3.1.1), when a prediction or a Ray pool's schedule was made
    length_pred_mae_tokens: float | None = None
    length_pred_rel_error: float | None = None
    rollout_makespan_s: float | None = None
    rollout_idle_share: float | None = None
    rollout_idle_share_max: float | None = None
    rollout_resent_samples: int | None = None

    def add_round(self, rewards: torch.Tensor, lengths: list[list[int]], reasons: list[list], failures: int,
                  pass_threshold: float) -> None:
        """One round's ``[G, N]`` rewards, ``[G][N]`` completion lengths and reason codes."""
        self.rounds += 1
        self.reward_failures += failures
        self.groups_generated += int(rewards.size(0))
        self.samples_generated += int(rewards.numel())
        self.tokens_generated += sum(sum(g) for g in lengths)
        stats = group_stats(rewards, pass_threshold)
        self.zero_variance += stats["zero_variance"]
        self.all_pass += stats["all_pass"]
        self.all_fail += stats["all_fail"]
        audit = reward_audit(rewards, reasons, pass_threshold)
        for code, k in audit["reasons"].items():
            self.reasons[code] = self.reasons.get(code, 0) + k
        self.all_fail_verifier_fault += audit["all_fail_verifier_fault"]
        self.verifier_fault_samples += audit["verifier_fault_samples"]
        waste = zero_variance_tokens(rewards, lengths, pass_threshold)
        self.tokens_all_pass += waste["tokens_all_pass"]
        self.tokens_all_fail += waste["tokens_all_fail"]

    def add_schedule(self, schedule: dict) -> None:
        """A Ray pool's plan of a round: the first round's balance, every round's re-sent samples."""
        if self.rollout_makespan_s is None:
            self.rollout_makespan_s = schedule["makespan_s"]
            self.rollout_idle_share = schedule["idle_share"]
            self.rollout_idle_share_max = max(schedule["idle_share_per_worker"], default=0.0)
        self.rollout_resent_samples = (self.rollout_resent_samples or 0) + schedule["resent_samples"]

    def add_prediction_error(self, error: dict) -> None:
        """The first round's length-prediction error (:func:`compass.rl.sampling.length_predict.prediction_error`)."""
        if self.length_pred_mae_tokens is None:
            self.length_pred_mae_tokens = error["length_pred_mae_tokens"]
            self.length_pred_rel_error = error["length_pred_rel_error"]


def group_stats(rewards: torch.Tensor, pass_threshold: float) -> dict[str, int]:
    """Counts over ``[G, N]`` rewards: groups, zero-variance groups, and their split.

    A zero-variance group is *all-pass* when its (common) reward is above
    ``pass_threshold``, else *all-fail*; so ``zero_variance == all_pass + all_fail``.
    """
    zv = zero_variance_groups(rewards)
    passed = rewards[:, 0] > pass_threshold
    return {"groups": int(rewards.size(0)), "zero_variance": int(zv.sum()),
            "all_pass": int((zv & passed).sum()), "all_fail": int((zv & ~passed).sum())}


def zero_variance_tokens(rewards: torch.Tensor, lengths: list[list[int]], pass_threshold: float) -> dict[str, int]:
    """Generated tokens in all-pass and all-fail zero-variance groups, from ``[G, N]`` rewards and ``[G][N]``
    completion lengths: the waste counted in tokens, not only in groups."""
    if rewards.numel() == 0:
        return {"tokens_all_pass": 0, "tokens_all_fail": 0}
    zv = zero_variance_groups(rewards)
    passed = rewards[:, 0] > pass_threshold
    per_group = [sum(x) for x in lengths]
    return {"tokens_all_pass": sum(t for t, z, ok in zip(per_group, zv.tolist(), passed.tolist()) if z and ok),
            "tokens_all_fail": sum(t for t, z, ok in zip(per_group, zv.tolist(), passed.tolist()) if z and not ok)}


def reward_audit(rewards: torch.Tensor, reasons: list[list], pass_threshold: float) -> dict:
    """Why the rewards of ``[G, N]`` groups are what they are, from the verifiers' reason codes ``[G][N]``
    (``compass.gym.reasons``; None where a verifier gave none).

    ``reasons``: code -> samples; ``verifier_fault_samples``: samples whose reward says nothing about
    the answer (the data or the verifier failed); ``all_fail_verifier_fault``: all-fail groups in which
    every sample is such a fault, i.e. zero-variance because of the verifier, not because the answers
    were wrong (the paper's point that a wrong reward wastes the whole group).
    """
    counts: dict[str, int] = {}
    faults = torch.zeros(rewards.shape, dtype=torch.bool)
    for gi, row in enumerate(reasons):
        for si, code in enumerate(row):
            if code is not None:
                counts[code] = counts.get(code, 0) + 1
                faults[gi, si] = is_verifier_fault(code)
    if rewards.numel() == 0:
        return {"reasons": counts, "verifier_fault_samples": 0, "all_fail_verifier_fault": 0}
    all_fail = zero_variance_groups(rewards) & (rewards[:, 0] <= pass_threshold)
    return {"reasons": counts, "verifier_fault_samples": int(faults.sum()),
            "all_fail_verifier_fault": int((all_fail & faults.all(dim=1)).sum())}


def logprob_gap(trainer_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Train–inference mismatch: |trainer log p - rollout log p| over every completion token.

    ``trainer_logp``, ``rollout_logp`` (``TrainBatch.rollout_logp``) and ``mask``: ``[B, L-1]``
    (position ``t`` scores token ``t+1``). Returns mean, p99 and max.
    """
    gaps = (trainer_logp - rollout_logp).abs()[mask.bool()]
    if gaps.numel() == 0:
        return {"logp_gap_mean": 0.0, "logp_gap_p99": 0.0, "logp_gap_max": 0.0}
    return {"logp_gap_mean": float(gaps.mean()), "logp_gap_p99": float(torch.quantile(gaps.double(), 0.99)),
            "logp_gap_max": float(gaps.max())}


def routing_metrics(batch: TrainBatch, free_routes: torch.Tensor | None) -> dict[str, float]:
    """Agreement between the rollout's routes and the trainer's free routes ``[B, L, layers, k]`` on
    completion tokens; nothing when either side has no routes."""
    completions = batch.completions
    if free_routes is None or not completions or any(c.routes is None for c in completions):
        return {}
    from compass.rl.router_replay import routing_agreement
    width = free_routes.shape[1]
    rollout_routes = (batch.routes if batch.routes is not None and batch.routes.shape[1] == width
                      else routes_batch(batch.prefixes, completions, width))
    completion = batch.tensors["completion_mask"]
    valid = torch.zeros(rollout_routes.shape[:2], dtype=torch.bool)
    n = min(width, completion.shape[1])
    valid[:, :n] = completion[:, :n]
    return {"routing_agreement": float(routing_agreement(rollout_routes, free_routes.long(), valid))}


def advantage_metrics(advantages: torch.Tensor, mask: torch.Tensor, token_level: bool,
                      per_completion: torch.Tensor | None = None) -> dict[str, float]:
    """``adv_abs_token_mean``: mean |A| over completion tokens; ``adv_abs_mean``: mean |A| over the
    estimator's own units, completions for a sequence-level one and every cell of ``[B, T]`` for a
    token-level one (the definition the metric has always had). ``advantages``, ``mask``: ``[B, T]``."""
    if token_level:
        per_unit = advantages
    else:
        per_unit = per_completion if per_completion is not None else completion_advantages(advantages, mask)
    return {"adv_abs_mean": float(per_unit.abs().mean()),
            "adv_abs_token_mean": float(masked_mean(advantages.abs(), mask))}


def mean_over_mini_batches(ups: list[dict[str, float]]) -> dict[str, float]:
    """The trainer's per-update metrics averaged over a step's mini-batches; ``updated`` 1 if any stepped."""
    out = {name: sum(u[name] for u in ups) / len(ups) for name in ups[0]}
    out["updated"] = float(any(u["updated"] for u in ups))
    return out


def step_row(step: int, *, measured: dict, update: dict[str, float], counts: StepCounts,
             kept_rewards: torch.Tensor, groups_kept: int, timing: dict[str, float], step_s: float,
             pass_threshold: float, lr: float, rollout_tokens_total: int, prompts_retired: int) -> dict:
    """One ``metrics.jsonl`` row.

    ``measured``: what the phases measured (log-prob gaps, routing, advantages, update sizes);
    ``update``: :func:`mean_over_mini_batches` (``{"updated": 0.0}`` without an update; its
    ``adv_abs_token_mean`` is left out: ``measured`` has it over the whole batch);
    ``counts``: over everything generated this step (dropped groups included);
    ``kept_rewards`` ``[G, N]``: the groups that reached the update.
    """
    c = counts
    gen = max(c.groups_generated, 1)
    r = kept_rewards if kept_rewards.numel() else torch.zeros(1)
    tokens, samples = c.tokens_generated, c.samples_generated
    optional = ("length_pred_mae_tokens", "length_pred_rel_error", "rollout_makespan_s", "rollout_idle_share",
                "rollout_idle_share_max", "rollout_resent_samples")
    return {
        "step": step, **measured,
        **{k: v for k, v in update.items() if k != "adv_abs_token_mean"},
        "groups": c.groups_generated, "samples": samples,
        "groups_kept": groups_kept, "sampling_rounds": c.rounds,
        "reward_mean": float(r.mean()), "reward_std": float(r.std()) if r.numel() > 1 else 0.0,
        "pass_rate": float((r > pass_threshold).float().mean()),
        "reward_failures": c.reward_failures,
        "reward_errors_by_reason": dict(sorted(c.reasons.items())),
        "reward_verifier_fault_samples": c.verifier_fault_samples,
        "zero_variance_all_fail_verifier_fault": c.all_fail_verifier_fault,
        "zero_variance_rate": c.zero_variance / gen,
        "zero_variance_all_pass": c.all_pass, "zero_variance_all_fail": c.all_fail,
        "zero_variance_all_pass_rate": c.all_pass / gen,
        "zero_variance_all_fail_rate": c.all_fail / gen,
        # the same waste in tokens, and what is left: tokens of groups with reward spread per generated token
        "zero_variance_token_share_all_pass": c.tokens_all_pass / max(tokens, 1),
        "zero_variance_token_share_all_fail": c.tokens_all_fail / max(tokens, 1),
        "informative_token_share": (1.0 - (c.tokens_all_pass + c.tokens_all_fail) / tokens) if tokens else 0.0,
        "group_size": c.group_size, "prompts_skipped": c.prompts_skipped,
        "tokens": tokens, "rollout_tokens_total": rollout_tokens_total,
        "response_len_mean": tokens / max(samples, 1),
        "tokens_per_s": tokens / step_s if step_s > 0 else 0.0,
        "samples_per_s": samples / step_s if step_s > 0 else 0.0,
        "lr": lr, "prompts_retired": prompts_retired,
        # the rollout system (paper §3): reward time nothing hid, the split's balance and its prediction
        "reward_tail_s": c.reward_tail_s, "draft_tokens": c.draft_tokens,
        **{k: getattr(c, k) for k in optional if getattr(c, k) is not None},
        **{f"time_{k}_s": v for k, v in timing.items()}, "time_train_s": timing["old_logp"] + timing["update"],
        "time_step_s": step_s,
    }
