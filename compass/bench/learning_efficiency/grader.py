"""The grader's pass rates: before RL, each RL-pool prompt sampled ``k`` times by the SFT model.

They become ``RLPrompt.pass_rate`` (the prior of ``sampling.prefilter``), as the data filter's grading
does in the pipeline. Its tokens are the data filter's cost, reported apart from RL rollouts. Cached
beside the SFT model by (SFT model, prompts, k, tokens, seed).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Sequence

from compass.bench.learning_efficiency.scoring import sample_and_score
from compass.rl.sampling.prompt_data import RLPrompt

GRADER_SEED = 20_000
PASS_THRESHOLD = 0.5        # the engine's reward.pass_threshold: a sample passes when its reward is above it


def grade(model, tok, prompts: Sequence[RLPrompt], *, k: int, max_new_tokens: int, cache: Path, sft_key: str,
          log=print) -> dict[str, dict]:
    """Per prompt id: :func:`summary` of its ``k`` samples; from the cache when the same grading was done
    before."""
    key = hashlib.sha256(json.dumps([sft_key, sorted(p.id for p in prompts), k, max_new_tokens,
                                     GRADER_SEED, 2]).encode()).hexdigest()[:12]
    path = Path(cache) / f"grades-{key}.json"
    if path.exists():
        return json.loads(path.read_text())
    t0 = time.perf_counter()
    scored = sample_and_score(model, tok, prompts, n=k, max_new_tokens=max_new_tokens, seed=GRADER_SEED)
    out = {p.id: summary(g, k) for p, g in zip(prompts, scored)}
    log(f"grader: {len(prompts)} prompts x {k} samples in {time.perf_counter() - t0:.0f}s (cached in {path})")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out))
    return out


def summary(group: Sequence[tuple[float, int]], k: int) -> dict:
    """One prompt's ``k`` (reward, tokens): passes, tokens, mean length, mean length of passes and of fails."""
    ok = [n for r, n in group if r > PASS_THRESHOLD]
    bad = [n for r, n in group if r <= PASS_THRESHOLD]
    return {"passes": len(ok), "k": k, "tokens": sum(n for _, n in group), "mean_len": sum(n for _, n in group) / k,
            "len_pass": sum(ok) / len(ok) if ok else None, "len_fail": sum(bad) / len(bad) if bad else None}


def with_pass_rates(prompts: Sequence[RLPrompt], grades: dict[str, dict]) -> list[RLPrompt]:
    """The prompts with ``pass_rate`` = the grader's passes / k."""
    return [dataclasses.replace(p, pass_rate=grades[p.id]["passes"] / grades[p.id]["k"]) for p in prompts]
