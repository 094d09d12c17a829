"""Policy losses: pure functions on per-token log-probs, registered by name.

Every loss has the signature
``fn(logp, old_logp, advantages, mask, *, clip_eps, **options) -> (loss, metrics)``:

- ``logp``       ``[B, T]`` float: log-prob of each completion token under the policy being trained (has grad)
- ``old_logp``   ``[B, T]`` float: the same under the policy that sampled it (no grad)
- ``advantages`` ``[B]`` float: one advantage per completion (broadcast over its tokens)
- ``mask``       ``[B, T]`` bool/0-1: 1 on completion tokens, 0 on prompt and padding
- ``loss``: scalar tensor to minimise; ``metrics``: dict of python floats (detached)

Sequence-level and entropy-grouped variants (GSPO, ESPO) fit the same
signature; they may take extra keyword options (e.g. per-token entropy).
"""
from __future__ import annotations

from typing import Callable

import torch

from stages.common.named_registry import Registry

LossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]
POLICY_LOSSES = Registry("policy loss")
register_policy_loss = POLICY_LOSSES.register


def get_policy_loss(name: str) -> LossFn:
    return POLICY_LOSSES.lookup(name)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the positions where ``mask`` is set (0 when none is). Shapes: equal."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


@register_policy_loss("ppo_clip_token_mean")
def ppo_clip_token_mean(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                        mask: torch.Tensor, *, clip_eps: float = 0.2,
                        clip_eps_high: float | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-level PPO-clip (GRPO's surrogate) averaged over all completion tokens of the batch.

    Per token: ``ratio = exp(logp - old_logp)``,
    ``l = max(-A * ratio, -A * clip(ratio, 1 - clip_eps, 1 + clip_eps_high))``;
    ``loss = sum(l * mask) / sum(mask)`` (DAPO's token mean: long completions
    weigh by their length, not 1/length). ``clip_eps_high`` defaults to
    ``clip_eps`` (symmetric PPO); set it higher for DAPO clip-higher.

    Metrics: ``clip_frac`` = fraction of completion tokens whose clip binds
    (A > 0 and ratio > 1 + eps_high, or A < 0 and ratio < 1 - eps), so they get no gradient;
    ``approx_kl`` = token mean of ``old_logp - logp``; ``ratio_mean``.
    """
    if logp.shape != old_logp.shape or logp.shape != mask.shape or advantages.shape != logp.shape[:1]:
        raise ValueError(f"ppo_clip_token_mean: shapes logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)}, "
                         f"mask {tuple(mask.shape)} must be [B, T] and advantages {tuple(advantages.shape)} [B]")
    hi = clip_eps if clip_eps_high is None else clip_eps_high
    adv = advantages.to(logp.dtype).unsqueeze(1)                  # [B, 1]
    ratio = torch.exp(logp - old_logp.detach())                    # [B, T]
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + hi)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        binds = ((adv > 0) & (ratio > 1.0 + hi)) | ((adv < 0) & (ratio < 1.0 - clip_eps))
        metrics = {
            "clip_frac": float(masked_mean(binds.to(logp.dtype), mask)),
            "approx_kl": float(masked_mean(old_logp.detach() - logp, mask)),
            "ratio_mean": float(masked_mean(ratio, mask)),
        }
    return loss, metrics
