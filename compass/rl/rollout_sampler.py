"""Sampling for evaluation through the RL engine's rollout backends.

``sampler(backend, model, tok)`` returns a function with ``compass.lm.chat.sample``'s signature and
results (per prompt, n dicts of ``text`` and ``ids``), so the evaluation generates the way rollout
does: ``native`` (the engine's KV-cache decoder; greedy at temperature 0), or ``hf`` (transformers'
``generate``, ``compass.lm.chat.sample`` itself). ``auto``: ``native`` where it supports the model.
"""
from __future__ import annotations

from typing import Callable

from compass.lm.chat import chat_prefix, sample
from compass.rl.rollout import SamplingParams, get_rollout_backend

BACKENDS = ("auto", "native", "hf")


def sampler(backend: str, model, tok) -> Callable:
    if backend not in BACKENDS:
        raise ValueError(f"evaluation backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        from compass.rl.engine import resolve_rollout_backend
        backend = resolve_rollout_backend("auto", model)
    if backend == "hf":
        return sample
    rollout = get_rollout_backend(backend)(model, tok)

    def generate(model_, tok_, prompts: list[str], *, n: int = 1, max_new_tokens: int = 64,
                 temperature: float = 1.0, seed: int = 0) -> list[list[dict]]:
        ids = [tok(chat_prefix(tok, p), add_special_tokens=False)["input_ids"] for p in prompts]
        groups = rollout.generate(ids, n, SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature,
                                                         seed=seed))
        return [[{"text": c.text, "ids": list(c.ids)} for c in g] for g in groups]
    generate.backend = backend
    return generate
