"""Qwen3 / Qwen3-MoE forward written for speed on small models: the maths of transformers'
modeling_qwen3(_moe), with far fewer tensor ops per layer.

Used by the ``native`` rollout backend (KV-cached decoding, ``compass.rl.rollout.native``) and
by the torch trainer's log-prob forward (``compass.lm.policy_forward``, differentiable: the
packed weights are views and concatenations of the model's parameters, so gradients reach
them). On the tiny CPU models of this project transformers' forward is bound by per-op
overhead (masks, output recorders, per-expert loops); this one fuses q/k/v into one matmul,
runs the experts as grouped matmuls, and builds the attention mask once.

Supported: ``model_type`` ``qwen3`` and ``qwen3_moe`` with default RoPE, no attention bias,
no sliding window, no attention dropout, every layer MoE (or every layer dense).
:func:`unsupported` names what is not.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

_GROUPED_MM = hasattr(torch, "_grouped_mm")   # the one-kernel path for all experts (else a loop over experts)


def unsupported(config) -> str | None:
    """Why the native decoder cannot run a model with this HF ``config`` (None: it can)."""
    mt = getattr(config, "model_type", None)
    if mt not in ("qwen3", "qwen3_moe"):
        return f"model_type {mt!r} (supported: qwen3, qwen3_moe)"
    if getattr(config, "attention_bias", False):
        return "attention_bias=True"
    if getattr(config, "attention_dropout", 0.0):
        return "attention_dropout > 0"
    if getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", False):
        return "sliding-window attention"
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope != "default":
        return f"rope_type {rope!r}"
    if mt == "qwen3_moe":
        if getattr(config, "mlp_only_layers", None) or getattr(config, "decoder_sparse_step", 1) != 1:
            return "a mix of dense and MoE layers (mlp_only_layers / decoder_sparse_step)"
    return None


@dataclass
class PackedLayer:
    in_norm: torch.Tensor            # [hidden]
    post_norm: torch.Tensor          # [hidden]
    qkv: torch.Tensor                # [hidden, (H + 2*KVH) * D]   (transposed: x @ qkv)
    q_norm: torch.Tensor             # [D]
    k_norm: torch.Tensor             # [D]
    o: torch.Tensor                  # [H * D, hidden]
    router: torch.Tensor | None      # [hidden, E]               MoE only
    gate_up: torch.Tensor            # MoE: [E, hidden, 2I]; dense: [hidden, 2I]
    down: torch.Tensor               # MoE: [E, I, hidden];  dense: [I, hidden]


@dataclass
class PackedWeights:
    embed: torch.Tensor              # [V, hidden]
    layers: list[PackedLayer]
    norm: torch.Tensor               # [hidden]
    lm_head: torch.Tensor            # [hidden, V]
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    top_k: int
    norm_topk: bool
    inv_freq: torch.Tensor           # [D/2] float32


def pack(model) -> PackedWeights:
    """The model's weights laid out for the fast forward (fused q/k/v, transposed matrices).

    Differentiable: the packed tensors are built from the parameters (concatenations and
    transposes), so a loss on this forward puts gradients on the model's parameters. Reads the
    parameters as they are now: pack again after every weight update (cheap: one copy of the
    matrices). Call it under ``torch.no_grad()`` when no gradient is wanted.
    """
    cfg = model.config
    why = unsupported(cfg)
    if why is not None:
        raise ValueError(f"native Qwen3 forward: unsupported model ({why})")
    inner = model.model
    layers = []
    for layer in inner.layers:
        att, mlp = layer.self_attn, layer.mlp
        qkv = torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight], 0).t().contiguous()
        if hasattr(mlp, "experts"):
            router = mlp.gate.weight.t().contiguous()
            gate_up = mlp.experts.gate_up_proj.transpose(1, 2).contiguous()
            down = mlp.experts.down_proj.transpose(1, 2).contiguous()
        else:
            router = None
            gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight], 0).t().contiguous()
            down = mlp.down_proj.weight.t().contiguous()
        layers.append(PackedLayer(layer.input_layernorm.weight, layer.post_attention_layernorm.weight, qkv,
                                  att.q_norm.weight, att.k_norm.weight, att.o_proj.weight.t().contiguous(),
                                  router, gate_up, down))
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    theta = cfg.rope_parameters["rope_theta"]
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float, device=inner.embed_tokens.weight.device)
                                / head_dim))
    return PackedWeights(embed=inner.embed_tokens.weight, layers=layers, norm=inner.norm.weight,
                         lm_head=model.lm_head.weight.t(), heads=cfg.num_attention_heads,
                         kv_heads=cfg.num_key_value_heads, head_dim=head_dim, eps=cfg.rms_norm_eps,
                         top_k=getattr(cfg, "num_experts_per_tok", 0), norm_topk=getattr(cfg, "norm_topk_prob", True),
                         inv_freq=inv_freq)


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3 RMSNorm: normalise in float32, cast back, then scale (the HF order, which matters in bf16)."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


def _moe(h: torch.Tensor, lw: PackedLayer, w: PackedWeights) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k MoE on rows ``h`` ``[N, hidden]`` -> output ``[N, hidden]`` and the chosen experts ``[N, k]``."""
    probs = torch.softmax(h @ lw.router, dim=-1, dtype=torch.float)            # [N, E]
    top_v, top_i = torch.topk(probs, w.top_k, dim=-1)
    if w.norm_topk:
        top_v = top_v / top_v.sum(-1, keepdim=True)
    top_v = top_v.to(h.dtype)
    if _GROUPED_MM:
        # rows sorted by expert, one grouped matmul per projection: only the chosen experts' FLOPs
        flat = top_i.reshape(-1)
        order = flat.argsort(stable=True)
        rows = order // w.top_k
        offs = torch.bincount(flat, minlength=lw.gate_up.shape[0]).cumsum(0).to(torch.int32)
        g, u = torch._grouped_mm(h[rows], lw.gate_up, offs=offs).chunk(2, dim=-1)
        y = torch._grouped_mm(F.silu(g) * u, lw.down, offs=offs) * top_v.reshape(-1)[order, None]
        return torch.zeros_like(h).index_add_(0, rows, y), top_i
    out = torch.zeros_like(h)
    for e in torch.unique(top_i).tolist():
        rows, slot = torch.where(top_i == e)
        g, u = (h[rows] @ lw.gate_up[e]).chunk(2, dim=-1)
        out.index_add_(0, rows, (F.silu(g) * u) @ lw.down[e] * top_v[rows, slot, None])
    return out, top_i


def _mlp(h: torch.Tensor, lw: PackedLayer) -> torch.Tensor:
    g, u = (h @ lw.gate_up).chunk(2, dim=-1)
    return (F.silu(g) * u) @ lw.down


_CHECKPOINT = contextvars.ContextVar("compass_checkpoint_layers", default=False)


@contextmanager
def checkpointed_layers(on: bool = True) -> Iterator[None]:
    """Within the block (``on``), the training forwards here (:func:`forward_layers` without a KV cache,
    :func:`shared_prefix_hidden`) keep only each layer's input for the backward and run the layer again
    there (activation checkpointing): activation memory of one layer instead of all, for one more forward."""
    token = _CHECKPOINT.set(on)
    try:
        yield
    finally:
        _CHECKPOINT.reset(token)


def _layer_call(fn, *args):
    """``fn(*args)``, checkpointed when :func:`checkpointed_layers` is on and gradients are recorded."""
    if _CHECKPOINT.get() and torch.is_grad_enabled():
        return checkpoint(fn, *args, use_reentrant=False)
    return fn(*args)


class KVCache:
    """Preallocated KV cache ``[rows, KVH, width, D]`` per layer, and which columns each row may attend to."""

    def __init__(self, w: PackedWeights, rows: int, width: int, dtype):
        dev = w.embed.device                                    # the cache lives where the weights do
        self.k = [torch.zeros(rows, w.kv_heads, width, w.head_dim, dtype=dtype, device=dev) for _ in w.layers]
        self.v = [torch.zeros(rows, w.kv_heads, width, w.head_dim, dtype=dtype, device=dev) for _ in w.layers]
        self.valid = torch.zeros(rows, 1, 1, width, dtype=torch.bool, device=dev)

    def keep(self, idx: torch.Tensor) -> None:
        self.k = [t.index_select(0, idx) for t in self.k]
        self.v = [t.index_select(0, idx) for t in self.v]
        self.valid = self.valid.index_select(0, idx)

    def repeat(self, n: int) -> None:
        self.k = [t.repeat_interleave(n, 0) for t in self.k]
        self.v = [t.repeat_interleave(n, 0) for t in self.v]
        self.valid = self.valid.repeat_interleave(n, 0)


def forward_layers(w: PackedWeights, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, *,
                   cache: KVCache | None = None, col: int = 0, routes: list | None = None) -> torch.Tensor:
    """Rows ``x`` ``[R, S, hidden]`` (embedded tokens) at positions ``pos`` ``[R, S]`` through every layer
    and the final norm -> hidden states ``[R, S, hidden]``.

    Without ``cache`` the rows attend among themselves (``mask`` ``[R, 1, S, S]`` bool, True = may
    attend): the training forward. With ``cache`` their keys/values go to columns ``col .. col+S-1``
    and they attend to columns ``0 .. col+S-1`` (``mask`` ``[R, 1, S, col+S]``): decoding.
    With ``routes`` each MoE layer's chosen experts ``[R, S, k]`` are appended to it.
    """
    R, S, hidden = x.shape
    H, KVH, D = w.heads, w.kv_heads, w.head_dim
    freqs = pos[..., None].float() * w.inv_freq                                   # [R, S, D/2]
    emb = torch.cat((freqs, freqs), -1)
    cos, sin = emb.cos().to(x.dtype)[:, None], emb.sin().to(x.dtype)[:, None]     # [R, 1, S, D]
    scale = D ** -0.5

    def layer(x, li, lw):
        h = _rms(x, lw.in_norm, w.eps)
        q, k, v = (h @ lw.qkv).split([H * D, KVH * D, KVH * D], dim=-1)
        q = _rope(_rms(q.view(R, S, H, D), lw.q_norm, w.eps).transpose(1, 2), cos, sin)      # [R, H, S, D]
        k = _rope(_rms(k.view(R, S, KVH, D), lw.k_norm, w.eps).transpose(1, 2), cos, sin)
        v = v.view(R, S, KVH, D).transpose(1, 2)
        if cache is not None:
            cache.k[li][:, :, col:col + S] = k
            cache.v[li][:, :, col:col + S] = v
            k, v = cache.k[li][:, :, :col + S], cache.v[li][:, :, :col + S]
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=KVH != H)
        x = x + a.transpose(1, 2).reshape(R, S, H * D) @ lw.o
        h = _rms(x, lw.post_norm, w.eps)
        if lw.router is None:
            return x + _mlp(h, lw)
        y, top_i = _moe(h.reshape(R * S, hidden), lw, w)
        if routes is not None:
            routes.append(top_i.view(R, S, -1))
        return x + y.view(R, S, hidden)

    for li, lw in enumerate(w.layers):
        if cache is None and routes is None:        # the training forward: may be checkpointed
            x = _layer_call(lambda x_, li_=li, lw_=lw: layer(x_, li_, lw_), x)
        else:
            x = layer(x, li, lw)
    return _rms(x, w.norm, w.eps)


def shared_prefix_hidden(model, prefixes: list[torch.Tensor], row_prefix: list[int],
                         completions: list[torch.Tensor]) -> torch.Tensor:
    """Hidden states that score every completion token, running each distinct prompt once.

    A GRPO batch holds ``n`` completions of every prompt; the usual forward runs the prompt
    ``n`` times. Here the ``U`` distinct ``prefixes`` (1-D id tensors) run once, left-padded
    to a common width, and every completion row attends to its prompt's keys and values
    (gathered per row, so gradients from all ``n`` completions add up on the shared prompt).

    ``row_prefix[b]``: the prefix of completion row ``b``; ``completions[b]``: its ids (1-D).
    Returns ``[sum(len(c)), hidden]``: for each row in order, the states at the positions that
    predict its completion tokens (the prompt's last position, then completion positions
    ``0 .. len-2``) — the inputs of the LM head for exactly the completion tokens.
    """
    w = pack(model)
    dev = w.embed.device
    U, B = len(prefixes), len(completions)
    Wp = max(int(p.numel()) for p in prefixes)
    Wc = max(int(c.numel()) for c in completions)
    p_ids = torch.zeros(U, Wp, dtype=torch.long, device=dev)
    p_real = torch.zeros(U, Wp, dtype=torch.bool, device=dev)
    for u, p in enumerate(prefixes):                                             # left padding
        p_ids[u, Wp - p.numel():] = p
        p_real[u, Wp - p.numel():] = True
    c_ids = torch.zeros(B, Wc, dtype=torch.long, device=dev)
    c_real = torch.zeros(B, Wc, dtype=torch.bool, device=dev)
    for b, c in enumerate(completions):                                          # right padding
        c_ids[b, :c.numel()] = c
        c_real[b, :c.numel()] = True
    rows = torch.tensor(row_prefix, dtype=torch.long, device=dev)
    p_pos = (p_real.long().cumsum(-1) - 1).clamp(min=0)
    c_pos = p_real.sum(-1)[rows][:, None] + torch.arange(Wc, device=dev)[None]
    eye_p = torch.eye(Wp, dtype=torch.bool, device=dev)
    p_mask = ((torch.ones(Wp, Wp, dtype=torch.bool, device=dev).tril() & p_real[:, None, :]) | eye_p)[:, None]
    own = torch.ones(Wc, Wc, dtype=torch.bool, device=dev).tril() & c_real[:, None, :]
    own = own | torch.eye(Wc, dtype=torch.bool, device=dev)                       # a pad query sees itself
    c_mask = torch.cat([p_real[rows][:, None, :].expand(B, Wc, Wp), own], dim=2)[:, None]   # [B, 1, Wc, Wp+Wc]
    # the model's own embedding module, not its weight indexed: its padding_idx row gets no gradient, so a sampled
    # pad token (a zero row, where RMSNorm's gradient is 1/sqrt(eps)) trains as in transformers' forward
    embed = model.get_input_embeddings()
    xp, xc = embed(p_ids), embed(c_ids)
    H, KVH, D = w.heads, w.kv_heads, w.head_dim
    hidden = xp.shape[-1]

    def rope_of(pos):
        freqs = pos[..., None].float() * w.inv_freq
        emb = torch.cat((freqs, freqs), -1)
        return emb.cos().to(xp.dtype)[:, None], emb.sin().to(xp.dtype)[:, None]
    (cos_p, sin_p), (cos_c, sin_c) = rope_of(p_pos), rope_of(c_pos)

    def qkv(x, lw, cos, sin):
        R, S, _ = x.shape
        q, k, v = (_rms(x, lw.in_norm, w.eps) @ lw.qkv).split([H * D, KVH * D, KVH * D], dim=-1)
        q = _rope(_rms(q.view(R, S, H, D), lw.q_norm, w.eps).transpose(1, 2), cos, sin)
        k = _rope(_rms(k.view(R, S, KVH, D), lw.k_norm, w.eps).transpose(1, 2), cos, sin)
        return q, k, v.view(R, S, KVH, D).transpose(1, 2)

    def layer(xp, xc, lw):
        qp, kp, vp = qkv(xp, lw, cos_p, sin_p)
        qc, kc, vc = qkv(xc, lw, cos_c, sin_c)
        ap = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=p_mask, scale=D ** -0.5, enable_gqa=KVH != H)
        ac = F.scaled_dot_product_attention(qc, torch.cat([kp[rows], kc], 2), torch.cat([vp[rows], vc], 2),
                                            attn_mask=c_mask, scale=D ** -0.5, enable_gqa=KVH != H)
        xp = xp + ap.transpose(1, 2).reshape(U, Wp, H * D) @ lw.o
        xc = xc + ac.transpose(1, 2).reshape(B, Wc, H * D) @ lw.o
        h = torch.cat([_rms(xp, lw.post_norm, w.eps).reshape(-1, hidden), _rms(xc, lw.post_norm, w.eps).reshape(-1, hidden)])
        y = _mlp(h, lw) if lw.router is None else _moe(h, lw, w)[0]
        return xp + y[:U * Wp].view(U, Wp, hidden), xc + y[U * Wp:].view(B, Wc, hidden)

    for lw in w.layers:
        xp, xc = _layer_call(lambda a, b, lw_=lw: layer(a, b, lw_), xp, xc)
    last = _rms(xp[:, -1], w.norm, w.eps)                                        # [U, hidden]
    comp = _rms(xc, w.norm, w.eps)                                               # [B, Wc, hidden]
    return torch.cat([torch.cat([last[row_prefix[b]][None], comp[b, :c.numel() - 1]])
                      for b, c in enumerate(completions)])
