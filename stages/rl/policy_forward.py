"""The policy's per-token log-probs and entropies, and calling registry functions with their options."""
from __future__ import annotations

import inspect

import torch


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   temperature: float = 1.0, only: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-prob of each next token and the policy's entropy there.

    ``input_ids``/``attention_mask`` ``[B, L]`` -> ``logp`` ``[B, L-1]`` (log p of
    ``input_ids[:, 1:]``) and ``entropy`` ``[B, L-1]``, both float32, from
    ``logits / temperature`` (the distribution the sampler drew from).

    ``only`` ``[B, L-1]`` bool: compute the vocabulary projection only where True (the
    completion tokens) and leave 0 elsewhere. The LM head and the softmax over the
    vocabulary are a large part of a small model's forward; prompt positions need neither.
    """
    head = _split_head(model) if only is not None else None
    if head is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
        return _logp_entropy(logits, input_ids[:, 1:], temperature)
    body, lm_head = head
    hidden = body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, :-1]   # [B, L-1, H]
    logp_sel, ent_sel = _logp_entropy(lm_head(hidden[only]).float(), input_ids[:, 1:][only], temperature)
    logp = torch.zeros(only.shape, dtype=torch.float32, device=hidden.device)
    entropy = torch.zeros(only.shape, dtype=torch.float32, device=hidden.device)
    return logp.masked_scatter(only, logp_sel), entropy.masked_scatter(only, ent_sel)


def _logp_entropy(logits: torch.Tensor, targets: torch.Tensor, temperature: float):
    """``logits`` ``[..., V]`` and ``targets`` ``[...]`` -> log p of the targets and the entropy, ``[...]``."""
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    return logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1), -(logprobs.exp() * logprobs).sum(-1)


def _split_head(model):
    """(decoder body returning ``last_hidden_state``, LM head) of a plain HF causal LM, or None."""
    body = getattr(model, "model", None)
    lm_head = getattr(model, "lm_head", None)
    if body is None or not isinstance(lm_head, torch.nn.Linear) or getattr(model.config, "final_logit_softcapping", None):
        return None
    return body, lm_head


def call_with_supported(fn, *args, **options):
    """Call a registry function with only the keyword options its signature accepts."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(*args, **options)
    return fn(*args, **{k: v for k, v in options.items() if k in params})
