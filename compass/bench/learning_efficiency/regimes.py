"""The two regimes every method runs in: their RL pool, held-out set and shared RL settings.

- ``paper``: the paper's setting for zero-variance elimination, where RL also teaches. Binary rewards only
  (arithmetic); a pool of three tiers: level 2, which the SFT model mostly solves (the all-pass mass),
  level 3, the learnable middle (grader pass rate ~0.35, a third of its groups zero-variance at N = 8;
  GRPO moves its held-out reward ~+0.1 within the budget), and level 5, which it mostly fails (the
  all-fail mass, ~0.05, dead for every method); level 5 weighs 1.5 in the pool so that GRPO's
  zero-variance share z is >= 0.5. 4 optimizer steps per rollout batch (the clip ranges act). Held out:
  the world's held-out arithmetic prompts of the same tiers, equally many per tier.
- ``lowz``: the control: a seeded sample of the world's RL prompts (arithmetic of every tier + ifeval's
  partial credit), one optimizer step per batch, z ~ 0.4, where the skip has little to take.

Why these tiers (measured on start 0, one GRPO seed each, before the regime was fixed): levels 2 + 5 alone
(the former regime) moved held-out reward +0.02 (level 5 stays at ~0.05, level 2 near its ceiling);
lr 2e-4 or 1e-4 instead of 5e-5 made it worse or no better; levels 2 + 3 + 5 at 5e-5 moved it +0.03 and
+0.06 on two seeds, the gain on level 3.

The pools are the world's RL prompts (no prompt is in SFT or held out); the world has no level-1 RL
prompt (its level-1 space is used up by the held-out and SFT items), so the easy tier is level 2.
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from compass.rl.sampling.prompt_data import RLPrompt, prompts_from_table


@dataclass(frozen=True)
class Regime:
    name: str
    description: str
    tasks: tuple[str, ...]               # suites in the pool and the held-out set
    tiers: tuple[int, ...] | None        # arithmetic difficulty levels in both (None: every level, as drawn)
    pool: int                            # RL prompts (a seeded sample; split across tiers by tier_weights)
    heldout: dict                        # task -> held-out prompts (the first ones of the allowed tiers)
    budget: int                          # rollout tokens per run
    milestones: int                      # held-out evaluations per run, at budget * (i / milestones)^spacing
    eval_samples: int                    # completions per held-out prompt
    mini_batches: int = 1
    prompts_per_step: int = 8
    group_size: int = 8
    max_new_tokens: int = 48
    lr: float = 5e-5
    spacing: float = 2.0                 # > 1: milestones denser early, where the curves are steep
    tier_weights: tuple[float, ...] | None = None   # the pool's share of each tier (None: equal); held out stays equal

    def rl_settings(self) -> dict:
        return {"budget": self.budget, "max_new_tokens": self.max_new_tokens, "lr": self.lr,
                "mini_batches": self.mini_batches, "prompts_per_step": self.prompts_per_step,
                "group_size": self.group_size}

    def milestone_tokens(self) -> tuple[int, ...]:
        """Denser early, where curves are steep."""
        return tuple(round(self.budget * (i / self.milestones) ** self.spacing) for i in range(self.milestones + 1))

    def with_overrides(self, overrides: dict) -> "Regime":
        fields = {f.name: f.type for f in dataclasses.fields(self)}
        clean = {}
        for key, value in overrides.items():
            if key not in fields or key in ("name", "description", "heldout"):
                raise ValueError(f"regime {self.name}: cannot set '{key}' (settable: "
                                 f"{', '.join(k for k in fields if k not in ('name', 'description', 'heldout'))})")
            if key == "tasks":
                clean[key] = tuple(value.split(","))
            elif key == "tiers":
                clean[key] = None if value in ("", "all", "none") else tuple(int(x) for x in value.split(","))
            elif key == "tier_weights":
                clean[key] = None if value in ("", "none") else tuple(float(x) for x in value.split(","))
            else:
                clean[key] = type(getattr(self, key))(value)
        if "tiers" in clean and "tier_weights" not in clean:
            clean["tier_weights"] = None            # new tiers, equal shares unless weights are given too
        out = dataclasses.replace(self, **clean)
        if out.tier_weights is not None and (out.tiers is None or len(out.tier_weights) != len(out.tiers)):
            raise ValueError(f"regime {self.name}: tier_weights {out.tier_weights} needs one weight per tier "
                             f"(tiers {out.tiers})")
        return out


REGIMES = {
    "paper": Regime("paper", "binary rewards; an easy, a learnable middle and a hard tier (z >= 0.5); "
                             "4 updates per rollout batch",
                    tasks=("arithmetic",), tiers=(2, 3, 5), tier_weights=(1.0, 1.0, 1.5), pool=210,
                    heldout={"arithmetic": 180}, budget=80_000, milestones=5, eval_samples=8, mini_batches=4),
    "lowz": Regime("lowz", "the earlier setting: arithmetic + ifeval partial credit, 1 update per batch",
                   tasks=("arithmetic", "ifeval"), tiers=None, pool=200,
                   heldout={"arithmetic": 200, "ifeval": 50}, budget=80_000, milestones=5, eval_samples=4),
}

QUICK = {  # second-long runs on the quick world (numbers mean nothing)
    "paper": dict(pool=24, budget=300, milestones=2, eval_samples=2, prompts_per_step=2, group_size=4,
                  max_new_tokens=12, heldout={"arithmetic": 8}),
    "lowz": dict(pool=24, budget=300, milestones=2, eval_samples=2, prompts_per_step=2, group_size=4,
                 max_new_tokens=12, heldout={"arithmetic": 6, "ifeval": 2}),
}


def levels(table) -> dict[str, int | None]:
    """Prompt id -> difficulty level (1..5; None for suites without levels) of a prompts table."""
    return dict(zip(table.column("id").to_pylist(), table.column("difficulty").to_pylist()))


def _allowed(regime: Regime, p: RLPrompt, level: int | None) -> bool:
    if p.task not in regime.tasks:
        return False
    return regime.tiers is None or p.task != "arithmetic" or level in regime.tiers


def pool(regime: Regime, world) -> list[RLPrompt]:
    """The regime's RL prompts: a seeded sample of the world's RL prompts of its tasks (and tiers)."""
    level = levels(world.raw_prompts)
    cands = [p for p in prompts_from_table(world.raw_prompts) if _allowed(regime, p, level[p.id])]
    rng = random.Random(0)
    if regime.tiers is None:
        return rng.sample(cands, regime.pool) if 0 < regime.pool < len(cands) else cands
    w = regime.tier_weights or (1.0,) * len(regime.tiers)
    out = []
    for t, wt in zip(regime.tiers, w):
        tier = [p for p in cands if level[p.id] == t]
        out += rng.sample(tier, min(round(regime.pool * wt / sum(w)), len(tier)))
    rng.shuffle(out)
    return out


def heldout(regime: Regime, world) -> tuple[list[RLPrompt], dict[str, str]]:
    """The held-out prompts (the first of each task's allowed ones: the world cycles the levels, so these
    are balanced across them) and each one's label for per-group results (``arithmetic/L5``, ``ifeval``)."""
    level = levels(world.eval_prompts)
    out, labels = [], {}
    for task, n in regime.heldout.items():
        picked = [p for p in prompts_from_table(world.eval_prompts)
                  if p.task == task and _allowed(regime, p, level[p.id])][:n]
        out += picked
        labels.update({p.id: f"{task}/L{level[p.id]}" if task == "arithmetic" else task for p in picked})
    return out, labels


def tier_label(p: RLPrompt, level: dict[str, int | None]) -> str:
    return f"{p.task}/L{level[p.id]}" if p.task == "arithmetic" else p.task
