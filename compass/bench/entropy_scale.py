"""``compass bench entropy-scale``: the token entropies of a policy's rollouts, and the RL-ZVP and ESPO α
they call for (the rules: :mod:`compass.rl.algos.entropy_scale`; the numbers: docs/rl.md, "α for this project").

Two starts:

- ``--start pipeline``: a checkpoint of the store (``--checkpoint``, default ``thinking_ckpt``: the Long-CoT
  SFT model of ``make run``) on the reasoning (or domain) rows of its ``rl_prompts``;
- ``--start bench``: ``compass bench learning-efficiency``'s start, the tiny MoE after 2,500 SFT steps on the
  20,000-item arithmetic world (trained once and cached under ``--cache``, shared with that bench), on a
  seeded draw of the RL pool of its regime ``--regime`` (``paper``: arithmetic levels 2 and 5, binary rewards;
  ``lowz``: every level and ifeval).

Samples ``--group-size`` completions of ``--groups`` prompts with the ``hf`` rollout at the RL temperature.
``--check 0.1:2.0 1.0:0.12`` then also trains RL-ZVP + ESPO from the start with each (RL-ZVP α, ESPO α) pair
(``--check-steps`` steps of 8 × 8 samples, 4 mini-batches, lr 5e-5: the learning-efficiency bench's settings
with ``--mini-batches 4``) and prints training reward, ε_top, clip fraction, |advantage| and entropy: a check
that the α reach the papers' operating point and train stably, not a held-out benchmark.
"""
from __future__ import annotations

import argparse
import json
import logging
import random
import time
from pathlib import Path

import torch


def _bench_start(cache: Path, regime: str, log: logging.Logger):
    """``compass bench learning-efficiency``'s start (its world and cached SFT model) and a regime's RL pool."""
    from compass.bench.learning_efficiency import regimes, start
    size = start.WorldSize()
    cfg, world = start.build(size)
    path = start.sft_checkpoint(size, cfg, world, cache, log)
    model, tok = start.load(path)
    return model, tok, regimes.pool(regimes.REGIMES[regime], world), str(path)


def _pipeline_start(store_root: str, checkpoint: str, prompts: str, split: str):
    from compass.lm.model_factory import load_checkpoint
    from compass.rl.sampling.prompt_data import is_reasoning_prompt, prompts_from_table
    from compass.store.store import ArtifactStore
    store = ArtifactStore(store_root)
    ckpt = store.get("checkpoint", checkpoint)
    rows = prompts_from_table(store.get("prompts", prompts).read_table())
    if split != "all":
        rows = [p for p in rows if is_reasoning_prompt(p) == (split == "reasoning")]
    model, tok = load_checkpoint(ckpt.local_dir())
    return model, tok, rows, ckpt.uri


def rl_check(load, prompts, zvp_alpha: float, espo_alpha: float, *, steps: int, seed: int,
             max_new_tokens: int) -> dict:
    """Train RL-ZVP + ESPO from a fresh ``load()`` of the start; each metric's mean over the first and the last
    quarter of the steps, and the training reward's mean over all of them."""
    from compass.rl.config import RLConfig
    from compass.rl.engine import train
    model, tok = load()
    cfg = RLConfig(seed=seed, steps=steps, checkpoint_every=0, rollout={"max_new_tokens": max_new_tokens},
                   trainer={"lr": 5e-5, "mini_batches": 4}, sampling={"prompts_per_step": 8, "group_size": 8},
                   advantage={"kind": "rl_zvp", "alpha": zvp_alpha}, loss={"kind": "espo", "alpha": espo_alpha})
    t0 = time.perf_counter()
    m = train(model, tok, prompts, cfg, log=logging.getLogger("compass.bench.entropy_scale"), desc="check").metrics

    def mean(key: str, rows: list[dict]) -> float:
        xs = [r[key] for r in rows if key in r]
        return sum(xs) / max(len(xs), 1)
    q = max(1, len(m) // 4)
    out = {"zvp_alpha": zvp_alpha, "espo_alpha": espo_alpha, "seed": seed, "steps": len(m),
           "reward_all": mean("reward_mean", m), "time_s": time.perf_counter() - t0}
    for key in ("reward_mean", "eps_top", "clip_frac", "adv_abs_token_mean", "entropy", "zero_variance_rate"):
        out[key] = [mean(key, m[:q]), mean(key, m[-q:])]
    return out


def main(argv: list[str]) -> int:
    from compass.rl.algos.entropy_scale import entropy_stats, sample_entropies
    ap = argparse.ArgumentParser(prog="compass bench entropy-scale", description=__doc__.splitlines()[0])
    ap.add_argument("--start", choices=("bench", "pipeline"), default="bench")
    ap.add_argument("--store", default="./artifacts", help="pipeline: the artifact store")
    ap.add_argument("--checkpoint", default="thinking_ckpt", help="pipeline: checkpoint name (latest version)")
    ap.add_argument("--prompts", default="rl_prompts", help="pipeline: prompts name (latest version)")
    ap.add_argument("--split", choices=("reasoning", "domain", "all"), default="reasoning",
                    help="pipeline: the reasoning RL stage's rows, the domain RL stage's, or all")
    ap.add_argument("--regime", choices=("paper", "lowz"), default="paper", help="bench: whose RL pool")
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "compass-bench"), help="bench: SFT cache")
    ap.add_argument("--groups", type=int, default=64, help="prompts sampled (a seeded draw)")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=None,
                    help="default: 96 (configs/tiny.yaml reasoning_rl) for pipeline, 48 (the bench's) for bench")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--check", nargs="*", default=[], metavar="ZVP:ESPO",
                    help="also train RL-ZVP + ESPO from the start with each pair of alphas, e.g. 0.1:2.0 1.0:0.12")
    ap.add_argument("--check-steps", type=int, default=150)
    ap.add_argument("--check-seeds", default="0,1")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    logging.basicConfig(level=logging.WARNING)
    log = logging.getLogger("compass.bench.entropy_scale")
    if args.start == "bench":
        model, tok, rows, source = _bench_start(Path(args.cache), args.regime, log)
        max_new = args.max_new_tokens or 48
    else:
        model, tok, rows, source = _pipeline_start(args.store, args.checkpoint, args.prompts, args.split)
        max_new = args.max_new_tokens or 96
    rows_all = rows
    rows = random.Random(args.seed + 1).sample(rows, min(args.groups, len(rows)))
    t0 = time.perf_counter()
    ents = sample_entropies(model, tok, [p.prompt for p in rows], group_size=args.group_size,
                            max_new_tokens=max_new, temperature=args.temperature, seed=args.seed)
    s = entropy_stats(ents, model.config.vocab_size)
    s["source"] = {"start": args.start, "policy": source,
                   "prompts": args.split if args.start == "pipeline" else f"regime {args.regime}",
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
          f"(reference 2-10 nats: {z['alpha_range'][0]:.3f}-{z['alpha_range'][1]:.3f})")
    print(f"ESPO α (keep ε_top = {p['paper_eps_top']:.4f}): {p['alpha']:.4f} "
          f"(reference 2-10 nats: {p['alpha_range'][0]:.4f}-{p['alpha_range'][1]:.4f}); "
          f"the paper's α = 0.02 here gives ε_top {p['eps_top_at_0.02']:.4f}, ε_rest {p['eps_rest_at_0.02']:.5f}")
    checks = []
    if args.check:
        state = {k: v.clone() for k, v in model.state_dict().items()}

        def load():
            fresh = type(model)(model.config)
            fresh.load_state_dict(state)
            fresh.generation_config.pad_token_id = tok.pad_token_id
            fresh.generation_config.eos_token_id = tok.eos_token_id
            return fresh, tok
        print(f"\ncheck: {args.check_steps} steps of 8 x 8 samples, {max_new} new tokens, lr 5e-5, 4 mini-batches; "
              "training reward (mean; first -> last quarter), then first-quarter ε_top, clip_frac, |A| per token, "
              "last-quarter entropy")
        for pair in args.check:
            zvp_a, espo_a = (float(x) for x in pair.split(":"))
            for seed in (int(x) for x in args.check_seeds.split(",")):
                c = rl_check(load, rows_all, zvp_a, espo_a, steps=args.check_steps, seed=seed, max_new_tokens=max_new)
                checks.append(c)
                print(f"RL-ZVP α {zvp_a:<5g} ESPO α {espo_a:<5g} seed {seed}: reward {c['reward_all']:.3f} "
                      f"({c['reward_mean'][0]:.3f} -> {c['reward_mean'][1]:.3f}); ε_top {c['eps_top'][0]:.4f}, "
                      f"clip_frac {c['clip_frac'][0]:.4f}, |A| {c['adv_abs_token_mean'][0]:.2f}, "
                      f"entropy {c['entropy'][1]:.3f} ({c['time_s']:.0f}s)", flush=True)
    print(json.dumps({"bench": "entropy-scale", **s, "check": checks}))
    return 0
