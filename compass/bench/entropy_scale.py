"""``compass bench entropy-scale``: the token entropies of a policy's rollouts, and the RL-ZVP and ESPO α
they call for (the rules: :mod:`compass.rl.entropy_scale`; the numbers: docs/rl.md, "α for this project").

Two starts:

- ``--start pipeline``: a checkpoint of the store (``--checkpoint``, default ``thinking_ckpt``: the Long-CoT
  SFT model of ``make run``) on the reasoning (or domain) rows of its ``rl_prompts``;
- ``--start bench``: the learning-efficiency bench's start, the tiny MoE after 2,500 SFT steps on the
  20,000-item arithmetic world (docs/benchmarks.md; trained once, ~5 min, and cached under ``--cache``), on a
  seeded draw of that bench's 500-prompt RL pool.

Samples ``--group-size`` completions of ``--groups`` prompts with the ``hf`` rollout at the RL temperature.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import time
from pathlib import Path

import torch


def _bench_start(cache: Path, sft_steps: int, log: logging.Logger):
    """The learning-efficiency bench's SFT'd model and its RL prompt pool (its settings of 2026-11-22)."""
    from compass.lm.model_config import ModelConfig
    from compass.lm.model_factory import build_model, build_tokenizer, load_checkpoint, save_checkpoint
    from compass.lm.sft.train import encode_table, train_sft
    from compass.rl.data import prompts_from_table
    from stages.world.build import build_world
    from stages.world.config import WorldConfig
    cfg = WorldConfig(seed=0, model=ModelConfig(hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2,
                                                head_dim=32, intermediate_size=256, num_experts=8,
                                                experts_per_token=2, expert_size=128, max_positions=512),
                      suites={"arithmetic": {"n": 20_000, "n_eval": 200}, "ifeval": {"n": 300, "n_eval": 50}},
                      n_planted=0, n_preference_pairs=0, languages=["en"])
    world = build_world(cfg)
    key = hashlib.sha256(json.dumps([cfg.model_dump(mode="json"), sft_steps, 1e-3]).encode()).hexdigest()[:12]
    path = Path(cache) / f"entropy-start-{key}"
    if not (path / "config.json").exists():
        tok = build_tokenizer(world.texts(), cfg.tokenizer)
        model = build_model(cfg.model, tok, cfg.seed)
        t = world.raw_sft
        encoded, _ = encode_table(tok, t.column("prompt").to_pylist(), t.column("response").to_pylist(), 256)
        t0 = time.perf_counter()
        train_sft(model, tok, encoded, steps=sft_steps, batch_size=16, lr=1e-3, warmup_steps=4, weight_decay=0.0,
                  grad_clip=1.0, seed=0, log_every=100, logger=log, desc="sft")
        print(f"SFT: {sft_steps} steps in {time.perf_counter() - t0:.0f}s (cached in {path})", flush=True)
        save_checkpoint(model, tok, path)
    model, tok = load_checkpoint(path)
    pool = random.Random(0).sample(prompts_from_table(world.raw_prompts), 500)
    return model, tok, pool, str(path)


def _pipeline_start(store_root: str, checkpoint: str, prompts: str, split: str):
    from compass.lm.model_factory import load_checkpoint
    from compass.rl.data import is_reasoning_prompt, prompts_from_table
    from compass.store.store import ArtifactStore
    store = ArtifactStore(store_root)
    ckpt = store.get("checkpoint", checkpoint)
    rows = prompts_from_table(store.get("prompts", prompts).read_table())
    if split != "all":
        rows = [p for p in rows if is_reasoning_prompt(p) == (split == "reasoning")]
    model, tok = load_checkpoint(ckpt.local_dir())
    return model, tok, rows, ckpt.uri


def main(argv: list[str]) -> int:
    from compass.rl.entropy_scale import entropy_stats, sample_entropies
    ap = argparse.ArgumentParser(prog="compass bench entropy-scale", description=__doc__.splitlines()[0])
    ap.add_argument("--start", choices=("pipeline", "bench"), default="pipeline")
    ap.add_argument("--store", default="./artifacts", help="pipeline: the artifact store")
    ap.add_argument("--checkpoint", default="thinking_ckpt", help="pipeline: checkpoint name (latest version)")
    ap.add_argument("--prompts", default="rl_prompts", help="pipeline: prompts name (latest version)")
    ap.add_argument("--split", choices=("reasoning", "domain", "all"), default="reasoning",
                    help="pipeline: the reasoning RL stage's rows, the domain RL stage's, or all")
    ap.add_argument("--sft-steps", type=int, default=2500, help="bench: SFT steps of the start")
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "compass-bench"), help="bench: SFT cache")
    ap.add_argument("--groups", type=int, default=64, help="prompts sampled (a seeded draw)")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=None,
                    help="default: 96 (configs/tiny.yaml reasoning_rl) for pipeline, 48 (the bench's) for bench")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    logging.basicConfig(level=logging.WARNING)
    log = logging.getLogger("compass.bench.entropy_scale")
    if args.start == "bench":
        model, tok, rows, source = _bench_start(Path(args.cache), args.sft_steps, log)
        max_new = args.max_new_tokens or 48
    else:
        model, tok, rows, source = _pipeline_start(args.store, args.checkpoint, args.prompts, args.split)
        max_new = args.max_new_tokens or 96
    rows = random.Random(args.seed + 1).sample(rows, min(args.groups, len(rows)))
    t0 = time.perf_counter()
    ents = sample_entropies(model, tok, [p.prompt for p in rows], group_size=args.group_size,
                            max_new_tokens=max_new, temperature=args.temperature, seed=args.seed)
    s = entropy_stats(ents, model.config.vocab_size)
    s["source"] = {"start": args.start, "policy": source, "split": args.split if args.start == "pipeline" else None,
                   "groups": len(rows), "group_size": args.group_size, "max_new_tokens": max_new,
                   "temperature": args.temperature, "seed": args.seed, "sample_s": time.perf_counter() - t0}
    print(f"entropy-scale: {source}; {s['completions']} completions, {s['tokens']} tokens; "
          f"|V| = {s['vocab_size']} (log|V| = {s['log_vocab']:.3f} nats)")
    print(f"{'tokens':<22} {'n':>6} {'mean':>7} {'p10':>7} {'p50':>7} {'p90':>7}")
    for name, key in (("all", "entropy_all"), ("top 20% (batch)", "entropy_top"), ("other 80%", "entropy_rest")):
        e = s[key]
        print(f"{name:<22} {e['n']:>6} {e['mean']:>7.3f} {e['p10']:>7.3f} {e['p50']:>7.3f} {e['p90']:>7.3f}")
    z, p = s["rl_zvp"], s["espo"]
    print(f"mean over completions of max_k H: {s['max_per_completion']:.3f} nats")
    print(f"RL-ZVP α (keep α·mean top-20% H = 0.6): {z['alpha']:.3f} "
          f"(reference 2-10 nats: {z['alpha_range'][1]:.3f}-{z['alpha_range'][0]:.3f})")
    print(f"ESPO α (keep ε_top = {p['paper_eps_top']:.4f}): {p['alpha']:.4f} "
          f"(reference 2-10 nats: {p['alpha_range'][0]:.4f}-{p['alpha_range'][1]:.4f}); "
          f"the paper's α = 0.02 here gives ε_top {p['eps_top_at_0.02']:.4f}, ε_rest {p['eps_rest_at_0.02']:.5f}")
    print(json.dumps({"bench": "entropy-scale", **s}))
    return 0
