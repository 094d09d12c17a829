"""The common start of every run: the world (arithmetic + instruction following) and its SFT'd tiny model,
cached under ``--cache`` by its settings (the first bench run spends ~5 minutes on it)."""
from __future__ import annotations

import hashlib
import json
import logging
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


def sft_key(cfg, size: WorldSize) -> str:
    return hashlib.sha256(json.dumps([cfg.model_dump(mode="json"), size.sft_steps, size.sft_lr]).encode()
                          ).hexdigest()[:12]


def sft_checkpoint(size: WorldSize, cfg, world, cache: Path, log: logging.Logger) -> Path:
    """The SFT'd checkpoint's folder, trained (and cached) when missing."""
    from compass.lm.model_factory import build_model, build_tokenizer, save_checkpoint
    from compass.lm.sft.train import encode_table, train_sft
    path = Path(cache) / f"sft-{sft_key(cfg, size)}"
    if (path / "config.json").exists():
        return path
    tok = build_tokenizer(world.texts(), cfg.tokenizer)
    model = build_model(cfg.model, tok, cfg.seed)
    t = world.raw_sft
    encoded, _ = encode_table(tok, t.column("prompt").to_pylist(), t.column("response").to_pylist(), 256)
    t0 = time.perf_counter()
    train_sft(model, tok, encoded, steps=size.sft_steps, batch_size=16, lr=size.sft_lr, warmup_steps=4,
              weight_decay=0.0, grad_clip=1.0, seed=0, log_every=100, logger=log, desc="sft")
    print(f"SFT: {size.sft_steps} steps in {time.perf_counter() - t0:.0f}s (cached in {path})", flush=True)
    save_checkpoint(model, tok, path)
    return path


def load(path: Path):
    """(model, tokenizer) of a checkpoint folder, float32, generation ids set."""
    from compass.lm.model_factory import load_checkpoint
    model, tok = load_checkpoint(path)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model, tok
