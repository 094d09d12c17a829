"""The methods compared, as RLConfig sections, and the RLConfig of one run.

Every method shares the regime's settings (prompts per step, group size, tokens, lr, mini-batches,
budget) and differs only in the sections below. ``ours`` is the paper's zero-variance elimination
(§2.4.1) plus its loss: skip prompts predicted zero-variance before rollout from the grader's pass rates
and the policy's own groups, choose N from the same beliefs, RL-ZVP on the zero-variance groups that
remain, ESPO (α 0.1, docs/rl.md "α for this project"). Each ``ours-no-*`` removes one of those four;
``ours-zvp-1.0`` is ``ours`` with RL-ZVP's α at the value the same rule gives this start.
"""
from __future__ import annotations

GRPO_LOSS = {"kind": "ppo_clip_token_mean", "clip_eps": 0.2}
DAPO_LOSS = {"kind": "ppo_clip_token_mean", "clip_eps": 0.2, "clip_eps_high": 0.28}


def prefilter(prior_weight: float) -> dict:
    """``sampling.prefilter``, the same for ``greso`` and ``ours`` but for the prior's weight; the rest are
    the engine's defaults (skip chance min(0.95, P_zv) · 0.8^skips_in_a_row above P_zv 0.6)."""
    return {"prior_weight": prior_weight}


AUTO_N: dict = {}           # sampling.auto_group_size with the engine's defaults (N in 2, 4, 8, 16; tol 0.1; every step)
ZVP_CALIBRATED = 1.0        # RL-ZVP's α by docs/rl.md's rule on this start (0.86-1.00); the default is the paper's 0.1


def methods(grader_k: int) -> dict[str, dict]:
    """Name -> RLConfig sections (``sampling`` keys join the regime's). ``grader_k``: samples per prompt
    the grader measured; its pass rate counts as that many samples in ``ours``' prior."""
    ours_sampling = {"prefilter": prefilter(grader_k), "auto_group_size": AUTO_N}
    ours = {"advantage": {"kind": "rl_zvp"}, "loss": {"kind": "espo"}, "sampling": ours_sampling}
    return {
        "grpo": {"advantage": {"kind": "grpo"}, "loss": GRPO_LOSS},
        "dapo": {"advantage": {"kind": "grpo"}, "loss": DAPO_LOSS, "sampling": {"dynamic": True}},
        "greso": {"advantage": {"kind": "grpo"}, "loss": GRPO_LOSS, "sampling": {"prefilter": prefilter(0.0)}},
        "ours": ours,
        "ours-no-prefilter": {**ours, "sampling": {"auto_group_size": AUTO_N}},
        "ours-no-autoN": {**ours, "sampling": {"prefilter": prefilter(grader_k)}},
        "ours-no-zvp": {**ours, "advantage": {"kind": "grpo"}},
        "ours-no-espo": {**ours, "loss": GRPO_LOSS},
        "ours-zvp-1.0": {**ours, "advantage": {"kind": "rl_zvp", "alpha": ZVP_CALIBRATED}},
    }


ABLATIONS = ("ours-no-prefilter", "ours-no-autoN", "ours-no-zvp", "ours-no-espo")
VARIANTS = ("ours-zvp-1.0",)          # ours with another setting (not an ablation)
ALL = ("grpo", "dapo", "greso", "ours", *ABLATIONS, *VARIANTS)


def rl_config(method: dict, *, seed: int, budget: int, max_new_tokens: int, lr: float, mini_batches: int,
              prompts_per_step: int, group_size: int):
    from compass.rl.config import RLConfig
    return RLConfig(seed=seed, steps=100_000, rollout_token_budget=budget, checkpoint_every=0,
                    rollout={"max_new_tokens": max_new_tokens},
                    trainer={"lr": lr, "mini_batches": mini_batches},
                    sampling={"prompts_per_step": prompts_per_step, "group_size": group_size,
                              **method.get("sampling", {})},
                    advantage=method["advantage"], loss=method["loss"])
