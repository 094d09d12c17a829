"""A minimal on-policy GRPO loop on one process (PROVISIONAL engine).

Per step: take ``prompts_per_step`` prompts, sample ``group_size`` completions
each with transformers ``generate`` (:func:`stages.common.lm.sample`), score
them with the Compass-Gym verifier named by each prompt's ``verifier``,
compute advantages with the configured estimator (``ADVANTAGES``), recompute
the completions' log-probs under the current policy and take one AdamW step
on the configured policy loss (``POLICY_LOSSES``).

Because each batch gets exactly one update, ``old_logp`` is the detached
recomputed ``logp`` (ratio = 1, so PPO clipping never binds yet); the PPO form
is kept so that several updates per batch, rollout-side log-probs and Router
Replay slot in later. The full engine (Ray actors, vLLM/Megatron backends,
ESPO, RL-ZVP, Router Replay, overlapped rewards) replaces the loop, not the
pure functions in ``advantages.py`` / ``losses.py``.

Logged every step (list of dicts, one per step): reward mean/std, pass rate,
zero-variance rate split into all-pass and all-fail groups, mean |advantage|
per rollout and per token, entropy, clip fraction, tokens, time by phase.
"""
from __future__ import annotations

import inspect
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import pyarrow as pa
import torch

from stages.common.lm import chat_prefix, sample
from stages.common.progress import progress
from stages.rl.advantages import get_advantage, zero_variance_groups
from stages.rl.config import RLConfig
from stages.rl.data import PromptSampler, RLPrompt
from stages.rl.losses import get_policy_loss, masked_mean

ScoreFn = Callable[[str, str, str], float]   # (verifier_json, response, reference) -> reward in [0, 1]


# -- pure helpers ---------------------------------------------------------------

def group_stats(rewards: torch.Tensor, pass_threshold: float) -> dict[str, int]:
    """Counts over ``[G, N]`` rewards: groups, zero-variance groups, and their split.

    A zero-variance group is *all-pass* when its (common) reward is above
    ``pass_threshold``, else *all-fail*; so ``zero_variance == all_pass + all_fail``.
    """
    zv = zero_variance_groups(rewards)
    passed = rewards[:, 0] > pass_threshold
    return {"groups": int(rewards.size(0)), "zero_variance": int(zv.sum()),
            "all_pass": int((zv & passed).sum()), "all_fail": int((zv & ~passed).sum())}


def build_batch(prefixes: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded teacher-forcing batch of ``prefix + completion`` token ids.

    Returns ``input_ids`` ``[B, L]`` long, ``attention_mask`` ``[B, L]`` long and
    ``completion_mask`` ``[B, L]`` bool (True on completion tokens). Right
    padding keeps every real token at its natural position 0..len-1.
    """
    if len(prefixes) != len(completions):
        raise ValueError(f"build_batch: {len(prefixes)} prefixes for {len(completions)} completions")
    seqs = [list(p) + list(c) for p, c in zip(prefixes, completions)]
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), n), dtype=torch.long)
    comp = torch.zeros((len(seqs), n), dtype=torch.bool)
    for i, (p, s) in enumerate(zip(prefixes, seqs)):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        attn[i, :len(s)] = 1
        comp[i, len(p):len(s)] = True
    return {"input_ids": ids, "attention_mask": attn, "completion_mask": comp}


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-prob of each next token and the policy's entropy there.

    ``input_ids``/``attention_mask`` ``[B, L]`` -> ``logp`` ``[B, L-1]`` (log p of
    ``input_ids[:, 1:]``) and ``entropy`` ``[B, L-1]``, both float32, from
    ``logits / temperature`` (the distribution the sampler drew from).
    """
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    logp = logprobs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    entropy = -(logprobs.exp() * logprobs).sum(-1)
    return logp, entropy


def _call_with_supported(fn, *args, **options):
    """Call a registry function with only the keyword options its signature accepts."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(*args, **options)
    return fn(*args, **{k: v for k, v in options.items() if k in params})


def compute_advantages(rewards: torch.Tensor, cfg: RLConfig) -> torch.Tensor:
    """``[G, N]`` rewards -> ``[G, N]`` advantages with the configured estimator."""
    return _call_with_supported(get_advantage(cfg.advantage), rewards, eps=cfg.advantage_eps)


def policy_update(model, optimizer, batch: dict[str, torch.Tensor], advantages: torch.Tensor,
                  cfg: RLConfig) -> dict[str, float]:
    """One policy-gradient step on a rollout batch (single update: ``old_logp`` = detached ``logp``).

    ``batch``: :func:`build_batch` output for B completions; ``advantages`` ``[B]``.
    When every advantage is 0 there is no signal: the forward runs (for the
    entropy metric) but no backward or optimizer step ("updated": 0.0).
    """
    model.train()
    mask = batch["completion_mask"][:, 1:]                                  # aligned with logp [B, L-1]
    advantages = advantages.detach().float()
    has_signal = bool((advantages != 0).any())
    with torch.set_grad_enabled(has_signal):
        logp, entropy = token_logprobs(model, batch["input_ids"], batch["attention_mask"], cfg.temperature)
        old_logp = logp.detach()
        loss, lm = _call_with_supported(get_policy_loss(cfg.policy_loss), logp, old_logp, advantages, mask,
                                        clip_eps=cfg.clip_eps, entropy=entropy.detach(),
                                        vocab_size=model.config.vocab_size, espo_alpha=cfg.espo_alpha,
                                        espo_groups=cfg.espo_groups)
    grad_norm = 0.0
    if has_signal:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        tok_adv = advantages.abs().unsqueeze(1).expand_as(mask)
        return {"loss": float(loss.detach()), "entropy": float(masked_mean(entropy.detach(), mask)),
                "adv_abs_token_mean": float(masked_mean(tok_adv, mask)), "grad_norm": grad_norm,
                "updated": float(has_signal), **{k: float(v) for k, v in lm.items()}}


# -- per-prompt statistics -------------------------------------------------------

@dataclass
class PromptStats:
    """What RL measured per prompt over the whole run (the carryover filter reads it)."""
    pass_threshold: float
    _rows: dict[str, dict] = field(default_factory=dict)

    def add(self, prompt: RLPrompt, rewards: Sequence[float]) -> None:
        row = self._rows.setdefault(prompt.id, {"prompt": prompt, "rewards": [], "groups": 0})
        row["rewards"].extend(float(r) for r in rewards)
        row["groups"] += 1

    def rows(self) -> list[dict]:
        out = []
        for pid, row in self._rows.items():
            r = row["rewards"]
            out.append({"prompt_id": pid, "domain": row["prompt"].domain, "task": row["prompt"].task,
                        "n_samples": len(r), "pass_rate": sum(x > self.pass_threshold for x in r) / len(r),
                        "mean_reward": sum(r) / len(r), "zero_variance": max(r) == min(r),
                        "n_groups": row["groups"]})
        return sorted(out, key=lambda x: x["prompt_id"])

    def table(self) -> pa.Table:
        rows = self.rows()
        return pa.table({
            "prompt_id": pa.array([r["prompt_id"] for r in rows], pa.string()),
            "domain": pa.array([r["domain"] for r in rows], pa.string()),
            "task": pa.array([r["task"] for r in rows], pa.string()),
            "n_samples": pa.array([r["n_samples"] for r in rows], pa.int32()),
            "pass_rate": pa.array([r["pass_rate"] for r in rows], pa.float64()),
            "mean_reward": pa.array([r["mean_reward"] for r in rows], pa.float64()),
            "zero_variance": pa.array([r["zero_variance"] for r in rows], pa.bool_()),
            "n_groups": pa.array([r["n_groups"] for r in rows], pa.int32()),
        })


def rollouts_table(rows: list[dict]) -> pa.Table:
    """Rollout rows (as :func:`train` records them) -> a ``rollouts`` table (with extra columns)."""
    def col(name, typ):
        return pa.array([r[name] for r in rows], typ)
    return pa.table({
        "step": col("step", pa.int64()), "prompt_id": col("prompt_id", pa.string()),
        "sample_idx": col("sample_idx", pa.int32()), "response": col("response", pa.string()),
        "reward": col("reward", pa.float64()), "num_tokens": col("num_tokens", pa.int32()),
        "advantage": col("advantage", pa.float64()), "domain": col("domain", pa.string()),
        "task": col("task", pa.string()), "truncated": col("truncated", pa.bool_()),
    })


# -- the loop ----------------------------------------------------------------------

@dataclass
class RLResult:
    metrics: list[dict]               # one dict per step
    rollouts: list[dict]              # one dict per sampled completion
    prompt_stats: PromptStats

    def summary(self) -> dict:
        """Run-level numbers for the manifest's ``extra``."""
        m = self.metrics
        groups = sum(x["groups"] for x in m)
        zv_pass = sum(x["zero_variance_all_pass"] for x in m)
        zv_fail = sum(x["zero_variance_all_fail"] for x in m)
        return {
            "steps": len(m), "samples": len(self.rollouts), "groups": groups,
            "tokens": sum(x["tokens"] for x in m),
            "updates": int(sum(x["updated"] for x in m)),
            "reward_mean_first": m[0]["reward_mean"] if m else None,
            "reward_mean_last": m[-1]["reward_mean"] if m else None,
            "reward_mean": (sum(r["reward"] for r in self.rollouts) / len(self.rollouts)) if self.rollouts else None,
            "zero_variance_rate": (zv_pass + zv_fail) / groups if groups else None,
            "zero_variance_all_pass_rate": zv_pass / groups if groups else None,
            "zero_variance_all_fail_rate": zv_fail / groups if groups else None,
            "prompts_measured": len(self.prompt_stats.rows()),
            "time_s": sum(x["time_step_s"] for x in m),
        }


def _default_score() -> ScoreFn:
    from stages.gym.provisional import score
    return score


def _score_groups(batch_prompts, groups, score_fn: ScoreFn, service) -> tuple[torch.Tensor, int]:
    """Rewards [G, N] of every sample, and how many the reward service answered with a failure (scored 0).

    With a service, every sample is submitted before any result is awaited, so the workers score in parallel.
    """
    if service is None:
        values = [[float(score_fn(p.verifier, c["text"], p.reference)) for c in group]
                  for p, group in zip(batch_prompts, groups)]
        return torch.tensor(values, dtype=torch.float32), 0
    futures = [[service.submit_spec(p.verifier, c["text"], p.reference) for c in group]
               for p, group in zip(batch_prompts, groups)]
    results = [[f.result() for f in row] for row in futures]
    failures = sum(r.kind != "ok" for row in results for r in row)
    return torch.tensor([[r.score for r in row] for row in results], dtype=torch.float32), failures


def train(model, tok, prompts: Sequence[RLPrompt], cfg: RLConfig, *, score_fn: ScoreFn | None = None,
          log: logging.Logger | None = None, desc: str = "rl") -> RLResult:
    """Run ``cfg.steps`` GRPO steps on ``model`` in place; return metrics, rollouts and prompt stats.

    ``score_fn(verifier_json, response, reference) -> float`` defaults to
    ``stages.gym.provisional.score``; with ``cfg.reward_workers`` > 0 (and no
    ``score_fn``) samples go to the gym's reward service instead.
    """
    service = None
    if score_fn is None and cfg.reward_workers > 0:
        from stages.gym.service import RewardService
        service = RewardService(cfg.reward_workers, default_timeout_s=cfg.reward_timeout_s)
    try:
        return _train(model, tok, prompts, cfg, score_fn, service, log, desc)
    finally:
        if service is not None:
            service.close()


def _train(model, tok, prompts, cfg: RLConfig, score_fn, service, log, desc) -> RLResult:
    log = log or logging.getLogger("compass.rl")
    score_fn = score_fn or _default_score()
    get_advantage(cfg.advantage), get_policy_loss(cfg.policy_loss)      # fail fast on unknown names
    torch.manual_seed(cfg.seed)
    sampler = PromptSampler(prompts, cfg.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    stats = PromptStats(cfg.pass_threshold)
    metrics: list[dict] = []
    rollouts: list[dict] = []
    prefix_cache: dict[str, list[int]] = {}
    eos = tok.eos_token_id

    for step in progress(range(cfg.steps), desc=desc, unit="step"):
        t0 = time.perf_counter()
        batch_prompts = sampler.take(cfg.prompts_per_step)
        groups = sample(model, tok, [p.prompt for p in batch_prompts], n=cfg.group_size,
                        max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                        seed=cfg.seed * 1_000_003 + step)
        t1 = time.perf_counter()
        rewards, reward_failures = _score_groups(batch_prompts, groups, score_fn, service)
        t2 = time.perf_counter()
        adv = compute_advantages(rewards, cfg)                             # [G, N]
        prefixes, completions = [], []
        for p, group in zip(batch_prompts, groups):
            if p.id not in prefix_cache:
                prefix_cache[p.id] = tok(chat_prefix(tok, p.prompt), add_special_tokens=False)["input_ids"]
            for c in group:
                prefixes.append(prefix_cache[p.id])
                completions.append(c["ids"])
        batch = build_batch(prefixes, completions, tok.pad_token_id)
        upd = policy_update(model, optimizer, batch, adv.reshape(-1), cfg)
        t3 = time.perf_counter()

        gs = group_stats(rewards, cfg.pass_threshold)
        n_tokens = sum(len(c) for c in completions)
        truncated = [len(c["ids"]) == 0 or c["ids"][-1] != eos for g in groups for c in g]
        for gi, (p, group) in enumerate(zip(batch_prompts, groups)):
            stats.add(p, rewards[gi].tolist())
            for si, c in enumerate(group):
                rollouts.append({"step": step, "prompt_id": p.id, "sample_idx": si, "response": c["text"],
                                 "reward": float(rewards[gi, si]), "num_tokens": len(c["ids"]),
                                 "advantage": float(adv[gi, si]), "domain": p.domain, "task": p.task,
                                 "truncated": truncated[gi * len(group) + si]})
        row = {
            "step": step, "groups": gs["groups"], "samples": int(rewards.numel()),
            "reward_mean": float(rewards.mean()), "reward_failures": reward_failures,
            "reward_std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
            "pass_rate": float((rewards > cfg.pass_threshold).float().mean()),
            "zero_variance_rate": gs["zero_variance"] / gs["groups"],
            "zero_variance_all_pass": gs["all_pass"], "zero_variance_all_fail": gs["all_fail"],
            "zero_variance_all_pass_rate": gs["all_pass"] / gs["groups"],
            "zero_variance_all_fail_rate": gs["all_fail"] / gs["groups"],
            "adv_abs_mean": float(adv.abs().mean()),
            "tokens": n_tokens, "response_len_mean": n_tokens / len(completions),
            "truncated_frac": sum(truncated) / len(truncated), "lr": cfg.lr,
            **upd,
            "time_rollout_s": t1 - t0, "time_reward_s": t2 - t1, "time_train_s": t3 - t2,
            "time_step_s": t3 - t0,
        }
        metrics.append(row)
        log.info("%s step %d: reward %.3f, zero-variance %.2f (all-pass %d, all-fail %d of %d), |A| %.3f, "
                 "entropy %.3f, %d tokens, %.2fs", desc, step, row["reward_mean"], row["zero_variance_rate"],
                 gs["all_pass"], gs["all_fail"], gs["groups"], row["adv_abs_mean"], row["entropy"], n_tokens,
                 row["time_step_s"])
    return RLResult(metrics=metrics, rollouts=rollouts, prompt_stats=stats)
