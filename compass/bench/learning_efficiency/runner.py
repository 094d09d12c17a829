"""One RL run (a method, a seed, a regime) with held-out evaluations at rollout-token milestones, and a
pool of worker processes that runs many (``--jobs``; each worker loads the SFT checkpoint once)."""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from compass.rl.sampling.prompt_data import RLPrompt


@dataclass(frozen=True)
class Job:
    regime: str
    method: str
    seed: int                       # the RL run's
    sections: dict                  # the method's RLConfig sections (methods.methods())
    settings: dict                  # the regime's shared RL settings (regimes.Regime.rl_settings())
    milestones: tuple[int, ...]
    eval_samples: int
    checkpoint: str
    pool: tuple[RLPrompt, ...] = field(repr=False)
    heldout: tuple[RLPrompt, ...] = field(repr=False)
    groups: dict = field(repr=False)     # held-out prompt id -> label (task/tier)
    start: int = 0                  # the start's seed (checkpoint is its SFT model)


LOGGER = "compass.bench.learning_efficiency"
_MODEL: dict = {}                   # checkpoint -> (state dict, tokenizer, config): loaded once per process


def _start(checkpoint: str):
    if checkpoint not in _MODEL:
        from compass.bench.learning_efficiency.start import load
        model, tok = load(Path(checkpoint))
        _MODEL[checkpoint] = ({k: v.clone() for k, v in model.state_dict().items()}, tok, model.config)
    return _MODEL[checkpoint]


def _fresh_model(checkpoint: str):
    import torch
    from transformers import AutoModelForCausalLM
    state, tok, config = _start(checkpoint)
    m = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    m.load_state_dict(state)
    m.generation_config.pad_token_id = tok.pad_token_id
    m.generation_config.eos_token_id = tok.eos_token_id
    return m, tok


def run(job: Job) -> dict:
    """Train from the SFT model until the rollout-token budget; evaluate held-out reward when the run passes
    each milestone (and at the end). Returns the evaluations and the run's training-side measurements."""
    from compass.bench.learning_efficiency.heldout import evaluate
    from compass.bench.learning_efficiency.methods import rl_config
    from compass.rl.engine import train
    model, tok = _fresh_model(job.checkpoint)
    cfg = rl_config(job.sections, seed=job.seed, **job.settings)
    evals: list[dict] = []
    t_eval = [0.0]
    nxt = [1]                       # milestone 0 is the SFT model, evaluated once for every run

    def held_out(m, tokens: int) -> None:
        t0 = time.perf_counter()
        e = evaluate(m, tok, job.heldout, samples=job.eval_samples, max_new_tokens=job.settings["max_new_tokens"],
                     groups=job.groups)
        evals.append({"tokens": tokens, "reward": e["reward"], "se": e["se"], "by_group": e["by_group"],
                      "eval_tokens": e["tokens"]})
        t_eval[0] += time.perf_counter() - t0

    def on_step(step: int, row: dict, m) -> None:
        total = row["rollout_tokens_total"]
        if nxt[0] < len(job.milestones) and total >= job.milestones[nxt[0]]:
            held_out(m, total)
            while nxt[0] < len(job.milestones) and total >= job.milestones[nxt[0]]:
                nxt[0] += 1
    from compass.gym.score import score
    t0 = time.perf_counter()
    # plain float rewards (no reason codes): the engine's reward audit loop reuses the name of the group size
    # (``for code, n in audit["reasons"]`` in compass/rl/engine.py), so with reasons a second DAPO round
    # generates groups of the wrong size; the bench needs no reasons
    res = train(model, tok, list(job.pool), cfg, score_fn=score, log=logging.getLogger(LOGGER),
                desc=f"{job.regime}/{job.method}/start{job.start}/s{job.seed}", on_step=on_step)
    rows = res.metrics
    if rows and (not evals or evals[-1]["tokens"] < rows[-1]["rollout_tokens_total"]):
        held_out(model, rows[-1]["rollout_tokens_total"])      # where the budget stopped it
    return {"regime": job.regime, "method": job.method, "start": job.start, "seed": job.seed, "evals": evals,
            "steps": [_step_summary(r) for r in rows], "time_s": time.perf_counter() - t0,
            "eval_time_s": t_eval[0]}


STEP_KEYS = ("rollout_tokens_total", "tokens", "groups", "groups_kept", "zero_variance_all_pass",
             "zero_variance_all_fail", "prompts_skipped", "group_size", "informative_token_share",
             "zero_variance_token_share_all_pass", "zero_variance_token_share_all_fail", "adv_abs_token_mean",
             "updated", "clip_frac", "samples")


def _step_summary(row: dict) -> dict:
    """What the bench keeps of a step's metrics row (runs.json stays small)."""
    return {k: row[k] for k in STEP_KEYS if k in row}


def _init_worker(threads: int) -> None:
    import torch
    torch.set_num_threads(threads)
    os.environ.setdefault("COMPASS_PROGRESS", "0")
    logging.getLogger(LOGGER).setLevel(logging.WARNING)      # the engine's per-step lines: the tables say it


def run_all(jobs: Sequence, *, workers: int, threads: int, done: Callable[[object, dict], None],
            fn: Callable = run) -> list:
    """``fn(job)`` for every job (default: :func:`run`), ``workers`` at a time (1: in this process);
    ``done(job, result)`` as each one finishes. Results come back in the order of ``jobs``."""
    if workers <= 1:
        _init_worker(threads)
        out = []
        for j in jobs:
            out.append(fn(j))
            done(j, out[-1])
        return out
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed
    results: list[dict | None] = [None] * len(jobs)
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"), initializer=_init_worker,
                             initargs=(threads,)) as pool:
        futures = {pool.submit(fn, j): i for i, j in enumerate(jobs)}
        for f in as_completed(futures):
            i = futures[f]
            results[i] = f.result()
            done(jobs[i], results[i])
    return results                                    # type: ignore[return-value]
