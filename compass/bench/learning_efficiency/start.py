"""The starts of the runs: the world (arithmetic + instruction following) and SFT'd tiny models of it, one per
start seed (the model's init and the SFT batches' order), each cached under ``--cache`` by its settings (~5
minutes of one core each on the first bench run).

Starts are a source of variance of their own: the same SFT recipe from another seed, or on another CPU's
kernels, is another model, and a method's saving can differ from one to the next (issue 29)."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WorldSize:
    n_arith: int = 20_000        # arithmetic items: half SFT rows, half RL prompts
    n_ifeval: int = 300
    n_eval: int = 400            # held-out arithmetic prompts, 80 per difficulty level (ifeval: a quarter)
    sft_steps: int = 2500
    sft_lr: float = 1e-3


QUICK_WORLD = WorldSize(n_arith=160, n_ifeval=20, n_eval=40, sft_steps=20)


def world_config(size: WorldSize):
    from compass.lm.model_config import ModelConfig
    from stages.world.config import WorldConfig
    return WorldConfig(seed=0, model=ModelConfig(hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2,
                                                 head_dim=32, intermediate_size=256, num_experts=8,
                                                 experts_per_token=2, expert_size=128, max_positions=512),
                       suites={"arithmetic": {"n": size.n_arith, "n_eval": size.n_eval},
                               "ifeval": {"n": size.n_ifeval, "n_eval": size.n_eval // 4}},
                       n_planted=0, n_preference_pairs=0, languages=["en"])


def build(size: WorldSize):
    """(world config, world)."""
    from stages.world.build import build_world
    cfg = world_config(size)
    return cfg, build_world(cfg)


def sft_key(cfg, size: WorldSize, seed: int = 0) -> str:
    """The cache key of one start: the world's settings, the SFT recipe and the start's seed."""
    return hashlib.sha256(json.dumps([cfg.model_dump(mode="json"), size.sft_steps, size.sft_lr, seed]).encode()
                          ).hexdigest()[:12]


def cached(size: WorldSize, cfg, cache: Path, seed: int = 0) -> Path | None:
    """Start ``seed``'s folder when it is in the cache."""
    path = Path(cache) / f"sft-{sft_key(cfg, size, seed)}"
    return path if (path / "config.json").exists() else None


def sft_checkpoint(size: WorldSize, cfg, world, cache: Path, log: logging.Logger, seed: int = 0) -> Path:
    """The folder of start ``seed``'s SFT'd checkpoint (init and batch order from ``seed``), trained and
    cached when missing. The folder appears whole or not at all (written beside it, then renamed)."""
    import shutil
    from compass.lm.model_factory import build_model, build_tokenizer, save_checkpoint
    from compass.lm.sft.train import encode_table, train_sft
    path = cached(size, cfg, cache, seed)
    if path is not None:
        return path
    path = Path(cache) / f"sft-{sft_key(cfg, size, seed)}"
    tok = build_tokenizer(world.texts(), cfg.tokenizer)
    model = build_model(cfg.model, tok, seed)
    t = world.raw_sft
    encoded, _ = encode_table(tok, t.column("prompt").to_pylist(), t.column("response").to_pylist(), 256)
    t0 = time.perf_counter()
    train_sft(model, tok, encoded, steps=size.sft_steps, batch_size=16, lr=size.sft_lr, warmup_steps=4,
              weight_decay=0.0, grad_clip=1.0, seed=seed, log_every=100, logger=log, desc=f"sft start {seed}")
    print(f"SFT start {seed}: {size.sft_steps} steps in {time.perf_counter() - t0:.0f}s (cached in {path})",
          flush=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    save_checkpoint(model, tok, tmp)
    try:
        tmp.rename(path)
    except OSError:                 # another process cached the same start first
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def load(path: Path):
    """(model, tokenizer) of a checkpoint folder, float32, generation ids set."""
    from compass.lm.model_factory import load_checkpoint
    model, tok = load_checkpoint(path)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model, tok


@dataclass(frozen=True)
class StartJob:
    """Train (or find cached) one start in a worker process: :func:`ensure`."""
    size: WorldSize
    seed: int
    cache: str


def ensure(job: StartJob) -> str:
    """The folder of ``job``'s start, trained when not cached (the world built anew in this process)."""
    cfg, world = build(job.size)
    return str(sft_checkpoint(job.size, cfg, world, Path(job.cache), logging.getLogger(__name__), seed=job.seed))
