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


@register_advantage("rl_zvp")
def rl_zvp(rewards: torch.Tensor, *, entropy: torch.Tensor, mask: torch.Tensor, eps: float = 1e-6,
           pass_threshold: float = 0.5, zvp_alpha: float = 0.1) -> torch.Tensor:
    """RL-ZVP (Le et al. 2025, arXiv 2509.21880, eq. 5): GRPO on groups with reward spread, and
    entropy-guided token advantages on zero-variance groups instead of zeros.

    ``rewards`` ``[G, N]``; ``entropy`` ``[G*N, T]`` (the policy's entropy over the
    vocabulary at each completion token; treated as a constant) and ``mask``
    ``[G*N, T]`` (1 on completion tokens), completions in group-major order.
    Returns ``[G*N, T]`` token advantages (0 off the mask):

    - group with spread: ``A[i, t] = grpo(r)[i]`` on every token;
    - zero-variance, all passed (common reward > ``pass_threshold``):
      ``A[i, t] = α · H[i, t]``: reinforce, most where the policy was unsure;
    - zero-variance, all failed: ``A[i, t] = -α · (max_k H[i, k] - H[i, t])``, max over
      the completion's own tokens: penalise, most where the policy was confident.
    """
    if rewards.dim() != 2 or rewards.size(1) < 2:
        raise ValueError(f"rl_zvp: rewards must be [num_groups, group_size>=2], got shape {tuple(rewards.shape)}")
    G, N = rewards.shape
    if entropy.dim() != 2 or entropy.shape != mask.shape or entropy.size(0) != G * N:
        raise ValueError(f"rl_zvp: entropy and mask must both be [G*N={G * N}, T]; got entropy "
                         f"{tuple(entropy.shape)}, mask {tuple(mask.shape)}")
    m = mask.to(torch.float32)
    h = entropy.detach().float() * m                                            # [B, T]
    seq = grpo(rewards.float(), eps=eps).reshape(-1, 1).expand_as(h)           # [B, T]
    zv = zero_variance_groups(rewards).repeat_interleave(N)                     # [B]
    passed = (rewards[:, 0] > pass_threshold).repeat_interleave(N)             # [B]
    h_max = h.amax(dim=1, keepdim=True)                                         # entropy >= 0, so pads (0) never win
    zvp_pos = zvp_alpha * h
    zvp_neg = -zvp_alpha * (h_max - h)
    zvp = torch.where(passed.unsqueeze(1), zvp_pos, zvp_neg)
    return torch.where(zv.unsqueeze(1), zvp, seq) * m
