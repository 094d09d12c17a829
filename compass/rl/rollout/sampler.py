"""Sampling for evaluation through the RL engine's rollout backends.

``open_sampler(backend, model, tok, workers=W)`` is a context manager giving a function with
``compass.lm.chat.sample``'s signature and results (per prompt, n dicts of ``text`` and ``ids``), so the
evaluation generates the way rollout does:

- ``native``: the engine's KV-cache decoder (greedy at temperature 0);
- ``hf``: transformers' ``generate`` (``compass.lm.chat.sample`` itself when ``workers`` is 0);
- ``vllm``: the vLLM worker process (``compass.rl.rollout.vllm_client``; greedy is vLLM's temperature 0);
- ``auto``: ``native`` where it supports the model, else ``hf``.

With ``workers`` > 0 the backend runs in that many Ray actors, each on its own copy of the checkpoint,
the prompts split over them by length (``compass.rl.rollout.ray_pool.RayRolloutPool``): evaluating a large
checkpoint scales the way rollout does. Greedy results do not depend on the worker count; sampled ones
are reproducible for a given count (shard seeds). Leaving the block closes the backend (stops a vLLM
process, kills the actors).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from compass.lm.chat import chat_prefix, sample
from compass.rl.rollout.base import ROLLOUT_BACKEND_MODULES, SamplingParams, get_rollout_backend

BACKENDS = ("auto", *ROLLOUT_BACKEND_MODULES)


@contextmanager
def open_sampler(backend: str, model, tok, *, workers: int = 0) -> Iterator[Callable]:
    if backend not in BACKENDS:
        raise ValueError(f"evaluation backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if workers < 0:
        raise ValueError(f"evaluation workers must be >= 0, got {workers}")
    if backend == "auto":
        from compass.rl.engine import resolve_rollout_backend
        backend = resolve_rollout_backend("auto", model)
    if get_rollout_backend(backend).chat_sample_equivalent and not workers:
        yield sample
        return
    if workers:
        from compass.rl.rollout.ray_pool import RayRolloutPool
        rollout = RayRolloutPool(backend, model, tok, workers=workers)
    else:
        rollout = get_rollout_backend(backend)(model, tok)
    try:
        def generate(model_, tok_, prompts: list[str], *, n: int = 1, max_new_tokens: int = 64,
                     temperature: float = 1.0, seed: int = 0) -> list[list[dict]]:
            ids = [tok(chat_prefix(tok, p), add_special_tokens=False)["input_ids"] for p in prompts]
            groups = rollout.generate(ids, n, SamplingParams(max_new_tokens=max_new_tokens,
                                                             temperature=temperature, seed=seed))
            return [[{"text": c.text, "ids": list(c.ids)} for c in g] for g in groups]
        generate.backend = backend
        generate.workers = workers
        yield generate
    finally:
        rollout.close()
