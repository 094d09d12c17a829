"""The methods compared, as RLConfig sections, and the RLConfig of one run.

Every method shares the regime's settings (prompts per step, group size, tokens, lr, mini-batches,
budget) and differs only in the sections below. ``ours`` is what the pipeline ships: the reasoning-RL
stage's ``advantage``, ``loss`` and zero-variance sampling (``prefilter``, ``auto_group_size``) read from
the embedded default ``configs/tiny.yaml``, so the bench measures the method the RL stages run and follows
it when the config changes. On top of it: ``ours+espo`` (ESPO's loss, α 0.1), ``ours+zvp`` (RL-ZVP's
advantage, α 0.1) and ``ours+espo+zvp`` (both: the paper's whole method); ``ours-no-prefilter`` and
``ours-no-autoN`` take one part of the shipped sampling away; ``grpo-n4`` is GRPO with groups of 4, the
size the measured N mostly picks (is a saving only the smaller groups?).
"""
from __future__ import annotations

from pathlib import Path

GRPO_LOSS = {"kind": "ppo_clip_token_mean", "clip_eps": 0.2}
DAPO_LOSS = {"kind": "ppo_clip_token_mean", "clip_eps": 0.2, "clip_eps_high": 0.28}
SAMPLING_KEYS = ("prefilter", "auto_group_size", "dynamic")     # the method's part of ``sampling``
STAGE = "reasoning_rl"
SMALL_N = 4                   # grpo-n4's group size: the smallest of the shipped auto_group_size candidates


def shipped(config: str | Path | None = None) -> dict:
    """The RLConfig sections of the reasoning-RL stage in ``config`` (default: the embedded default
    ``configs/tiny.yaml``): ``advantage``, ``loss`` and the method's keys of ``sampling``; the stage's
    batch shape, lr and budget are the regime's, not the method's."""
    import yaml
    from compass.dag.pipeline_yaml import EMBEDDED_DEFAULT
    path = Path(config) if config else EMBEDDED_DEFAULT
    section = (yaml.safe_load(path.read_text()) or {}).get(STAGE)
    if not section or "advantage" not in section or "loss" not in section:
        raise ValueError(f"{path}: no '{STAGE}' section with 'advantage' and 'loss' to measure as shipped")
    sampling = {k: v for k, v in (section.get("sampling") or {}).items() if k in SAMPLING_KEYS}
    return {"advantage": dict(section["advantage"]), "loss": dict(section["loss"]), "sampling": sampling}


def methods(config: str | Path | None = None) -> dict[str, dict]:
    """Name -> RLConfig sections (``sampling`` keys join the regime's); ``ours`` from ``config``'s
    reasoning-RL stage (:func:`shipped`). ``greso`` ignores the grader: its skip rests on the run's own
    history. How much the grader's pass rate weighs is the shipped prefilter's ``prior_weight``."""
    ours = shipped(config)
    samp = ours["sampling"]
    espo = {"kind": "espo"}
    zvp = {"kind": "rl_zvp"}
    return {
        "grpo": {"advantage": {"kind": "grpo"}, "loss": GRPO_LOSS},
        "dapo": {"advantage": {"kind": "grpo"}, "loss": DAPO_LOSS, "sampling": {"dynamic": True}},
        "greso": {"advantage": {"kind": "grpo"}, "loss": GRPO_LOSS, "sampling": {"prefilter": {"prior_weight": 0.0}}},
        "ours": ours,
        "ours-no-prefilter": {**ours, "sampling": {k: v for k, v in samp.items() if k != "prefilter"}},
        "ours-no-autoN": {**ours, "sampling": {k: v for k, v in samp.items() if k != "auto_group_size"}},
        "ours+espo": {**ours, "loss": espo},
        "ours+zvp": {**ours, "advantage": zvp},
        "ours+espo+zvp": {**ours, "loss": espo, "advantage": zvp},
        "grpo-n4": {"advantage": {"kind": "grpo"}, "loss": GRPO_LOSS, "sampling": {"group_size": SMALL_N}},
    }


ABLATIONS = ("ours-no-prefilter", "ours-no-autoN")
VARIANTS = ("ours+espo", "ours+zvp", "ours+espo+zvp")        # ours with a part added (the paper's loss, advantage)
CONTROLS = ("grpo-n4",)       # grpo at the small N the measured N mostly picks: is the saving just smaller groups?
ALL = ("grpo", "dapo", "greso", "ours", *ABLATIONS, *VARIANTS, *CONTROLS)


def uses_grades(sections: dict) -> bool:
    """Whether a method reads the grader's pass rates: a prefilter whose prior has weight, or a group size
    chosen from the same beliefs."""
    samp = sections.get("sampling", {})
    pre = samp.get("prefilter")
    return (pre is not None and pre.get("prior_weight", 1.0) > 0) or "auto_group_size" in samp


def rl_config(method: dict, *, seed: int, budget: int, max_new_tokens: int, lr: float, mini_batches: int,
              prompts_per_step: int, group_size: int):
    from compass.rl.config import RLConfig
    return RLConfig(seed=seed, steps=100_000, rollout_token_budget=budget, checkpoint_every=0,
                    rollout={"max_new_tokens": max_new_tokens},
                    trainer={"lr": lr, "mini_batches": mini_batches},
                    sampling={"prompts_per_step": prompts_per_step, "group_size": group_size,
                              **method.get("sampling", {})},
                    advantage=method["advantage"], loss=method["loss"])
