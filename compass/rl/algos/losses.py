"""Policy losses: pure functions on per-token log-probs, registered by name.

Every loss has one signature
``fn(logp, old_logp, advantages, mask, *, entropy=None, vocab_size=None, **settings) -> (loss, metrics)``:

- ``logp``       ``[B, T]`` float: log-prob of each completion token under the policy being trained (has grad)
- ``old_logp``   ``[B, T]`` float: the same under the policy that sampled it (no grad)
- ``advantages`` ``[B, T]`` float: one advantage per token (the estimators' shape,
  :mod:`compass.rl.algos.advantages`); sequence-level losses (GSPO) take a completion's mean
- ``mask``       ``[B, T]`` bool/0-1: 1 on completion tokens, 0 on prompt and padding
- ``entropy``    ``[B, T]`` (detached) and ``vocab_size`` |V|: what entropy-grouped losses (ESPO) read
- ``settings``: the loss's own options (e.g. ``clip_eps``), the fields of its config entry
- ``loss``: scalar tensor to minimise; ``metrics``: dict of python floats (detached)

Trainers call a loss through :func:`policy_loss`, the one entry for every backend.
"""
from __future__ import annotations

import math
from typing import Callable, Literal

import torch

from compass.registry import Registry
from compass.rl.algos.advantages import completion_advantages

LossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]
POLICY_LOSSES = Registry("policy loss")
# name -> the advantages a loss takes: "token" ([B, T], the estimators' shape) or "completion" ([B])
ADVANTAGE_SHAPES: dict[str, str] = {}


def register_policy_loss(name: str, *, advantages: Literal["token", "completion"] = "token"):
    """Decorator: ``fn`` is the policy loss ``name``; ``advantages`` says which shape it takes (``completion``:
    each completion's mean advantage ``[B]``, for a loss written for one advantage per completion)."""
    if advantages not in ("token", "completion"):
        raise ValueError(f"policy loss {name!r}: advantages must be 'token' or 'completion', got {advantages!r}")

    def deco(fn: LossFn) -> LossFn:
        POLICY_LOSSES.register(name)(fn)
        ADVANTAGE_SHAPES[name] = advantages
        return fn
    return deco


def get_policy_loss(name: str) -> LossFn:
    return POLICY_LOSSES.lookup(name)


def policy_loss(name: str, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, *, entropy: torch.Tensor, vocab_size: int,
                settings: dict) -> tuple[torch.Tensor, dict[str, float], float]:
    """The registered loss ``name`` on ``[B, T]`` tensors (module doc) with its ``settings``; every trainer
    calls this. Returns ``(loss, metrics, 1.0 if it took the token advantages else 0.0)``.

    A loss registered with ``advantages="completion"`` gets each completion's mean advantage ``[B]``
    (:func:`compass.rl.algos.advantages.completion_advantages`), as it declared; every other one the token
    advantages ``[B, T]``. Both trainers call this, so a loss behaves the same on either.
    """
    fn = get_policy_loss(name)
    if ADVANTAGE_SHAPES.get(name, "token") == "completion":
        per_completion = completion_advantages(advantages, mask)
        return (*fn(logp, old_logp, per_completion, mask, entropy=entropy, vocab_size=vocab_size, **settings), 0.0)
    return (*fn(logp, old_logp, advantages, mask, entropy=entropy, vocab_size=vocab_size, **settings), 1.0)


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


# -- ESPO (Sheng et al. 2025, arXiv 2512.00499; restated in the seed paper's §2.4.2 as eq. (1)-(3)) -----------
# Equation numbers: "eq. (n)" is the seed paper's, "[arXiv eq. (m)]" the ESPO paper's own.

ESPO_TOP_FRACTION = 0.2
"""Share of a batch's completion tokens in ESPO's highest-entropy range: arXiv 2512.00499 §4.4 ("Grouping
Proportion") measures 10%, 20% and 40% and finds ~20% best. Not a config setting (``ESPOLoss`` has no field)."""


def entropy_groups(entropy: torch.Tensor, mask: torch.Tensor, n_groups: int,
                   top_frac: float | None = ESPO_TOP_FRACTION) -> torch.Tensor:
    """ESPO's token groups [arXiv eq. (7)]: ``τ_k = {t | e_t ∈ R_k}`` for entropy ranges ``R_1 < … < R_K``
    shared by the whole batch, so sequence i has the ``K_i <= K`` groups its tokens fall in.

    The ranges are cut at quantiles of the entropies of the batch's completion tokens: the top range holds
    the ``top_frac`` share of them with the highest entropy (at least one token; §4.4: ~20%), the others are
    split into ``n_groups - 1`` equal-count ranges; ``top_frac=None`` cuts ``n_groups`` equal-count ranges.
    A token whose entropy equals a cut belongs to the range above it, so equal entropies share a group.
    ``n_groups`` 1: every completion token in one group.

    ``entropy``, ``mask`` ``[B, T]`` -> ``[B, T]`` long: the range (0 = lowest entropy), ``-1`` off the mask.
    """
    if n_groups < 1:
        raise ValueError(f"n_groups must be >= 1, got {n_groups}")
    if top_frac is not None and not 0.0 < top_frac < 1.0:
        raise ValueError(f"top_frac must be in (0, 1) or None, got {top_frac}")
    valid = mask.bool()
    out = torch.full(valid.shape, -1, dtype=torch.long, device=valid.device)
    values = entropy.detach().float()[valid]                                # the batch's completion tokens
    n = values.numel()
    if n == 0:
        return out
    if n_groups == 1:
        out[valid] = 0
        return out
    if top_frac is None:
        cuts = [j * n // n_groups for j in range(1, n_groups)]
    else:
        n_rest = n - min(n, max(1, math.floor(top_frac * n + 0.5)))      # tokens below the top range
        cuts = [j * n_rest // (n_groups - 1) for j in range(1, n_groups - 1)] + [n_rest]
    lower_edges = torch.sort(values).values[torch.tensor(cuts, device=values.device)]   # of ranges 1..K-1
    out[valid] = torch.bucketize(values, lower_edges, right=True)          # how many edges are <= e_t
    return out


@register_policy_loss("espo")
def espo(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
         entropy: torch.Tensor, vocab_size: int, alpha: float = 0.02,
         groups: int = 2) -> tuple[torch.Tensor, dict[str, float]]:
    """ESPO (arXiv 2512.00499; the seed paper's §2.4.2, eq. (1)-(3)) on tensors shaped as in the module doc,
    ``entropy`` ``[B, T]`` the sampling policy's entropy e_t at each token [arXiv eq. (6): under π_θold] and
    ``vocab_size`` |V|. Defaults are the paper's: α = 0.02 (§4.4, tuned at Qwen3's |V| = 151,936), two groups
    with the top 20% of tokens by entropy in the upper one (§4.4).

    Tokens are grouped by :func:`entropy_groups` (ranges shared by the batch, [arXiv eq. (7)]). For token t of
    group τ of sequence i:

    - eq. (2) [arXiv eq. (10)]: ``s_τ = exp(mean_{t∈τ}(logp - old_logp))``, the group's length-normalised ratio;
    - eq. (1) [arXiv eq. (9)]: ``s_τ^t = sg[s_τ] · π_θ(y_t) / sg[π_θ(y_t)]``: value ``s_τ``, gradient
      ``s_τ ∇logp_t``. Both papers print ``sg[π_θold(y_t)]`` in the denominator; we read it as GSPO-token's
      ``sg[π_θ(y_t)]``, which [arXiv §3.3] says it follows: a stop-gradient on π_θold would be void, and with
      ``π_θ/π_θold`` in the value the clip would act token by token, which §4.4 names as what grouping avoids;
    - eq. (3) [arXiv eq. (8)]: ``ε_τ = α · mean_{t∈τ}(e_t) / log|V|``;
    - objective [arXiv eq. (5)]:
      ``J = 1/G Σ_i 1/|τ| Σ_τ 1/|y_τ| Σ_{t∈τ} min(s_τ^t A_t, clip(s_τ^t, 1-ε_τ, 1+ε_τ) A_t)``,
      ``|τ|`` = the sequence's non-empty groups K_i, G = the sequences with completion tokens; ``loss`` = -J.

    On-policy (``old_logp == logp``: one update per rollout batch) every ``s_τ`` is 1 and no clip binds, so
    ``loss = -1/G Σ_i 1/K_i Σ_τ mean_{t∈τ}(A_t)``, gradient ``-A_t / (G K_i |y_τ|)`` on token t: a token mean
    reweighted so that each entropy group of a sequence weighs the same (the fewer high-entropy tokens weigh
    more each). The ratios and ε_τ act only on later updates of the same batch (``trainer.mini_batches`` > 1).

    Metrics: ``clip_frac`` (token share whose clip binds), ``eps_mean`` (mean ε_τ over the sequences'
    groups), ``eps_top`` (mean ε_τ of the highest-entropy range), ``ratio_mean`` (mean s_τ over groups).
    """
    _check_shapes("espo", logp, old_logp, advantages, mask, entropy)
    if vocab_size < 2:
        raise ValueError(f"espo: vocab_size must be >= 2, got {vocab_size}")
    n_groups = groups
    groups = entropy_groups(entropy, mask, n_groups)                         # [B, T]  [arXiv eq. (7)]
    onehot = (groups.unsqueeze(-1) == torch.arange(n_groups, device=logp.device)).to(logp.dtype)  # [B, T, K]
    n_tok = onehot.sum(dim=1)                                                # [B, K]: |y_τ|
    present = n_tok > 0
    denom = n_tok.clamp(min=1.0)
    delta = (logp - old_logp.detach()).unsqueeze(-1)                         # [B, T, 1]
    s_group = torch.exp((delta * onehot).sum(dim=1) / denom)                 # [B, K]  eq. (2) [arXiv eq. (10)]
    ent = entropy.detach().to(logp.dtype).masked_fill(~mask.bool(), 0.0)    # pads may hold anything
    e_group = (ent.unsqueeze(-1) * onehot).sum(dim=1) / denom                # [B, K]: mean e_t over τ
    eps_group = alpha * e_group / math.log(vocab_size)                      # [B, K]  eq. (3) [arXiv eq. (8)]
    g = groups.clamp(min=0)
    s_tok_val = s_group.detach().gather(1, g)                                # [B, T]: sg[s_τ]
    eps_tok = eps_group.gather(1, g)
    s_tok = s_tok_val * torch.exp(logp - logp.detach())                     # eq. (1): value s_τ, grad s_τ ∇logp_t
    adv = advantages.to(logp.dtype)                                         # [B, T]
    surrogate = torch.minimum(s_tok * adv, torch.clamp(s_tok, 1.0 - eps_tok, 1.0 + eps_tok) * adv)  # [B, T]
    m = mask.to(logp.dtype)
    per_group = ((surrogate * m).unsqueeze(-1) * onehot).sum(dim=1) / denom  # [B, K]: 1/|y_τ| Σ_t
    n_groups_seq = present.sum(dim=1)                                        # [B]: |τ| = K_i
    per_seq = (per_group * present).sum(dim=1) / n_groups_seq.clamp(min=1)   # 1/|τ| Σ_τ
    has_tokens = (n_groups_seq > 0).to(logp.dtype)
    loss = -(per_seq * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)  # 1/G Σ_i, negated
    with torch.no_grad():
        binds = ((adv > 0) & (s_tok_val > 1.0 + eps_tok)) | ((adv < 0) & (s_tok_val < 1.0 - eps_tok))
        top = present[:, -1]
        metrics = {"clip_frac": float(masked_mean(binds.to(logp.dtype), mask)),
                   "eps_mean": float(eps_group[present].mean()) if present.any() else 0.0,
                   "eps_top": float(eps_group[:, -1][top].mean()) if top.any() else 0.0,
                   "ratio_mean": float(s_group[present].mean()) if present.any() else 1.0}
    return loss, metrics
