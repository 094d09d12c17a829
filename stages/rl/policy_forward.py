"""The policy's per-token log-probs and entropies, and calling registry functions with their options."""
from __future__ import annotations

import inspect

import torch


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-prob of each next token and the policy's entropy there.

    ``input_ids``/``attention_mask`` ``[B, L]`` -> ``logp`` ``[B, L-1]`` (log p of
    ``input_ids[:, 1:]``) and ``entropy`` ``[B, L-1]``, both float32, from
    ``logits / temperature`` (the distribution the sampler drew from).
    """
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
    logprobs = torch.log_softmax(logits / temperature, dim=-1)
    logp = logprobs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    entropy = -(logprobs.exp() * logprobs).sum(-1)
    return logp, entropy


def call_with_supported(fn, *args, **options):
    """Call a registry function with only the keyword options its signature accepts."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn(*args, **options)
    return fn(*args, **{k: v for k, v in options.items() if k in params})
