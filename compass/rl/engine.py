"""The RL engine's controller: one loop that drives a rollout backend and a trainer backend.

Per step (each phase timed):

1. **rollout** — ``sampling.prompts_per_step`` prompts, ``sampling.group_size`` samples each, from the
   rollout backend (``native``, ``hf`` or ``vllm``; ``compass.rl.rollout.base``) with the sampler's
   per-token log-probs and, for Router Replay, the experts each MoE layer chose.
   With DAPO dynamic sampling, more prompts are drawn until the batch holds
   ``sampling.prompts_per_step`` groups with reward spread (every generated token is counted).
2. **reward** — Compass-Gym, in process or through the reward service.
3. **old log-probs** — the trainer recomputes the completions' log-probs and
   entropies (with the recorded routes when ``trainer.router_replay``); the gap to the
   rollout's log-probs is the train–inference mismatch, logged every step.
4. **advantages** — the configured estimator (``advantage.kind``: GRPO, Dr. GRPO, RL-ZVP token shaping);
   zero-variance groups can be left out of the update (``sampling.drop_zero_variance``).
5. **update** — one optimizer step per mini-batch of the configured policy loss (``loss.kind``;
   ``compass.rl.trainer.base``).
6. **weight sync** — the trainer's weights to the rollout side.

Metrics go to ``metrics.jsonl``, TensorBoard and PNG plots (``compass.rl.metrics_log``);
with ``checkpoint_every`` the whole RL state is saved for resume (``compass.rl.rl_state``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
import time
from typing import Callable, Sequence

import torch

from compass.lm.chat import chat_prefix
from compass.lm.model_config import is_moe
from compass.progress import progress, step_level
from compass.rl.algos.advantages import completion_advantages, get_advantage, zero_variance_groups
from compass.rl.trainer.batch import TrainBatch
from compass.rl.config import PrefilterConfig, RLConfig
from compass.rl.sampling.prompt_data import PromptSampler, RLPrompt
from compass.rl.sampling.length_predict import LengthPredictor, prediction_error
from compass.rl.metrics_log import MetricsLog
from compass.rl.sampling.prompt_beliefs import PromptBeliefs
from compass.rl.records import PromptStats, rollouts_table
from compass.rl.rl_state import load_state, save_state
from compass.rl.rollout.base import RolloutBackend, SamplingParams, all_rollout_backends, get_rollout_backend
from compass.rl.rollout.scored import rollout_and_score
from compass.rl.step_metrics import (PHASES, StepCounts, advantage_metrics, logprob_gap, mean_over_mini_batches,
                                     routing_metrics, step_row)
from compass.rl.trainer.base import TrainerBackend, get_trainer_backend

__all__ = ["PromptStats", "rollouts_table", "train", "RLResult", "compute_advantages"]

# (verifier_json, response, reference) -> reward in [0, 1], a float or a compass.gym.score.Reward (with its reason)
ScoreFn = Callable[[str, str, str], object]


def compute_advantages(rewards: torch.Tensor, mask: torch.Tensor, entropy: torch.Tensor | None,
                       cfg: RLConfig) -> torch.Tensor:
    """``[G, N]`` rewards -> ``[G*N, T]`` token advantages with the configured estimator; ``mask`` and
    ``entropy`` ``[G*N, T]`` (completions in group-major order)."""
    settings = cfg.advantage
    return get_advantage(settings.kind)(rewards, mask, entropy=entropy, pass_threshold=cfg.reward.pass_threshold,
                                        **settings.model_dump(exclude={"kind"}))


@dataclass
class RLResult:
    metrics: list[dict]               # one dict per step
    rollouts: list[dict]              # one dict per sampled completion
    prompt_stats: PromptStats
    trainer_restarts: int = 0         # trainer actor deaths this run survived (trainer.max_restarts)

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
            # the reward audit: all-fail groups that were the verifier's doing, and every reason given
            "all_fail_verifier_fault_share": (sum(x.get("zero_variance_all_fail_verifier_fault", 0) for x in m) / zv_fail
                                              if zv_fail else 0.0),
            "reward_errors_by_reason": _sum_counts(x.get("reward_errors_by_reason", {}) for x in m),
            "zero_variance_all_pass_rate": zv_pass / groups if groups else None,
            "zero_variance_all_fail_rate": zv_fail / groups if groups else None,
            "prompts_skipped": sum(x.get("prompts_skipped", 0) for x in m),
            "prompts_measured": len(self.prompt_stats.rows()),
            "time_s": sum(x["time_step_s"] for x in m),
            "trainer_restarts": self.trainer_restarts,
        }


def _sum_counts(dicts) -> dict[str, int]:
    total: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            total[k] = total.get(k, 0) + v
    return dict(sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))


def _default_score() -> ScoreFn:
    from compass.gym.score import judge
    return judge


def train(model, tok, prompts: Sequence[RLPrompt], cfg: RLConfig, *, score_fn: ScoreFn | None = None,
          log: logging.Logger | None = None, desc: str = "rl", out_dir=None, state_dir=None,
          on_step: Callable[[int, dict, object], None] | None = None, reward_service=None) -> RLResult:
    """Run ``cfg.steps`` RL steps on ``model`` in place; return metrics, rollouts and prompt stats.

    ``score_fn(verifier_json, response, reference) -> float`` defaults to
    ``compass.gym.score.score``; with ``cfg.reward.workers`` > 0 (and no
    ``score_fn``) samples go to the gym's reward service instead.
    ``out_dir``: where ``metrics.jsonl``, ``tensorboard/`` and ``plots/`` go (None: nowhere).
    ``state_dir``: where the RL state is saved every ``cfg.checkpoint_every`` steps; a run
    that finds a state there resumes from it. ``on_step(step, metrics_row, model)`` is called
    after every step (held-out evaluation in benchmarks). ``reward_service``: a running
    ``compass.gym.service.RewardService`` to score with, owned (and closed) by the caller, e.g. one kept
    across many short calls; it takes the place of ``cfg.reward.workers``.
    """
    backend = resolve_rollout_backend(cfg.rollout.backend.kind, model)
    rollout_cls, trainer_cls = get_rollout_backend(backend), get_trainer_backend(cfg.trainer.backend.kind)
    _check_rollout_options(cfg, rollout_cls)       # before any process starts
    service = None
    if reward_service is not None:
        if score_fn is not None:
            raise ValueError("train: give score_fn or reward_service, not both")
        service = reward_service
    elif score_fn is None and cfg.reward.workers > 0:
        from compass.gym.service import RewardService
        service = RewardService(cfg.reward.workers, default_timeout_s=cfg.reward.timeout_s)
    if cfg.trainer.actor:
        from compass.rl.trainer.ray_actor import RayTrainer
        res = cfg.trainer.actor_resources
        # a restart rebuilds the actor from the first weights, then loads the saved state: only useful with one
        trainer = RayTrainer(cfg.trainer.backend.kind, model, cfg, threads=res.threads, actor_options=res.ray_options(),
                             restartable=state_dir is not None and cfg.trainer.max_restarts > 0)
    else:
        trainer = trainer_cls(model, cfg)
    # same weights in the same precision on both sides (shared, or a copy synced every step)
    dtype = rollout_dtype(cfg.rollout.dtype, rollout_cls)
    same_policy = trainer_cls.updates_model_in_place and dtype == "float32" and rollout_cls.runs_model_here
    # the backend's own settings are its class's keyword arguments (as advantage and loss settings are)
    options = {"dtype": dtype, **cfg.rollout.backend.model_dump(exclude={"kind"})}
    if rollout_cls.runs_model_here:
        options["record_routes"] = cfg.trainer.router_replay or is_moe(model.config)
        options["share"] = same_policy and not cfg.trainer.actor and not cfg.rollout.workers
    if cfg.rollout.detokenize != "backend":
        options["detokenize"] = False
    detok = None
    rollout = None
    metrics_log = MetricsLog(out_dir)
    try:
        if cfg.rollout.workers:
            from compass.rl.rollout.ray_pool import RayRolloutPool
            res = cfg.rollout.actor_resources
            rollout = RayRolloutPool(backend, model, tok, workers=cfg.rollout.workers,
                                     threads_per_worker=res.threads or 1, actor_options=res.ray_options(),
                                     partitioner=cfg.rollout.balance.partitioner,
                                     weight_sync=cfg.rollout.worker_weight_sync, **options)
        else:
            rollout = rollout_cls(model, tok, **options)
        if cfg.rollout.detokenize == "processes":
            from compass.rl.rollout.detokenize import DetokenizerPool
            detok = DetokenizerPool(tok, cfg.rollout.detokenize_workers)
        loop = _Loop(model, tok, prompts, cfg, trainer, rollout, score_fn or _default_score(), service,
                     log or logging.getLogger("compass.rl"), desc, metrics_log, state_dir, on_step)
        loop.detok = detok
        # the rollout sampled from the trainer's own weights in the trainer's precision: its log-probs are the
        # old policy's, so the recompute pass is skipped (the update's forward still measures the gap)
        loop.rollout_is_policy = same_policy and not cfg.trainer.router_replay
        return loop.run()
    finally:
        metrics_log.close()
        if detok is not None:
            detok.close()
        if rollout is not None:
            rollout.close()
        trainer.close()
        if service is not None and service is not reward_service:
            service.close()


def _check_rollout_options(cfg: RLConfig, rollout_cls: type[RolloutBackend]) -> None:
    """Rollout settings outside the backend's own (``rollout.backend``) that only some backends honour (their
    class flags say which): a clear error naming the setting and the backends that take it, before anything
    starts."""
    r, name = cfg.rollout, rollout_cls.name

    def able(flag: str) -> str:
        return " or ".join(sorted(n for n, c in all_rollout_backends().items() if getattr(c, flag))) or "no"
    if r.max_new_tokens_by_task and not rollout_cls.per_prompt_budgets:
        raise ValueError(f"rollout.max_new_tokens_by_task needs the {able('per_prompt_budgets')} backend, not {name}")
    if r.detokenize != "backend" and not rollout_cls.runs_model_here:
        raise ValueError(f"rollout.detokenize {r.detokenize!r} needs the {able('runs_model_here')} backend ({name} "
                         f"decodes its own text)")


def rollout_dtype(dtype: str, rollout_cls) -> str:
    """``rollout.dtype`` for this backend: ``auto`` is float32 where the model runs in this process (it shares
    the trainer's weights) and left to an engine in its own process to pick (vllm: bfloat16 on a GPU)."""
    if dtype != "auto":
        return dtype
    return "float32" if rollout_cls.runs_model_here else "auto"


def resolve_rollout_backend(name: str, model) -> str:
    """``auto`` -> ``native`` where our decoder supports the model (measured faster than ``hf``:
    docs/benchmarks.md), else ``hf``; any other name as given."""
    if name != "auto":
        return name
    from compass.rl.rollout.native import unsupported
    return "native" if unsupported(model.config) is None else "hf"


@dataclass
class Drawn:
    """What a step's rollout kept for the update (``rewards`` ``[G, N]``), and counts over all it generated."""
    prompts: list[RLPrompt]
    groups: list[list]
    rewards: torch.Tensor
    counts: StepCounts
    reasons: list[list] = field(default_factory=list)   # [G][N] reason codes of the kept groups


@dataclass
class OldPolicy:
    """The policy that sampled a batch: ``logp`` ``[B, L-1]`` (None: the update's own forward stands for it,
    ratio 1), ``entropy`` ``[B, L-1]``, and whether the rollout's own values were reused."""
    logp: torch.Tensor | None
    entropy: torch.Tensor
    reused: bool


class _Loop:
    def __init__(self, model, tok, prompts, cfg: RLConfig, trainer: TrainerBackend, rollout: RolloutBackend,
                 score_fn, service, log, desc, metrics_log: MetricsLog, state_dir, on_step):
        estimator = get_advantage(cfg.advantage.kind)
        self.token_level = estimator.token_level
        self.model, self.tok, self.cfg = model, tok, cfg
        self.trainer, self.rollout, self.score_fn, self.service = trainer, rollout, score_fn, service
        self.log, self.desc, self.metrics, self.state_dir, self.on_step = log, desc, metrics_log, state_dir, on_step
        self.sampler = PromptSampler(prompts, cfg.seed)
        self.stats = PromptStats(cfg.reward.pass_threshold)
        sp = cfg.sampling
        # beliefs over each prompt's pass rate drive the pre-rollout skip and the measured group size
        belief_cfg = sp.prefilter or PrefilterConfig()          # auto_group_size alone: the same priors
        self.beliefs = (PromptBeliefs(prompts, prior_weight=belief_cfg.prior_weight, forget=belief_cfg.forget,
                                      pass_threshold=cfg.reward.pass_threshold, seed=cfg.seed)
                        if sp.prefilter or sp.auto_group_size else None)
        self.group_size = sp.group_size
        self.rollouts: list[dict] = []
        self.prefix_cache: dict[str, list[int]] = {}
        self.rollout_tokens = 0            # every generated token so far, kept or not (the rollout budget)
        self.start = 0
        self.rollout_is_policy = False     # True: no old-log-prob recompute (see train)
        bal = cfg.rollout.balance
        self.lengths = (LengthPredictor(cfg.rollout.max_new_tokens, decay=bal.decay, draft_tokens=bal.draft_tokens)
                        if bal.predict != "none" else None)
        self.detok = None                  # a DetokenizerPool with rollout.detokenize: processes (see train)

    def prefix(self, p: RLPrompt) -> list[int]:
        if p.id not in self.prefix_cache:
            self.prefix_cache[p.id] = self.tok(chat_prefix(self.tok, p.prompt), add_special_tokens=False)["input_ids"]
        return self.prefix_cache[p.id]

    # -- state ----------------------------------------------------------------------
    def restore(self, state: dict | None = None, after: str | None = None) -> bool:
        """Load the saved RL state (``state``, else the one in ``state_dir``); whatever the loop holds is replaced,
        so steps re-run after it are never recorded twice. ``after``: the fault being recovered from (logged as
        one WARNING line instead of the INFO of a resumed stage run). Returns whether there was a state."""
        state = state if state is not None else load_state(self.state_dir)
        if state is None:
            return False
        self.trainer.load_state_dict(state["trainer"])
        self.sampler.load_state(state["sampler"])
        self.stats.load_state(state["stats"])
        if self.beliefs is not None:
            self.beliefs.load_state(state["beliefs"])
        self.group_size = state.get("group_size", self.group_size)
        self.rollouts = state["rollouts"]
        self.metrics.restore(state["metrics"])
        self.rollout_tokens = state["rollout_tokens"]
        if self.lengths is not None:           # older states have none: predictions then start from the priors
            self.lengths.load_state(state.get("lengths"))
        self.start = state["step"]
        torch.set_rng_state(state["torch_rng"])
        self.sync_rollout()
        if after is None:
            self.log.info("%s: resumed at step %d of %d from %s", self.desc, self.start, self.cfg.steps,
                          self.state_dir)
        else:
            self.log.warning("%s: %s; trainer actor restarted (%d of at most %d), resumed at step %d of %d from %s",
                             self.desc, after, self.trainer.restarts, self.cfg.trainer.max_restarts, self.start,
                             self.cfg.steps, self.state_dir)
        return True

    def save(self, next_step: int) -> None:
        save_state(self.state_dir, {"step": next_step, "trainer": self.trainer.state_dict(),
                                    "sampler": self.sampler.state(), "stats": self.stats.state(),
                                    "beliefs": self.beliefs.state() if self.beliefs is not None else None,
                                    "group_size": self.group_size,
                                    "rollouts": self.rollouts, "metrics": self.metrics.rows,
                                    "rollout_tokens": self.rollout_tokens, "torch_rng": torch.get_rng_state(),
                                    "lengths": self.lengths.state() if self.lengths is not None else None})

    def sync_rollout(self) -> None:
        """The trainer's weights to the rollout; as a handle where the rollout takes one (Ray actor to actors)."""
        ref = self.trainer.hf_state_dict_ref() if self.rollout.takes_weight_refs else None
        self.rollout.sync_weights(ref if ref is not None else self.trainer.hf_state_dict())

    def trained_weights_to_model(self) -> None:
        """Load the trainer's weights into the driver's HF model when the trainer trains its own copy."""
        if not type(self.trainer).updates_model_in_place:        # a RayTrainer's copy, or Megatron's own
            with torch.no_grad():
                self.model.load_state_dict(self.trainer.hf_state_dict())

    # -- one step: the phases, in order ------------------------------------------------
    def step(self, step: int) -> dict:
        """Rollout and score, old log-probs, advantages, update, sync; returns the step's metrics row."""
        timing = dict.fromkeys(PHASES, 0.0)
        t_start = time.perf_counter()
        self.choose_group_size(step)
        drawn = self.rollout_and_score(step, timing)
        self.rollout.release_memory()        # the step's rollouts are done: a colocated engine gives the GPU back
        self.rollout_tokens += drawn.counts.tokens_generated
        measured: dict = {}
        update = {"updated": 0.0}
        if drawn.prompts:
            batch = TrainBatch.of([self.prefix(p) for p, g in zip(drawn.prompts, drawn.groups) for _ in g],
                                  [c for g in drawn.groups for c in g], self.tok.pad_token_id,
                                  with_routes=self.cfg.trainer.router_replay)
            old = self.old_policy(batch, measured, timing)
            adv, per_completion = self.advantages(step, drawn, batch, old)
            ups = self.update(batch, adv, old, measured, timing)
            if ups:
                update = mean_over_mini_batches(ups)
                self.sync(timing)
            measured.update(advantage_metrics(adv, batch.mask, self.token_level, per_completion))
        return step_row(step, measured=measured, update=update, counts=drawn.counts, kept_rewards=drawn.rewards,
                        groups_kept=len(drawn.prompts), timing=timing, step_s=time.perf_counter() - t_start,
                        pass_threshold=self.cfg.reward.pass_threshold, lr=self.cfg.trainer.lr,
                        rollout_tokens_total=self.rollout_tokens, prompts_retired=len(self.sampler.retired))

    def rollout_and_score(self, step: int, timing: dict) -> Drawn:
        """Rollout + reward, with DAPO dynamic sampling rounds when configured (every round is paid for)."""
        cfg, sp = self.cfg, self.cfg.sampling
        n = self.group_size
        kept = Drawn([], [], torch.zeros((0, n)), StepCounts(group_size=n))
        rows: list[torch.Tensor] = []
        counts = kept.counts
        need = sp.prompts_per_step
        while need > 0 and counts.rounds < (sp.dynamic_max_rounds if sp.dynamic else 1):
            batch_prompts, skipped = self.draw(need)
            counts.prompts_skipped += skipped
            t0 = time.perf_counter()
            T, by_task = cfg.rollout.max_new_tokens, cfg.rollout.max_new_tokens_by_task
            sampling = SamplingParams(max_new_tokens=T, temperature=cfg.rollout.temperature,
                                      seed=cfg.seed * 1_000_003 + step * 97 + counts.rounds,
                                      budgets=tuple(min(by_task.get(p.task, T), T) for p in batch_prompts)
                                      if by_task else None)
            prompt_ids = [self.prefix(p) for p in batch_prompts]
            predicted = self.predict_lengths(batch_prompts, prompt_ids, sampling, counts)
            out = rollout_and_score(self.rollout, batch_prompts, prompt_ids, n, sampling, self.score_fn,
                                    self.service, tok=self.tok, detok=self.detok, overlap=cfg.reward.overlap,
                                    work=None if predicted is None else [n * x for x in predicted])
            groups, rewards, reasons, failures = out.groups, out.rewards, out.reasons, out.failures
            timing["rollout"] += time.perf_counter() - t0 - out.reward_exposed_s
            timing["reward"] += out.reward_exposed_s           # what generation did not hide
            counts.reward_tail_s += out.reward_tail_s
            self.observe_lengths(batch_prompts, groups, predicted, out.schedule, counts)
            counts.add_round(rewards, [[len(c.ids) for c in g] for g in groups], reasons, failures,
                             cfg.reward.pass_threshold)
            self.sort_round(step, batch_prompts, groups, rewards, reasons, kept, rows)
            need = sp.prompts_per_step - len(kept.prompts) if sp.dynamic else 0
        if rows:
            kept.rewards = torch.stack(rows)
        return kept

    def predict_lengths(self, prompts: list[RLPrompt], prompt_ids: list, sampling: SamplingParams,
                        counts: StepCounts) -> list[float] | None:
        """Each prompt's predicted tokens per sample for the rollout split (None: ``balance.predict`` none).
        Prompts with no history get a short draft first when ``balance.draft_tokens`` is set (paper §3.1.1)."""
        if self.lengths is None:
            return None
        drafts: dict[int, tuple[int, bool]] = {}
        need = [i for i, p in enumerate(prompts) if self.lengths.needs_draft(p.id)]
        if need:
            cap = self.cfg.rollout.balance.draft_tokens
            got = self.rollout.generate([prompt_ids[i] for i in need], 1,
                                        SamplingParams(max_new_tokens=cap, temperature=sampling.temperature,
                                                       seed=sampling.seed + 7))
            for i, (c,) in zip(need, got):
                drafts[i] = (len(c.ids), bool(c.finished))
                counts.draft_tokens += len(c.ids)
        return [self.lengths.predict(p.id, p.task, drafts.get(i))[0] for i, p in enumerate(prompts)]

    def observe_lengths(self, prompts: list[RLPrompt], groups: list, predicted: list[float] | None,
                        schedule: dict, counts: StepCounts) -> None:
        """Learn from the lengths just generated; keep the prediction error and the workers' schedule."""
        actual = [sum(len(c.ids) for c in g) / max(len(g), 1) for g in groups]
        if predicted is not None:
            counts.add_prediction_error(prediction_error(predicted, actual))
            for p, g in zip(prompts, groups):
                self.lengths.observe(p.id, p.task, [len(c.ids) for c in g])
        if schedule:
            counts.add_schedule(schedule)

    def draw(self, need: int) -> tuple[list[RLPrompt], int]:
        """The next ``need`` prompts to generate, and how many were skipped before rollout (no tokens spent on
        them) because their group was predicted zero-variance (``sampling.prefilter``)."""
        pf = self.cfg.sampling.prefilter
        if pf is None:
            return self.sampler.take(need), 0
        kept: list[RLPrompt] = []
        skipped: list[RLPrompt] = []
        seen: set[str] = set()
        drawn, cap = 0, max(need, int(pf.max_draws * need))
        while len(kept) < need and drawn < cap:
            batch = self.sampler.take(min(need - len(kept), cap - drawn))
            if not batch:
                break
            drawn += len(batch)
            for p in batch:
                if p.id in seen:                  # an epoch boundary between draws: never twice in one step
                    continue
                if self.beliefs.should_skip(p.id, self.group_size, **pf.skip_rule()):
                    skipped.append(p)
                    continue
                seen.add(p.id)
                kept.append(p)
        if not kept and skipped:                   # everything skipped: measure the last one rather than nothing
            kept.append(skipped.pop())
        for p in skipped:
            self.stats.skipped(p)
        return kept, len(skipped)

    def choose_group_size(self, step: int) -> None:
        """Re-estimate N from the beliefs every ``auto_group_size.every`` steps (``compass.rl.sampling.zero_variance``)."""
        auto = self.cfg.sampling.auto_group_size
        if auto is None or (step - self.start) % auto.every:
            return
        active = [p.id for i, p in enumerate(self.sampler.prompts) if i not in self.sampler.retired]
        pf = self.cfg.sampling.prefilter
        n, rows = self.beliefs.group_size(active, auto.candidates, auto.tol, pf.skip_rule() if pf else None)
        if n != self.group_size or step == self.start:
            best = max(rows, key=lambda r: r["abs_adv_per_sample"])
            row = next(r for r in rows if r["n"] == n)
            self.log.info("%s step %d: group size N=%d (was %d): predicted zero-variance %.2f (%.2f of the %.0f%% "
                          "generated), pass@N %.2f, |A| per generated sample %.3f = %.0f%% of the best candidate's "
                          "(N=%d, %.3f); %s", self.desc, step, n, self.group_size, row["zero_variance"],
                          row["zero_variance_generated"], 100 * row["generated"], row["pass_at_n"],
                          row["abs_adv_per_sample"],
                          100 * row["abs_adv_per_sample"] / max(best["abs_adv_per_sample"], 1e-12), best["n"],
                          best["abs_adv_per_sample"],
                          ", ".join(f"N={r['n']}: zv {r['zero_variance']:.2f}, |A| {r['abs_adv_per_sample']:.3f}"
                                    for r in rows))
        self.group_size = n

    def sort_round(self, step: int, prompts, groups, rewards: torch.Tensor, reasons: list, kept: Drawn,
                   rows: list) -> None:
        """Per group of one round: prompt stats, retirement of solved prompts, and keep (into ``kept``/``rows``)
        or drop (dynamic sampling: a zero-variance group is recorded, paid for, and left out)."""
        sp = self.cfg.sampling
        zv = zero_variance_groups(rewards)
        for gi, (p, g) in enumerate(zip(prompts, groups)):
            self.stats.add(p, rewards[gi].tolist())
            if self.beliefs is not None:
                self.beliefs.observe(p.id, rewards[gi].tolist())
            # solved = every sample got full marks (a shared partial-credit score is not a solve)
            if sp.retire_solved and bool(zv[gi]) and float(rewards[gi, 0]) >= 1.0:
                self.sampler.retire(p.id, keep_at_least=sp.prompts_per_step)
            if sp.dynamic and bool(zv[gi]):
                self._record(step, p, g, rewards[gi], None, reasons[gi])
                continue
            kept.prompts.append(p)
            kept.groups.append(g)
            kept.reasons.append(reasons[gi])
            rows.append(rewards[gi])

    def old_policy(self, batch: TrainBatch, measured: dict, timing: dict) -> OldPolicy:
        """The sampling policy's log-probs and entropy; measures the train–inference gap and routing agreement."""
        reuse = self.rollout_is_policy and all(c.entropies is not None for c in batch.completions)
        t0 = time.perf_counter()
        if reuse:          # old log-probs = the update forward's own (ratio 1); entropy from the sampler
            logp, entropy, free_routes = None, batch.rollout("entropies"), None
        else:
            logp, entropy, free_routes = self.trainer_logprobs(batch.tensors, batch.routes)
            measured.update(logprob_gap(logp, batch.rollout_logp, batch.mask))
        timing["old_logp"] = time.perf_counter() - t0
        if self.cfg.trainer.router_replay:        # free routing: the mismatch replay removes
            free_logp, _, free_routes = self.trainer_logprobs(batch.tensors, None)
            measured["logp_gap_mean_no_replay"] = logprob_gap(free_logp, batch.rollout_logp,
                                                              batch.mask)["logp_gap_mean"]
        measured.update(routing_metrics(batch, free_routes))
        return OldPolicy(logp, entropy, reuse)

    def trainer_logprobs(self, tensors: dict, routes: torch.Tensor | None):
        """Trainer log-probs and entropy ``[B, L-1]``, and the trainer's own routes when it routed freely."""
        if routes is None:
            return self.trainer.logprobs_with_routes(tensors)
        return (*self.trainer.logprobs(tensors, routes), None)

    def advantages(self, step: int, drawn: Drawn, batch: TrainBatch,
                   old: OldPolicy) -> tuple[torch.Tensor, torch.Tensor]:
        """``[B, L-1]`` token advantages of the configured estimator and their ``[B]`` per-completion means;
        records every completion's rollout row."""
        adv = compute_advantages(drawn.rewards, batch.mask, old.entropy, self.cfg)
        per_completion = completion_advantages(adv, batch.mask)
        at = 0
        for gi, (p, g) in enumerate(zip(drawn.prompts, drawn.groups)):
            self._record(step, p, g, drawn.rewards[gi], per_completion[at:at + len(g)], drawn.reasons[gi])
            at += len(g)
        return adv, per_completion

    def update(self, batch: TrainBatch, adv: torch.Tensor, old: OldPolicy, measured: dict,
               timing: dict) -> list[dict]:
        """One optimizer step per mini-batch (PPO style); returns each one's trainer metrics ([] when no
        completion is left to train on)."""
        keep = torch.arange(adv.shape[0])
        if self.cfg.sampling.drop_zero_variance:          # completions with no signal cost compute and teach nothing
            keep = keep[adv.ne(0).any(dim=1)]
        measured["update_samples"] = int(keep.numel())
        if keep.numel() == 0:
            return []
        chunks = keep.tensor_split(min(self.cfg.trainer.mini_batches, int(keep.numel())))
        old_logp = old.logp
        if len(chunks) > 1 and old_logp is None:     # later mini-batches meet a moved policy
            old_logp = batch.rollout_logp
        t0 = time.perf_counter()
        ups = []
        for k, idx in enumerate(chunks):
            mb = batch.rows(idx)
            # ESPO's clip is set by the sampling policy's entropy (its eq. (6)), not the moved policy's
            ent = old.entropy[idx] if old.entropy is not None and len(chunks) > 1 else None
            ups.append(self.trainer.update(mb.tensors, adv[idx], None if old_logp is None else old_logp[idx],
                                           self.cfg, mb.routes, ent))
            if k == 0 and old.reused:            # the first step's forward is the rollout policy: the gap
                pre_step = self.trainer.pre_step_logprobs()
                if pre_step is not None:
                    measured.update(logprob_gap(pre_step, batch.rollout_logp[idx], mb.mask))
        timing["update"] = time.perf_counter() - t0
        measured["mini_batches"] = len(ups)
        return ups

    def sync(self, timing: dict) -> None:
        t0 = time.perf_counter()
        self.sync_rollout()
        timing["sync"] = time.perf_counter() - t0

    def _record(self, step, p: RLPrompt, group, rewards_row, adv_row, reasons_row) -> None:
        eos = self.tok.eos_token_id
        for si, c in enumerate(group):
            self.rollouts.append({"step": step, "prompt_id": p.id, "sample_idx": si, "response": c.text,
                                  "reward": float(rewards_row[si]), "reward_reason": reasons_row[si],
                                  "num_tokens": len(c.ids),
                                  "advantage": 0.0 if adv_row is None else float(adv_row[si]),
                                  "domain": p.domain, "task": p.task,
                                  "truncated": len(c.ids) == 0 or c.ids[-1] != eos})

    def run(self) -> RLResult:
        cfg = self.cfg
        torch.manual_seed(cfg.seed)
        self.restore()
        at = self.start                    # the step being run (named when the trainer actor dies)

        def steps() -> None:
            nonlocal at
            for step in progress(range(self.start, cfg.steps), desc=self.desc, unit="step"):
                at = step
                row = self.step(step)
                self.metrics.log(row)
                self.log.log(step_level(), "%s step %d: reward %.3f, zero-variance %.2f (all-pass %d, all-fail %d "
                             "of %d groups of N=%d; %d skipped before rollout), informative tokens %.2f, |A| %.3f, "
                             "gap %.2e, %d tokens, %.2fs", self.desc, step, row["reward_mean"],
                             row["zero_variance_rate"], row["zero_variance_all_pass"], row["zero_variance_all_fail"],
                             row["groups"], row["group_size"], row["prompts_skipped"],
                             row["informative_token_share"], row.get("adv_abs_mean", 0.0),
                             row.get("logp_gap_mean", 0.0), row["tokens"], row["time_step_s"])
                if self.state_dir is not None and cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0:
                    self.save(step + 1)
                if self.on_step is not None:
                    self.trained_weights_to_model()
                    self.on_step(step, row, self.model)
                if cfg.rollout_token_budget and self.rollout_tokens >= cfg.rollout_token_budget:
                    self.log.info("%s: rollout token budget %d reached at step %d", self.desc,
                                  cfg.rollout_token_budget, step)
                    break
            self.trained_weights_to_model()         # the HF policy the stage saves gets the trained weights

        died: tuple = ()
        if cfg.trainer.actor or getattr(self.trainer, "on_ray", False):      # one actor, or ranks on Ray
            from compass.rl.trainer.ray_actor import TrainerActorDied
            died = (TrainerActorDied,)
        resume: tuple | None = None        # (the saved state, what happened) once the trainer actor died
        while True:
            try:
                if resume is not None:     # in the try: a death while restoring is one more fault, met below
                    self.trainer.restart()
                    self.restore(*resume)
                    resume = None
                steps()
                break
            except died as e:
                # the trainer's actor died (killed, out of memory, node lost): a fresh actor from the first weights
                # plus the last saved RL state is the run as it was then. Without a state, or past the budget, the
                # error ends the run (the stage task retries it; its re-run resumes from the saved state)
                state = load_state(self.state_dir)
                if state is None:
                    raise
                if self.trainer.restarts >= cfg.trainer.max_restarts:
                    raise type(e)(f"{e} (trainer.max_restarts={cfg.trainer.max_restarts} used up)") from e
                resume = (state, f"{e} (at step {at})")
        return RLResult(metrics=self.metrics.rows, rollouts=self.rollouts, prompt_stats=self.stats,
                        trainer_restarts=getattr(self.trainer, "restarts", 0))
