"""The policy's per-token log-probs and entropies.

Where only some positions need them (the completion tokens: ``only``), the LM head runs on those
positions' hidden states in chunks of at most :data:`LOGITS_CHUNK_BYTES` of fp32 logits, and under
autograd each chunk's logits are recomputed in the backward pass instead of kept
(:func:`head_logp_entropy`): a ``[tokens, vocab]`` fp32 tensor of a real model (150k vocabulary, 8k
tokens: 4.9 GB, and log-softmax keeps more of that size) never exists whole. The tiny models' batches
fit one chunk and take the unchunked path unchanged.
"""
from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

LOGITS_CHUNK_BYTES = 256 << 20      # fp32 logits alive at once in head_logp_entropy


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   temperature: float = 1.0, only: torch.Tensor | None = None,
                   shared_prefix: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-prob of each next token and the policy's entropy there.

    ``input_ids``/``attention_mask`` ``[B, L]`` -> ``logp`` ``[B, L-1]`` (log p of
    ``input_ids[:, 1:]``) and ``entropy`` ``[B, L-1]``, both float32, from
    ``logits / temperature`` (the distribution the sampler drew from).

    ``only`` ``[B, L-1]`` bool: compute the vocabulary projection only where True (the
    completion tokens) and leave 0 elsewhere. The LM head and the softmax over the
    vocabulary are a large part of a small model's forward; prompt positions need neither.
    ``shared_prefix``: where the model allows it, run each distinct prompt once
    (:func:`_shared_prefix_logprobs`); False: always the model's own forward (a sharded model, whose
    weights exist whole only inside that forward).
    """
    if only is not None and shared_prefix:
        fast = _shared_prefix_logprobs(model, input_ids, only, temperature)
        if fast is not None:
            return fast
    head = split_head(model) if only is not None else None
    if head is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
        return _logp_entropy(logits, input_ids[:, 1:], temperature)
    body, lm_head = head
    hidden = body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, :-1]   # [B, L-1, H]
    logp_sel, ent_sel = head_logp_entropy(lm_head, hidden[only], input_ids[:, 1:][only], temperature)
    logp = torch.zeros(only.shape, dtype=torch.float32, device=hidden.device)
    entropy = torch.zeros(only.shape, dtype=torch.float32, device=hidden.device)
    return logp.masked_scatter(only, logp_sel), entropy.masked_scatter(only, ent_sel)


def _shared_prefix_logprobs(model, input_ids: torch.Tensor, only: torch.Tensor, temperature: float):
    """:func:`token_logprobs` through :func:`compass.lm.qwen3_native.shared_prefix_hidden` (each distinct
    prompt of the batch runs once), or None where that path does not apply: a model it does not
    support, hooks on the model (Router Replay and route recording drive transformers' modules),
    or rows whose ``only`` positions are not one contiguous, non-empty block."""
    from compass.lm.qwen3_native import shared_prefix_hidden, unsupported
    if unsupported(model.config) is not None or any(m._forward_hooks or m._forward_pre_hooks
                                                    for m in model.modules()):
        return None
    prefixes, keys, row_prefix, completions = [], {}, [], []
    for b in range(only.shape[0]):
        idx = only[b].nonzero().squeeze(1)
        if idx.numel() == 0 or int(idx[-1] - idx[0]) + 1 != idx.numel():
            return None
        start, end = int(idx[0]) + 1, int(idx[-1]) + 2                  # completion tokens: input positions
        key = tuple(input_ids[b, :start].tolist())
        if key not in keys:
            keys[key] = len(prefixes)
            prefixes.append(input_ids[b, :start])
        row_prefix.append(keys[key])
        completions.append(input_ids[b, start:end])
    hidden = shared_prefix_hidden(model, prefixes, row_prefix, completions)     # [M, hidden]
    logp_sel, ent_sel = head_logp_entropy(model.lm_head, hidden, torch.cat(completions), temperature)
    logp = torch.zeros(only.shape, dtype=torch.float32, device=hidden.device)
    entropy = torch.zeros(only.shape, dtype=torch.float32, device=hidden.device)
    return logp.masked_scatter(only, logp_sel), entropy.masked_scatter(only, ent_sel)


def head_logp_entropy(lm_head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                      chunk_bytes: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``hidden`` ``[N, H]``, ``targets`` ``[N]`` -> log p of the targets and the entropy under
    ``lm_head(hidden) / temperature``, ``[N]`` each, float32.

    At most ``chunk_bytes`` (default :data:`LOGITS_CHUNK_BYTES`) of fp32 logits (``rows x vocab x 4``) are computed at once; with gradients on,
    each chunk is checkpointed (its logits recomputed in backward, not stored), so the memory of the
    head is a chunk's, not ``N x vocab``'s. Equal to the unchunked computation up to the float rounding of
    a differently blocked matmul; when all ``N`` rows fit one chunk it *is* the unchunked computation.
    """
    rows = max(1, (chunk_bytes or LOGITS_CHUNK_BYTES) // (4 * lm_head.weight.shape[0]))
    n = hidden.shape[0]
    if n <= rows:
        return _logp_entropy(lm_head(hidden).float(), targets, temperature)

    def chunk(h: torch.Tensor, t: torch.Tensor):
        return _logp_entropy(lm_head(h).float(), t, temperature)

    grad = torch.is_grad_enabled() and (hidden.requires_grad or lm_head.weight.requires_grad)
    parts = [checkpoint(chunk, hidden[s:s + rows], targets[s:s + rows], use_reentrant=False) if grad
             else chunk(hidden[s:s + rows], targets[s:s + rows]) for s in range(0, n, rows)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def _logp_entropy(logits: torch.Tensor, targets: torch.Tensor, temperature: float):
    """``logits`` ``[..., V]`` and ``targets`` ``[...]`` -> log p of the targets and the entropy, ``[...]``."""
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    return logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1), -(logprobs.exp() * logprobs).sum(-1)


def split_head(model):
    """(decoder body returning ``last_hidden_state``, LM head) of a plain HF causal LM, or None."""
    body = getattr(model, "model", None)
    lm_head = getattr(model, "lm_head", None)
    if body is None or not isinstance(lm_head, torch.nn.Linear) or getattr(model.config, "final_logit_softcapping", None):
        return None
    return body, lm_head
