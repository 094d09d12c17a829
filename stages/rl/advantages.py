"""Advantage estimators: pure functions on group rewards, registered by name.

Every estimator has the signature ``fn(rewards, *, eps, **options) -> advantages``
with ``rewards`` a float tensor ``[num_groups, group_size]`` (one row per
prompt, one column per sampled completion) and the result of the same shape:
one scalar advantage per completion, broadcast over its tokens by the loss.
Estimators that need more than rewards (RL-ZVP shaping needs per-token
entropy) will take it as extra keyword options; the engine passes only what
the chosen estimator's signature accepts.
"""
from __future__ import annotations

from typing import Callable

import torch

from stages.common.named_registry import Registry

AdvantageFn = Callable[..., torch.Tensor]
ADVANTAGES = Registry("advantage estimator")
register_advantage = ADVANTAGES.register


def get_advantage(name: str) -> AdvantageFn:
    return ADVANTAGES.lookup(name)


def zero_variance_groups(rewards: torch.Tensor) -> torch.Tensor:
    """``[G, N]`` rewards -> ``[G]`` bool: True where every completion got the same reward."""
    return rewards.amax(dim=-1) == rewards.amin(dim=-1)


@register_advantage("grpo")
def grpo(rewards: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """GRPO group normalisation: ``A[g, i] = (r[g, i] - mean_g) / (std_g + eps)``.

    ``rewards``: ``[G, N]`` float; returns ``[G, N]`` (float32 or the input's float dtype).
    ``std_g`` is the unbiased (Bessel-corrected) standard deviation over the
    group, as in verl and TRL; a group whose rewards are all equal
    (zero-variance) gets exactly 0 for every completion: no learning signal,
    rather than rounding noise divided by ``eps``.
    """
    if rewards.dim() != 2 or rewards.size(1) < 2:
        raise ValueError(f"grpo: rewards must be [num_groups, group_size>=2], got shape {tuple(rewards.shape)}")
    r = rewards if rewards.is_floating_point() else rewards.float()
    mean = r.mean(dim=1, keepdim=True)
    std = r.std(dim=1, keepdim=True, unbiased=True)
    adv = (r - mean) / (std + eps)
    return torch.where(zero_variance_groups(r).unsqueeze(1), torch.zeros_like(adv), adv)


@register_advantage("dr_grpo")
def dr_grpo(rewards: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-like training"): ``A[g, i] = r[g, i] - mean_g``.

    ``rewards``: ``[G, N]`` float; returns ``[G, N]``. No division by the group
    std, which biases updates toward groups with tiny spread (too easy or too
    hard prompts); zero-variance groups get exactly 0. ``eps`` is accepted for a
    uniform signature and unused.
    """
    if rewards.dim() != 2 or rewards.size(1) < 2:
        raise ValueError(f"dr_grpo: rewards must be [num_groups, group_size>=2], got shape {tuple(rewards.shape)}")
    r = rewards if rewards.is_floating_point() else rewards.float()
    return r - r.mean(dim=1, keepdim=True)
