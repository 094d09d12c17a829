"""The RL engine's controller: one loop that drives a rollout backend and a trainer backend.

Per step (each phase timed):

1. **rollout** — ``prompts_per_step`` prompts, ``group_size`` samples each, from the
   rollout backend (``hf`` or ``vllm``; ``stages.rl.rollout``) with the sampler's
   per-token log-probs and, for Router Replay, the experts each MoE layer chose.
   With DAPO dynamic sampling, more prompts are drawn until the batch holds
   ``prompts_per_step`` groups with reward spread (every generated token is counted).
2. **reward** — Compass-Gym, in process or through the reward service.
3. **old log-probs** — the trainer recomputes the completions' log-probs and
   entropies (with the recorded routes when ``router_replay``); the gap to the
   rollout's log-probs is the train–inference mismatch, logged every step.
4. **advantages** — the configured estimator (GRPO, Dr. GRPO, RL-ZVP token shaping);
   zero-variance groups can be left out of the update (``drop_zero_variance``).
5. **update** — one optimizer step of the configured policy loss (``stages.rl.trainer``).
6. **weight sync** — the trainer's weights to the rollout side.

Metrics go to ``metrics.jsonl``, TensorBoard and PNG plots (``stages.rl.metrics_log``);
with ``checkpoint_every`` the whole RL state is saved for resume (``stages.rl.rl_state``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
import time
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from stages.common.lm import chat_prefix
from stages.common.progress import progress
from stages.rl.advantages import get_advantage, zero_variance_groups
from stages.rl.config import RLConfig
from stages.rl.data import PromptSampler, RLPrompt
from stages.rl.losses import get_policy_loss, masked_mean
from stages.rl.metrics_log import MetricsLog
from stages.rl.policy_forward import call_with_supported, token_logprobs
from stages.rl.records import PromptStats, rollouts_table
from stages.rl.rl_state import load_state, save_state
from stages.rl.rollout import SamplingParams, get_rollout_backend
from stages.rl.trainer import get_trainer_backend

__all__ = ["PromptStats", "rollouts_table", "token_logprobs", "train", "RLResult"]

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


def compute_advantages(rewards: torch.Tensor, cfg: RLConfig, entropy: torch.Tensor | None = None,
                       mask: torch.Tensor | None = None) -> torch.Tensor:
    """``[G, N]`` rewards -> advantages with the configured estimator: ``[G*N]`` per completion,
    or ``[G*N, T]`` per token (estimators that take ``entropy``/``mask`` ``[G*N, T]``, e.g. RL-ZVP)."""
    adv = call_with_supported(get_advantage(cfg.advantage), rewards, eps=cfg.advantage_eps, entropy=entropy,
                              mask=mask, pass_threshold=cfg.pass_threshold, zvp_alpha=cfg.zvp_alpha)
    return adv.reshape(-1) if adv.shape == rewards.shape else adv


def policy_update(model, optimizer, batch: dict[str, torch.Tensor], advantages: torch.Tensor,
                  cfg: RLConfig) -> dict[str, float]:
    """One policy-gradient step with ``old_logp`` = this forward's detached log-probs
    (:func:`stages.rl.trainer_torch.policy_step`)."""
    from stages.rl.trainer_torch import policy_step
    return policy_step(model, optimizer, batch, advantages, cfg)


def routes_batch(prefixes: Sequence[Sequence[int]], completions: Sequence, width: int) -> torch.Tensor | None:
    """Per-completion routes ``[len(prefix)+len(ids), layers, k]`` -> ``[B, width, layers, k]`` long, aligned
    with :func:`build_batch` (right padding; ``-1`` = not recorded). None when any completion has none."""
    if not completions or any(c.routes is None for c in completions):
        return None
    layers, k = completions[0].routes.shape[1:]
    out = torch.full((len(completions), width, layers, k), -1, dtype=torch.long)
    for i, c in enumerate(completions):
        r = torch.from_numpy(c.routes.astype(np.int64))
        out[i, :r.shape[0]] = r[:width]
    return out


def rollout_values(field: str, prefixes: Sequence[Sequence[int]], completions: Sequence,
                   shape: tuple[int, int]) -> torch.Tensor:
    """The rollout's per-token ``field`` (``logprobs`` or ``entropies``, ``[len(ids)]`` each) laid out
    like the trainer's ``[B, L-1]`` tensors (position ``t`` scores token ``t+1``), 0 elsewhere."""
    out = torch.zeros(shape, dtype=torch.float32)
    for i, (p, c) in enumerate(zip(prefixes, completions)):
        out[i, len(p) - 1: len(p) - 1 + len(c.ids)] = torch.from_numpy(np.asarray(getattr(c, field), dtype=np.float32))
    return out


def logprob_gap(trainer_logp: torch.Tensor, prefixes: Sequence[Sequence[int]], completions: Sequence,
                mask: torch.Tensor) -> dict[str, float]:
    """Train–inference mismatch: |trainer log p - rollout log p| over every completion token.

    ``trainer_logp`` ``[B, L-1]`` (position ``t`` scores token ``t+1``); each completion's
    rollout ``logprobs`` ``[len(ids)]``. Returns mean, p99 and max.
    """
    roll = rollout_values("logprobs", prefixes, completions, tuple(trainer_logp.shape))
    gaps = (trainer_logp - roll).abs()[mask.bool()]
    if gaps.numel() == 0:
        return {"logp_gap_mean": 0.0, "logp_gap_p99": 0.0, "logp_gap_max": 0.0}
    return {"logp_gap_mean": float(gaps.mean()), "logp_gap_p99": float(torch.quantile(gaps.double(), 0.99)),
            "logp_gap_max": float(gaps.max())}


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


def _stream(rollout, prompt_ids, n: int, sampling) -> Iterator[tuple[int, list]]:
    """``(prompt index, group)`` as the rollout finishes them: a backend with ``generate_stream``
    (e.g. a pool of Ray workers) yields each worker's groups as they come; others yield all at the end."""
    if hasattr(rollout, "generate_stream"):
        yield from rollout.generate_stream(prompt_ids, n, sampling)
    else:
        yield from enumerate(rollout.generate(prompt_ids, n, sampling))


def _rollout_and_score(rollout, batch_prompts, prompt_ids, n, sampling, score_fn: ScoreFn, service):
    """Generate and score, scoring each group as soon as it arrives (overlapping the rollout workers that
    are still generating). With a reward service every sample is submitted before any result is awaited.

    Returns the groups, rewards ``[G, N]``, failures (reward-service errors, scored 0) and seconds spent scoring.
    """
    groups: list = [None] * len(batch_prompts)
    pending: list = [None] * len(batch_prompts)
    scoring_s = 0.0
    for i, group in _stream(rollout, prompt_ids, n, sampling):
        groups[i] = group
        p = batch_prompts[i]
        t0 = time.perf_counter()
        pending[i] = ([service.submit_spec(p.verifier, c.text, p.reference) for c in group] if service is not None
                      else [float(score_fn(p.verifier, c.text, p.reference)) for c in group])
        scoring_s += time.perf_counter() - t0
    t0 = time.perf_counter()
    failures = 0
    if service is not None:
        results = [[f.result() for f in row] for row in pending]
        failures = sum(r.kind != "ok" for row in results for r in row)
        pending = [[r.score for r in row] for row in results]
    scoring_s += time.perf_counter() - t0
    return groups, torch.tensor(pending, dtype=torch.float32), failures, scoring_s


def train(model, tok, prompts: Sequence[RLPrompt], cfg: RLConfig, *, score_fn: ScoreFn | None = None,
          log: logging.Logger | None = None, desc: str = "rl", out_dir=None, state_dir=None,
          on_step: Callable[[int, dict, object], None] | None = None) -> RLResult:
    """Run ``cfg.steps`` RL steps on ``model`` in place; return metrics, rollouts and prompt stats.

    ``score_fn(verifier_json, response, reference) -> float`` defaults to
    ``stages.gym.provisional.score``; with ``cfg.reward_workers`` > 0 (and no
    ``score_fn``) samples go to the gym's reward service instead.
    ``out_dir``: where ``metrics.jsonl``, ``tensorboard/`` and ``plots/`` go (None: nowhere).
    ``state_dir``: where the RL state is saved every ``cfg.checkpoint_every`` steps; a run
    that finds a state there resumes from it. ``on_step(step, metrics_row, model)`` is called
    after every step (held-out evaluation in benchmarks).
    """
    service = None
    if score_fn is None and cfg.reward_workers > 0:
        from stages.gym.service import RewardService
        service = RewardService(cfg.reward_workers, default_timeout_s=cfg.reward_timeout_s)
    if cfg.trainer_actor:
        from stages.rl.trainer_ray import RayTrainer
        trainer = RayTrainer(cfg.trainer_backend, model, cfg)
    else:
        trainer = get_trainer_backend(cfg.trainer_backend)(model, cfg)
    backend = resolve_rollout_backend(cfg.rollout_backend, model)
    # same weights in the same precision on both sides (shared, or a copy synced every step)
    same_policy = cfg.trainer_backend == "torch" and cfg.rollout_dtype == "float32" and backend in ("hf", "native")
    options = {"dtype": cfg.rollout_dtype}
    if backend in ("hf", "native"):
        options["record_routes"] = cfg.router_replay or _is_moe(model)
        options["share"] = same_policy and not cfg.trainer_actor and not cfg.rollout_workers
    rollout = None
    metrics_log = MetricsLog(out_dir)
    try:
        if cfg.rollout_workers:
            from stages.rl.rollout_ray import RayRolloutPool
            rollout = RayRolloutPool(backend, model, tok, workers=cfg.rollout_workers, **options)
        else:
            rollout = get_rollout_backend(backend)(model, tok, **options)
        loop = _Loop(model, tok, prompts, cfg, trainer, rollout, score_fn or _default_score(), service,
                     log or logging.getLogger("compass.rl"), desc, metrics_log, state_dir, on_step)
        # the rollout sampled from the trainer's own weights in the trainer's precision: its log-probs are the
        # old policy's, so the recompute pass is skipped (the update's forward still measures the gap)
        loop.rollout_is_policy = same_policy and not cfg.router_replay
        return loop.run()
    finally:
        metrics_log.close()
        if rollout is not None:
            rollout.close()
        if hasattr(trainer, "close"):
            trainer.close()
        if service is not None:
            service.close()


def resolve_rollout_backend(name: str, model) -> str:
    """``auto`` -> ``native`` where our decoder supports the model (measured faster than ``hf``:
    docs/benchmarks.md), else ``hf``; any other name as given."""
    if name != "auto":
        return name
    from stages.rl.rollout_native import unsupported
    return "native" if unsupported(model.config) is None else "hf"


def _is_moe(model) -> bool:
    return getattr(model.config, "num_experts", 0) > 0


class _Loop:
    def __init__(self, model, tok, prompts, cfg: RLConfig, trainer, rollout, score_fn, service, log, desc,
                 metrics_log: MetricsLog, state_dir, on_step):
        get_advantage(cfg.advantage), get_policy_loss(cfg.policy_loss)      # fail fast on unknown names
        self.model, self.tok, self.cfg = model, tok, cfg
        self.trainer, self.rollout, self.score_fn, self.service = trainer, rollout, score_fn, service
        self.log, self.desc, self.metrics, self.state_dir, self.on_step = log, desc, metrics_log, state_dir, on_step
        self.sampler = PromptSampler(prompts, cfg.seed)
        self.stats = PromptStats(cfg.pass_threshold)
        self.rollouts: list[dict] = []
        self.prefix_cache: dict[str, list[int]] = {}
        self.rollout_tokens = 0            # every generated token so far, kept or not (the rollout budget)
        self.start = 0
        self.rollout_is_policy = False     # True: no old-log-prob recompute (see train)

    def prefix(self, p: RLPrompt) -> list[int]:
        if p.id not in self.prefix_cache:
            self.prefix_cache[p.id] = self.tok(chat_prefix(self.tok, p.prompt), add_special_tokens=False)["input_ids"]
        return self.prefix_cache[p.id]

    # -- state ----------------------------------------------------------------------
    def restore(self) -> None:
        state = load_state(self.state_dir)
        if state is None:
            return
        self.trainer.load_state_dict(state["trainer"])
        self.sampler.load_state(state["sampler"])
        self.stats._rows = state["stats"]
        self.rollouts = state["rollouts"]
        self.metrics.restore(state["metrics"])
        self.rollout_tokens = state["rollout_tokens"]
        self.start = state["step"]
        torch.set_rng_state(state["torch_rng"])
        self.sync_rollout()
        self.log.info("%s: resumed at step %d of %d from %s", self.desc, self.start, self.cfg.steps, self.state_dir)

    def save(self, next_step: int) -> None:
        save_state(self.state_dir, {"step": next_step, "trainer": self.trainer.state_dict(),
                                    "sampler": self.sampler.state(), "stats": self.stats._rows,
                                    "rollouts": self.rollouts, "metrics": self.metrics.rows,
                                    "rollout_tokens": self.rollout_tokens, "torch_rng": torch.get_rng_state()})

    def sync_rollout(self) -> None:
        """The trainer's weights to the rollout (actor to actors directly when both are Ray)."""
        if hasattr(self.trainer, "hf_state_dict_ref") and hasattr(self.rollout, "generate_stream"):
            self.rollout.sync_weights(self.trainer.hf_state_dict_ref())
        else:
            self.rollout.sync_weights(self.trainer.hf_state_dict())

    def trained_weights_to_model(self) -> None:
        """Load the trainer's weights into the driver's HF model when the trainer trains its own copy."""
        if self.cfg.trainer_backend != "torch" or self.cfg.trainer_actor:
            with torch.no_grad():
                self.model.load_state_dict(self.trainer.hf_state_dict())

    # -- one step ---------------------------------------------------------------------
    def generate_groups(self, step: int, timing: dict) -> tuple[list, list, torch.Tensor, dict]:
        """Rollout + reward, with DAPO dynamic sampling rounds when configured.

        Returns the prompts, completion groups and ``[G, N]`` rewards kept for the update,
        plus counts over everything generated this step.
        """
        cfg = self.cfg
        kept_p, kept_g, kept_r = [], [], []
        counts = {"groups_generated": 0, "samples_generated": 0, "tokens_generated": 0, "reward_failures": 0,
                  "rounds": 0, "zero_variance": 0, "all_pass": 0, "all_fail": 0}
        need = cfg.prompts_per_step
        while need > 0 and counts["rounds"] < (cfg.dynamic_sampling_max_rounds if cfg.dynamic_sampling else 1):
            batch_prompts = self.sampler.take(need)
            t0 = time.perf_counter()
            sampling = SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                                      seed=cfg.seed * 1_000_003 + step * 97 + counts["rounds"])
            groups, rewards, failures, scoring_s = _rollout_and_score(
                self.rollout, batch_prompts, [self.prefix(p) for p in batch_prompts], cfg.group_size, sampling,
                self.score_fn, self.service)
            timing["rollout"] += time.perf_counter() - t0 - scoring_s
            timing["reward"] += scoring_s
            counts["rounds"] += 1
            counts["reward_failures"] += failures
            counts["groups_generated"] += len(groups)
            counts["samples_generated"] += int(rewards.numel())
            counts["tokens_generated"] += sum(len(c.ids) for g in groups for c in g)
            gs = group_stats(rewards, cfg.pass_threshold)
            for k in ("zero_variance", "all_pass", "all_fail"):
                counts[k] += gs[k]
            zv = zero_variance_groups(rewards)
            for gi, (p, g) in enumerate(zip(batch_prompts, groups)):
                self.stats.add(p, rewards[gi].tolist())
                # solved = every sample got full marks (a shared partial-credit score is not a solve)
                if cfg.retire_solved and bool(zv[gi]) and float(rewards[gi, 0]) >= 1.0:
                    self.sampler.retire(p.id, keep_at_least=cfg.prompts_per_step)
                if cfg.dynamic_sampling and bool(zv[gi]):
                    self._record(step, p, g, rewards[gi], None)        # generated, paid for, dropped
                    continue
                kept_p.append(p)
                kept_g.append(g)
                kept_r.append(rewards[gi])
            need = cfg.prompts_per_step - len(kept_p) if cfg.dynamic_sampling else 0
        rewards = torch.stack(kept_r) if kept_r else torch.zeros((0, cfg.group_size))
        return kept_p, kept_g, rewards, counts

    def _record(self, step, p: RLPrompt, group, rewards_row, adv_row) -> None:
        eos = self.tok.eos_token_id
        for si, c in enumerate(group):
            self.rollouts.append({"step": step, "prompt_id": p.id, "sample_idx": si, "response": c.text,
                                  "reward": float(rewards_row[si]), "num_tokens": len(c.ids),
                                  "advantage": 0.0 if adv_row is None else float(adv_row[si]),
                                  "domain": p.domain, "task": p.task,
                                  "truncated": len(c.ids) == 0 or c.ids[-1] != eos})

    def step(self, step: int) -> dict:
        cfg = self.cfg
        timing = {"rollout": 0.0, "reward": 0.0, "old_logp": 0.0, "update": 0.0, "sync": 0.0}
        t_start = time.perf_counter()
        batch_prompts, groups, rewards, counts = self.generate_groups(step, timing)
        self.rollout_tokens += counts["tokens_generated"]
        row: dict = {"step": step}
        upd: dict = {"updated": 0.0}
        if batch_prompts:
            prefixes = [self.prefix(p) for p, g in zip(batch_prompts, groups) for _ in g]
            comps = [c for g in groups for c in g]
            batch = build_batch(prefixes, [c.ids for c in comps], self.tok.pad_token_id)
            mask = batch["completion_mask"][:, 1:]
            width = batch["input_ids"].shape[1]
            routes = routes_batch(prefixes, comps, width) if cfg.router_replay else None
            if cfg.router_replay and routes is None:
                raise RuntimeError(f"router_replay: the {cfg.rollout_backend} rollout returned no routes "
                                   f"(is the policy a MoE model?)")
            reuse = self.rollout_is_policy and all(c.entropies is not None for c in comps)
            t0 = time.perf_counter()
            if reuse:          # old log-probs = the update forward's own (ratio 1); entropy from the sampler
                old_logp, free_routes = None, None
                entropy = rollout_values("entropies", prefixes, comps, tuple(mask.shape))
            else:
                old_logp, entropy, free_routes = self.old_logprobs(batch, routes)
                row.update(logprob_gap(old_logp, prefixes, comps, mask))
            timing["old_logp"] = time.perf_counter() - t0
            if cfg.router_replay:
                free_logp, _, free_routes = self.old_logprobs(batch, None)      # the mismatch replay removes
                row["logp_gap_mean_no_replay"] = logprob_gap(free_logp, prefixes, comps, mask)["logp_gap_mean"]
            row.update(self.routing_metrics(prefixes, comps, free_routes))
            adv = compute_advantages(rewards, cfg, entropy=entropy, mask=mask)
            for gi, (p, g) in enumerate(zip(batch_prompts, groups)):
                n = len(g)
                a = adv[gi * n:(gi + 1) * n]
                a_seq = a if a.dim() == 1 else (a * mask[gi * n:(gi + 1) * n]).sum(1) / \
                    mask[gi * n:(gi + 1) * n].sum(1).clamp(min=1)
                self._record(step, p, g, rewards[gi], a_seq)
            keep = torch.arange(len(comps))
            if cfg.drop_zero_variance:
                signal = adv.reshape(len(comps), -1).ne(0).any(dim=1)
                keep = keep[signal]
            row["update_samples"] = int(keep.numel())
            if keep.numel() > 0:
                chunks = keep.tensor_split(min(cfg.mini_batches, int(keep.numel())))
                if len(chunks) > 1 and old_logp is None:     # later mini-batches meet a moved policy
                    old_logp = rollout_values("logprobs", prefixes, comps, tuple(mask.shape))
                t0 = time.perf_counter()
                ups = []
                for k, idx in enumerate(chunks):
                    sub = {name: v[idx] for name, v in batch.items()}
                    ups.append(self.trainer.update(sub, adv[idx], old_logp[idx] if old_logp is not None else None,
                                                   cfg, routes[idx] if routes is not None else None))
                    pre_step = getattr(self.trainer, "last", {}).get("logp")
                    if k == 0 and reuse and pre_step is not None:     # the first step's forward is the rollout policy
                        rows_0 = idx.tolist()
                        row.update(logprob_gap(pre_step, [prefixes[i] for i in rows_0], [comps[i] for i in rows_0],
                                               mask[idx]))
                timing["update"] = time.perf_counter() - t0
                upd = {name: sum(u[name] for u in ups) / len(ups) for name in ups[0]}
                upd["updated"] = float(any(u["updated"] for u in ups))
                row["mini_batches"] = len(ups)
                t0 = time.perf_counter()
                self.sync_rollout()
                timing["sync"] = time.perf_counter() - t0
            row["adv_abs_mean"] = float(adv.abs().mean())
            row["adv_abs_token_mean"] = float(masked_mean(
                (adv.abs().unsqueeze(1).expand_as(mask) if adv.dim() == 1 else adv.abs()), mask))
        step_s = time.perf_counter() - t_start
        groups_gen = max(counts["groups_generated"], 1)
        kept_r = rewards if rewards.numel() else torch.zeros(1)
        row.update({
            **{k: v for k, v in upd.items() if k != "adv_abs_token_mean"},
            "groups": counts["groups_generated"], "samples": counts["samples_generated"],
            "groups_kept": len(batch_prompts), "sampling_rounds": counts["rounds"],
            "reward_mean": float(kept_r.mean()), "reward_std": float(kept_r.std()) if kept_r.numel() > 1 else 0.0,
            "pass_rate": float((kept_r > cfg.pass_threshold).float().mean()),
            "reward_failures": counts["reward_failures"],
            "zero_variance_rate": counts["zero_variance"] / groups_gen,
            "zero_variance_all_pass": counts["all_pass"], "zero_variance_all_fail": counts["all_fail"],
            "zero_variance_all_pass_rate": counts["all_pass"] / groups_gen,
            "zero_variance_all_fail_rate": counts["all_fail"] / groups_gen,
            "tokens": counts["tokens_generated"], "rollout_tokens_total": self.rollout_tokens,
            "response_len_mean": counts["tokens_generated"] / max(counts["samples_generated"], 1),
            "tokens_per_s": counts["tokens_generated"] / step_s if step_s > 0 else 0.0,
            "samples_per_s": counts["samples_generated"] / step_s if step_s > 0 else 0.0,
            "lr": cfg.lr, "prompts_retired": len(self.sampler.retired),
            **{f"time_{k}_s": v for k, v in timing.items()}, "time_train_s": timing["old_logp"] + timing["update"],
            "time_step_s": step_s,
        })
        return row

    def old_logprobs(self, batch, routes):
        """Trainer log-probs and entropy ``[B, L-1]``, and the trainer's own routes when it routed freely."""
        if routes is None and hasattr(self.trainer, "logprobs_with_routes"):     # megatron: RECORD in one forward
            return self.trainer.logprobs_with_routes(batch)
        if routes is None and _is_moe(self.model) and self.cfg.trainer_backend == "torch":
            from stages.rl.router_replay import record_routes
            with record_routes(self.model) as rec:
                logp, ent = self.trainer.logprobs(batch, None)
            return logp, ent, rec.routes()
        logp, ent = self.trainer.logprobs(batch, routes)
        return logp, ent, None

    @staticmethod
    def routing_metrics(prefixes, comps, free_routes) -> dict:
        """Agreement between the rollout's routes and the trainer's free routes on completion tokens."""
        if free_routes is None or not comps or any(c.routes is None for c in comps):
            return {}
        from stages.rl.router_replay import routing_agreement
        width = free_routes.shape[1]
        rollout_routes = routes_batch(prefixes, comps, width)
        valid = torch.zeros(rollout_routes.shape[:2], dtype=torch.bool)
        for i, (p, c) in enumerate(zip(prefixes, comps)):
            valid[i, len(p): len(p) + len(c.ids)] = True
        return {"routing_agreement": float(routing_agreement(rollout_routes, free_routes.long(), valid))}

    def run(self) -> RLResult:
        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        self.restore()
        for step in progress(range(self.start, cfg.steps), desc=self.desc, unit="step"):
            row = self.step(step)
            self.metrics.log(row)
            self.log.info("%s step %d: reward %.3f, zero-variance %.2f (all-pass %d, all-fail %d of %d), "
                          "|A| %.3f, gap %.2e, %d tokens, %.2fs", self.desc, step, row["reward_mean"],
                          row["zero_variance_rate"], row["zero_variance_all_pass"], row["zero_variance_all_fail"],
                          row["groups"], row.get("adv_abs_mean", 0.0), row.get("logp_gap_mean", 0.0), row["tokens"],
                          row["time_step_s"])
            if self.state_dir is not None and cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0:
                self.save(step + 1)
            if self.on_step is not None:
                self.trained_weights_to_model()
                self.on_step(step, row, self.model)
            if cfg.rollout_token_budget and self.rollout_tokens >= cfg.rollout_token_budget:
                self.log.info("%s: rollout token budget %d reached at step %d", self.desc, cfg.rollout_token_budget,
                              step)
                break
        self.trained_weights_to_model()             # the HF policy the stage saves gets the trained weights
        return RLResult(metrics=self.metrics.rows, rollouts=self.rollouts, prompt_stats=self.stats)
