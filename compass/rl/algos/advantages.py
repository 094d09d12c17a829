"""Advantage estimators: pure functions on group rewards, registered by name.

Every estimator has one signature::

    fn(rewards, mask, *, entropy=None, pass_threshold=0.5, **settings) -> advantages

- ``rewards`` ``[G, N]`` float: one row per prompt, one column per sampled completion;
- ``mask`` ``[B, T]`` (``B = G*N``, completions in group-major order): 1 on completion tokens;
- ``entropy`` ``[B, T]`` or None: the policy's entropy at each token (token-level estimators need it);
- ``pass_threshold``: a completion passed when its reward is above it;
- ``settings``: the estimator's own options (e.g. ``eps``), the fields of its config entry;
- returns ``[B, T]`` float32 per-token advantages, 0 off the mask.

Sequence-level estimators (GRPO, Dr. GRPO) give every token of a completion the completion's
advantage; token-level ones (RL-ZVP) shape it per token and are registered with ``token_level=True``.
"""
from __future__ import annotations

from typing import Callable

import torch

from compass.registry import Registry

AdvantageFn = Callable[..., torch.Tensor]
ADVANTAGES = Registry("advantage estimator")


def register_advantage(name: str, *, token_level: bool = False):
    """Decorator: register an estimator under ``name``; ``token_level`` says its advantages vary
    within a completion (read by the ``adv_abs_mean`` metric, which averages over tokens then)."""
    def deco(fn):
        fn.token_level = token_level
        return ADVANTAGES.register(name)(fn)
    return deco


def get_advantage(name: str) -> AdvantageFn:
    return ADVANTAGES.lookup(name)


def zero_variance_groups(rewards: torch.Tensor) -> torch.Tensor:
    """``[G, N]`` rewards -> ``[G]`` bool: True where every completion got the same reward."""
    return rewards.amax(dim=-1) == rewards.amin(dim=-1)


def _check_rewards(name: str, rewards: torch.Tensor) -> torch.Tensor:
    if rewards.dim() != 2 or rewards.size(1) < 2:
        raise ValueError(f"{name}: rewards must be [num_groups, group_size>=2], got shape {tuple(rewards.shape)}")
    return rewards if rewards.is_floating_point() else rewards.float()


def over_tokens(per_completion: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[G, N]`` (or ``[B]``) per-completion advantages -> ``[B, T]`` float32: each completion's value on
    its tokens, 0 off the mask."""
    return per_completion.reshape(-1, 1).float() * mask.to(torch.float32)


def group_normalized(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """GRPO group normalisation: ``A[g, i] = (r[g, i] - mean_g) / (std_g + eps)``.

    ``rewards``: ``[G, N]`` float; returns ``[G, N]`` (float32 or the input's float dtype).
    ``std_g`` is the unbiased (Bessel-corrected) standard deviation over the
    group, as in verl and TRL; a group whose rewards are all equal
    (zero-variance) gets exactly 0 for every completion: no learning signal,
    rather than rounding noise divided by ``eps``.
    """
    r = _check_rewards("grpo", rewards)
    mean = r.mean(dim=1, keepdim=True)
    std = r.std(dim=1, keepdim=True, unbiased=True)
    adv = (r - mean) / (std + eps)
    return torch.where(zero_variance_groups(r).unsqueeze(1), torch.zeros_like(adv), adv)


def group_centered(rewards: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-like training"): ``A[g, i] = r[g, i] - mean_g``.

    ``rewards``: ``[G, N]`` float; returns ``[G, N]``. No division by the group
    std, which biases updates toward groups with tiny spread (too easy or too
    hard prompts); zero-variance groups get exactly 0.
    """
    r = _check_rewards("dr_grpo", rewards)
    return r - r.mean(dim=1, keepdim=True)


@register_advantage("grpo")
def grpo(rewards: torch.Tensor, mask: torch.Tensor, *, entropy: torch.Tensor | None = None,
         pass_threshold: float = 0.5, eps: float = 1e-6) -> torch.Tensor:
    """:func:`group_normalized` ``[G, N]`` over each completion's tokens: ``[B, T]``."""
    return over_tokens(group_normalized(rewards, eps), mask)


@register_advantage("dr_grpo")
def dr_grpo(rewards: torch.Tensor, mask: torch.Tensor, *, entropy: torch.Tensor | None = None,
            pass_threshold: float = 0.5) -> torch.Tensor:
    """:func:`group_centered` ``[G, N]`` over each completion's tokens: ``[B, T]``."""
    return over_tokens(group_centered(rewards), mask)


@register_advantage("rl_zvp", token_level=True)
def rl_zvp(rewards: torch.Tensor, mask: torch.Tensor, *, entropy: torch.Tensor | None = None,
           pass_threshold: float = 0.5, eps: float = 1e-6, alpha: float = 0.1) -> torch.Tensor:
    """RL-ZVP (Le et al. 2025, arXiv 2509.21880, eq. 5): GRPO on groups with reward spread, and
    entropy-guided token advantages on zero-variance groups instead of zeros.

    ``rewards`` ``[G, N]``; ``entropy`` ``[G*N, T]`` (the policy's entropy over the vocabulary at each
    completion token, treated as a constant: the paper's footnote 3) and ``mask`` ``[G*N, T]`` (1 on
    completion tokens), completions in group-major order. Returns ``[G*N, T]`` token advantages, 0 off the mask:

    - group with spread: ``A[i, t] = grpo(r)[i]`` on every token (eq. 1; eq. 6's "otherwise" branch);
    - zero-variance, all passed: ``A[i, t] = α · H[i, t]``: reinforce, most where the policy was unsure;
    - zero-variance, all failed: ``A[i, t] = -α · (max_{k ≤ |o_i|} H[i, k] - H[i, t])``, the max over the
      completion's own tokens (eq. 5's ``max_{k=1}^{|o_i|}``): penalise, most where the policy was confident;
      the completion's most uncertain token gets 0.

    The paper splits zero-variance groups by ``R_i > 0`` with binary rewards {0, 1}; here a group passed
    when its common reward is above ``pass_threshold`` (the same split for binary rewards and any threshold
    in [0, 1); ``pass_threshold=0`` is the paper's test for any reward). ``α`` = 0.1 is the paper's best
    (Table 3, with 0.2 close), tuned where the top 20% of tokens by entropy held 2-10 nats (§4.3);
    docs/rl.md carries it to this project's entropy scale.
    """
    _check_rewards("rl_zvp", rewards)
    G, N = rewards.shape
    if entropy is None or entropy.dim() != 2 or entropy.shape != mask.shape or entropy.size(0) != G * N:
        raise ValueError(f"rl_zvp: entropy and mask must both be [G*N={G * N}, T]; got entropy "
                         f"{None if entropy is None else tuple(entropy.shape)}, mask {tuple(mask.shape)}")
    valid = mask.bool()
    h = entropy.detach().float().masked_fill(~valid, 0.0)                   # [B, T]; H detached (footnote 3)
    seq = group_normalized(rewards.float(), eps).reshape(-1, 1).expand_as(h)    # [B, T]  eq. 1 (mixed groups)
    zv = zero_variance_groups(rewards).repeat_interleave(N)                     # [B]  std({R_i}) = 0
    passed = (rewards[:, 0] > pass_threshold).repeat_interleave(N)             # [B]  eq. 5: R_i > 0
    h_max = h.masked_fill(~valid, float("-inf")).amax(dim=1, keepdim=True)      # [B, 1]  max_{k<=|o_i|} H_{i,k}
    zvp_pos = alpha * h                                                         # eq. 5, positive prompts
    zvp_neg = -alpha * (h_max - h)                                              # eq. 5, negative prompts
    zvp = torch.where(passed.unsqueeze(1), zvp_pos, zvp_neg)
    out = torch.where(zv.unsqueeze(1), zvp, seq)                                # eq. 6: ZVP branch or GRPO
    return torch.where(valid, out, torch.zeros_like(out))                       # 0 off the mask (pads, -inf)


def completion_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` token advantages -> ``[B]``: their mean over each completion's tokens (0 for none).

    Summed in float64 so that a sequence-level estimator's row gives back exactly its completion's
    value (n equal float32 terms add up exactly in float64); returned in ``advantages``' dtype.
    """
    m = mask.to(torch.float64)
    return ((advantages.double() * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)).to(advantages.dtype)
