"""Sample completions of fixed prompts with the native decoder and score them (held-out reward, the grader)."""
from __future__ import annotations

from typing import Sequence

import torch

from compass.rl.sampling.prompt_data import RLPrompt


@torch.no_grad()
def sample_and_score(model, tok, prompts: Sequence[RLPrompt], *, n: int, max_new_tokens: int, seed: int,
                     chunk: int = 64) -> list[list[tuple[float, int]]]:
    """``n`` completions of every prompt at temperature 1, scored by its verifier: per prompt, ``n``
    ``(reward, completion tokens)``. Chunk ``i`` is sampled with seed ``seed + i``: the same prompts and
    seed give the same draws for every model with the same weights."""
    from compass.gym.score import score
    from compass.lm.chat import chat_prefix
    from compass.rl.rollout.base import SamplingParams
    from compass.rl.rollout.native import NativeRollout
    was_training = model.training
    model.eval()
    rollout = NativeRollout(model, tok, record_routes=False, share=True)
    out: list[list[tuple[float, int]]] = []
    try:
        for i in range(0, len(prompts), chunk):
            part = prompts[i:i + chunk]
            ids = [tok(chat_prefix(tok, p.prompt), add_special_tokens=False)["input_ids"] for p in part]
            groups = rollout.generate(ids, n, SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0,
                                                             seed=seed + i))
            for p, g in zip(part, groups):
                out.append([(float(score(p.verifier, c.text, p.reference)), len(c.ids)) for c in g])
    finally:
        rollout.close()
        model.train(was_training)
    return out
