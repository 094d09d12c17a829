"""Policy losses: pure functions on per-token log-probs, registered by name.

Every loss has one signature
``fn(logp, old_logp, advantages, mask, *, entropy=None, vocab_size=None, **settings) -> (loss, metrics)``:

- ``logp``       ``[B, T]`` float: log-prob of each completion token under the policy being trained (has grad)
- ``old_logp``   ``[B, T]`` float: the same under the policy that sampled it (no grad)
- ``advantages`` ``[B, T]`` float: one advantage per token (the estimators' shape,
  :mod:`compass.rl.advantages`); sequence-level losses (GSPO) take a completion's mean
- ``mask``       ``[B, T]`` bool/0-1: 1 on completion tokens, 0 on prompt and padding
- ``entropy``    ``[B, T]`` (detached) and ``vocab_size`` |V|: what entropy-grouped losses (ESPO) read
- ``settings``: the loss's own options (e.g. ``clip_eps``), the fields of its config entry
- ``loss``: scalar tensor to minimise; ``metrics``: dict of python floats (detached)

Trainers call a loss through :func:`policy_loss`, the one entry for every backend.
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from compass.registry import Registry
from compass.rl.advantages import completion_advantages

LossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]
POLICY_LOSSES = Registry("policy loss")
register_policy_loss = POLICY_LOSSES.register


def get_policy_loss(name: str) -> LossFn:
    return POLICY_LOSSES.lookup(name)


def policy_loss(name: str, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, *, entropy: torch.Tensor, vocab_size: int,
                settings: dict) -> tuple[torch.Tensor, dict[str, float], float]:
    """The registered loss ``name`` on ``[B, T]`` tensors (module doc) with its ``settings``; every trainer
    calls this. Returns ``(loss, metrics, 1.0 if it took the token advantages else 0.0)``.

    A loss that refuses ``[B, T]`` advantages (a ValueError: e.g. a user loss written for one advantage
    per completion) gets each completion's mean advantage ``[B]`` instead. The megatron trainer used to
    be the only one to retry so; both trainers share it now, so a loss behaves the same on either.
    When the retry fails too, the first error is raised.
    """
    fn = get_policy_loss(name)
    try:
        return (*fn(logp, old_logp, advantages, mask, entropy=entropy, vocab_size=vocab_size, **settings), 1.0)
    except ValueError as token_error:
        if advantages.shape != mask.shape:          # not a refusal of [B, T]: advantages of the wrong shape
            raise
        try:
            per_completion = completion_advantages(advantages, mask)
            return (*fn(logp, old_logp, per_completion, mask, entropy=entropy, vocab_size=vocab_size, **settings),
                    0.0)
        except ValueError:
            raise token_error from None


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the positions where ``mask`` is set (0 when none is). Shapes: equal."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


@register_policy_loss("ppo_clip_token_mean")
def ppo_clip_token_mean(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                        mask: torch.Tensor, *, entropy: torch.Tensor | None = None, vocab_size: int | None = None,
                        clip_eps: float = 0.2, clip_eps_high: float | None = None) -> tuple[torch.Tensor, dict[str, float]]:
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
    _check_shapes("ppo_clip_token_mean", logp, old_logp, advantages, mask)
    hi = clip_eps if clip_eps_high is None else clip_eps_high
    adv = advantages.to(logp.dtype)                                # [B, T]
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


def _check_shapes(name: str, logp, old_logp, advantages, mask, entropy=None) -> None:
    shapes_ok = logp.shape == old_logp.shape == mask.shape == advantages.shape
    if entropy is not None:
        shapes_ok = shapes_ok and entropy.shape == logp.shape
    if logp.dim() != 2 or not shapes_ok:
        raise ValueError(f"{name}: bad shapes: logp, old_logp, mask{', entropy' if entropy is not None else ''} must be [B, T] "
                         f"and advantages [B, T] too; got logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)}, "
                         f"mask {tuple(mask.shape)}, advantages {tuple(advantages.shape)}")


@register_policy_loss("gspo")
def gspo(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
         entropy: torch.Tensor | None = None, vocab_size: int | None = None, clip_eps: float = 3e-4,
         clip_eps_high: float | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO (Zheng et al. 2025): one length-normalised importance ratio per sequence.

    ``s_i = exp(mean_t(logp - old_logp))`` over completion tokens (shapes as in the
    module doc); ``loss = -mean_i min(s_i A_i, clip(s_i, 1 - eps, 1 + eps_high) A_i)``.
    GSPO's clip range is tiny (3e-4 / 4e-4 in the paper) because ``s_i`` is a
    geometric mean. Metrics: ``clip_frac`` = share of sequences whose clip binds.
    """
    _check_shapes("gspo", logp, old_logp, advantages, mask)
    hi = clip_eps if clip_eps_high is None else clip_eps_high
    m = mask.to(logp.dtype)
    n = m.sum(dim=1).clamp(min=1.0)                                          # [B]
    s = torch.exp(((logp - old_logp.detach()) * m).sum(dim=1) / n)          # [B]
    adv = completion_advantages(advantages, mask).to(logp.dtype)            # [B]: each completion's mean
    per_seq = torch.minimum(s * adv, torch.clamp(s, 1.0 - clip_eps, 1.0 + hi) * adv)
    has_tokens = (m.sum(dim=1) > 0).to(logp.dtype)
    loss = -(per_seq * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    with torch.no_grad():
        binds = ((adv > 0) & (s > 1.0 + hi)) | ((adv < 0) & (s < 1.0 - clip_eps))
        metrics = {"clip_frac": float((binds.to(logp.dtype) * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)),
                   "ratio_mean": float((s * has_tokens).sum() / has_tokens.sum().clamp(min=1.0))}
    return loss, metrics


def entropy_groups(entropy: torch.Tensor, mask: torch.Tensor, n_groups: int) -> torch.Tensor:
    """ESPO's token groups: within each sequence, completion tokens ranked by entropy and cut into
    ``n_groups`` equal-count bins (0 = lowest entropy); ``-1`` off the mask.

    ``entropy``, ``mask``: ``[B, T]`` -> ``[B, T]`` long. Ties keep token order
    (stable sort), so grouping is deterministic. A sequence with fewer tokens
    than groups has one token per group.
    """
    if n_groups < 1:
        raise ValueError(f"n_groups must be >= 1, got {n_groups}")
    valid = mask.bool()
    key = torch.where(valid, entropy.detach().float(), torch.full_like(entropy, float("inf"), dtype=torch.float32))
    order = torch.sort(key, dim=1, stable=True).indices                     # valid tokens first, by entropy
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(order.size(1), device=order.device).expand_as(order))
    n_valid = valid.sum(dim=1, keepdim=True).clamp(min=1)
    groups = (rank * n_groups) // n_valid                                   # [B, T] in 0..n_groups-1
    return torch.where(valid, groups, torch.full_like(groups, -1))


@register_policy_loss("espo")
def espo(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
         entropy: torch.Tensor, vocab_size: int, alpha: float = 2.0,
         groups: int = 2) -> tuple[torch.Tensor, dict[str, float]]:
    """ESPO, the seed paper's objective (§2.4.2) with eq. (1)-(3), for tensors shaped as in the module doc
    plus ``entropy`` ``[B, T]`` (the policy's entropy at each token, detached) and ``vocab_size`` |V|.

    Per sequence i, tokens are split into entropy groups τ (``entropy_groups``,
    ``groups`` bins). For a token t of group τ:

    - eq. (2): ``s_τ = exp(mean_{t∈τ}(logp - old_logp))``, the length-normalised group ratio;
    - eq. (1): ``s_τ^t = sg[s_τ] · π_θ(y_t) / sg[π_θ(y_t)]``: value ``s_τ``, gradient ``s_τ ∇logp_t``;
    - eq. (3): ``ε_τ = α · mean_{t∈τ}(e_t) / log|V|``;
    - objective: ``1/G Σ_i 1/|τ| Σ_τ 1/|y_τ| Σ_t min(s_τ^t A_i, clip(s_τ^t, 1-ε_τ, 1+ε_τ) A_i)``,
      ``|τ|`` = the sequence's non-empty groups; ``loss`` is its negative.

    ESPO's clip is per group (no ``clip_eps``). Metrics: ``clip_frac``
    (token share whose clip binds), ``eps_mean`` (mean ε_τ over groups),
    ``ratio_mean`` (mean s_τ over groups).
    """
    _check_shapes("espo", logp, old_logp, advantages, mask, entropy)
    if vocab_size < 2:
        raise ValueError(f"espo: vocab_size must be >= 2, got {vocab_size}")
    B, T = logp.shape
    n_groups = groups
    groups = entropy_groups(entropy, mask, n_groups)                         # [B, T]
    onehot = (groups.unsqueeze(-1) == torch.arange(n_groups, device=logp.device)).to(logp.dtype)  # [B, T, K]
    n_tok = onehot.sum(dim=1)                                                # [B, K] tokens per group
    present = n_tok > 0
    denom = n_tok.clamp(min=1.0)
    delta = (logp - old_logp.detach()).unsqueeze(-1)                         # [B, T, 1]
    s_group = torch.exp((delta * onehot).sum(dim=1) / denom)                 # [B, K]  eq. (2)
    eps_group = alpha * (entropy.detach().float().unsqueeze(-1) * onehot).sum(dim=1) / denom \
        / math.log(vocab_size)                                               # [B, K]  eq. (3)
    g = groups.clamp(min=0)
    s_tok_val = s_group.detach().gather(1, g)                                # [B, T]
    eps_tok = eps_group.gather(1, g)
    s_tok = s_tok_val * torch.exp(logp - logp.detach())                     # eq. (1): value s_τ, grad s_τ ∇logp
    adv = advantages.to(logp.dtype)                                         # [B, T]
    surrogate = torch.minimum(s_tok * adv, torch.clamp(s_tok, 1.0 - eps_tok, 1.0 + eps_tok) * adv)  # [B, T]
    m = mask.to(logp.dtype)
    per_group = ((surrogate * m).unsqueeze(-1) * onehot).sum(dim=1) / denom  # [B, K]: 1/|y_τ| Σ_t
    n_groups_seq = present.sum(dim=1)                                        # [B]: |τ|
    per_seq = (per_group * present).sum(dim=1) / n_groups_seq.clamp(min=1)   # 1/|τ| Σ_τ
    has_tokens = (n_groups_seq > 0).to(logp.dtype)
    loss = -(per_seq * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)  # 1/G Σ_i
    with torch.no_grad():
        binds = ((adv > 0) & (s_tok_val > 1.0 + eps_tok)) | ((adv < 0) & (s_tok_val < 1.0 - eps_tok))
        metrics = {"clip_frac": float(masked_mean(binds.to(logp.dtype), mask)),
                   "eps_mean": float(eps_group[present].mean()) if present.any() else 0.0,
                   "ratio_mean": float(s_group[present].mean()) if present.any() else 1.0}
    return loss, metrics
