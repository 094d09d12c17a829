"""Advantage flipping (paper §2.4.3): where a reward model turns a GRPO advantage the wrong way.

A *group* is the responses to one prompt, each with a true reward (1 correct, 0 wrong)
and a model reward (a Bradley–Terry scalar, or the GenRM's better-or-equal reward
against the reference). Model advantages are GRPO's, computed exactly as the RL engine
does (``compass.rl.algos.advantages.group_normalized``: ``(r - mean_g) / (std_g + eps)``, 0 for a group
whose rewards are all equal). A response is **flipped** when

* it is correct and its model advantage is negative (``< -tol``), or
* it is wrong and its model advantage is positive (``> tol``).

This counts both kinds the paper names: in a mixed group, a scalar ranking a wrong
response above a right one pushes the policy the wrong way; in an all-correct group
the true advantage is 0, but any spread of a continuous scalar still normalizes to
±1-sized advantages, so some correct responses get pushed down. A ternary GenRM
gives every equally-good response the same reward (TIE → 1), hence advantage 0.
A response of a mixed group that gets advantage 0 is not a flip but lost signal
(``missed``: e.g. a judge that writes no verdict for any response). ``tol`` (default 1e-6) only absorbs float rounding: GRPO's std normalization makes
any real score gap a full-sized advantage.

Used by the GenRM stage (Bradley–Terry vs GenRM on held-out groups) and by the RL stages' GenRM reward
(``compass.rl.genrm_reward``: the judge's rewards against the rules verifier's).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from compass.rl.algos.advantages import group_normalized


def group_advantages(rewards: list[float], eps: float = 1e-6) -> list[float]:
    """GRPO advantages of one group's ``[N]`` rewards (N >= 2)."""
    return group_normalized(torch.tensor([rewards], dtype=torch.float64), eps=eps)[0].tolist()


def flipped(true_rewards: list[float], advantages: list[float], tol: float = 1e-6) -> list[bool]:
    """Per response: correct (true reward > 0.5) with advantage < -tol, or wrong with advantage > tol."""
    if len(true_rewards) != len(advantages):
        raise ValueError(f"flipped: {len(true_rewards)} true rewards for {len(advantages)} advantages")
    return [(t > 0.5 and a < -tol) or (t <= 0.5 and a > tol) for t, a in zip(true_rewards, advantages)]


def advantage_flips(model_rewards: Sequence[float], true_rewards: Sequence[float], tol: float = 1e-6) -> int:
    """Responses of one group whose GRPO advantage under ``model_rewards`` points the wrong way for
    ``true_rewards`` (``flipped``); 0 when the model rewards do not vary."""
    return sum(flipped(list(true_rewards), group_advantages(list(model_rewards)), tol))


@dataclass
class FlipCount:
    groups: int = 0
    responses: int = 0
    flips: int = 0                  # flipped responses
    groups_flipped: int = 0         # groups with at least one flipped response
    flips_all_correct: int = 0      # of ``flips``, in groups where every response is correct
    missed: int = 0                 # responses of mixed groups (true advantage != 0) given advantage 0: no signal

    def add(self, true_rewards: list[float], model_rewards: list[float],
            tol: float = 1e-6) -> tuple[list[float], list[bool]]:
        """Count one group; returns its model advantages and which responses they flip."""
        adv = group_advantages(model_rewards)
        f = flipped(true_rewards, adv, tol)
        self.groups += 1
        self.responses += len(f)
        self.flips += sum(f)
        self.groups_flipped += any(f)
        if all(t > 0.5 for t in true_rewards):
            self.flips_all_correct += sum(f)
        if len({t > 0.5 for t in true_rewards}) == 2:
            self.missed += sum(abs(a) <= tol for a in adv)
        return adv, f

    def as_dict(self) -> dict:
        return dict(self.__dict__, flip_rate=self.flips / self.responses if self.responses else None)
