"""``compass bench learning-efficiency``: rollout tokens each method needs to reach a held-out reward.

From one SFT'd tiny model (the world's arithmetic + instruction-following
suites, cached between runs), three methods with the same rollout token budget
and the same seeds:

- ``grpo``  — TRL-like defaults: group mean/std advantages, token-level PPO-clip 0.2;
- ``dapo``  — DAPO: dynamic sampling (re-sample until every group has reward spread;
  every generated token is paid for), clip-higher 0.28, token-mean loss;
- ``ours``  — ESPO (eq. 1-3) + RL-ZVP on zero-variance groups + retiring prompts the
  policy solves every time (zero-variance elimination).

Held-out reward (sampled, temperature 1) is measured at fixed rollout-token
milestones, averaged over seeds. The target is half the gain the best method
reached over the SFT model; tokens-to-target interpolates between milestones
(a method that never gets there is charged the whole budget and flagged).
Plots of the curves go to ``--out``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import time
from pathlib import Path

import torch

METHODS = {
    "grpo": {"advantage": "grpo", "policy_loss": "ppo_clip_token_mean", "clip_eps": 0.2},
    "dapo": {"advantage": "grpo", "policy_loss": "ppo_clip_token_mean", "clip_eps": 0.2, "clip_eps_high": 0.28,
             "dynamic_sampling": True},
    "ours": {"advantage": "rl_zvp", "policy_loss": "espo", "retire_solved": True},
}


def _world(args):
    from stages.world.build import build_world
    from stages.world.config import WorldConfig
    from stages.common.model_config import ModelConfig
    cfg = WorldConfig(seed=0, model=ModelConfig(hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2,
                                                head_dim=32, intermediate_size=256, num_experts=8,
                                                experts_per_token=2, expert_size=128, max_positions=512),
                      suites={"arithmetic": {"n": args.n_arith, "n_eval": args.n_eval},
                              "ifeval": {"n": args.n_ifeval, "n_eval": args.n_eval // 4}},
                      n_planted=0, n_preference_pairs=0, languages=["en"])
    return cfg, build_world(cfg)


def _sft_model(args, wcfg, world, log):
    """The SFT'd starting point, cached under ``--cache`` by its settings."""
    from stages.common.model_factory import build_model, build_tokenizer, load_checkpoint, save_checkpoint
    from stages.sft.train import encode_table, train_sft
    key = hashlib.sha256(json.dumps([wcfg.model_dump(mode="json"), args.sft_steps, args.sft_lr]).encode()).hexdigest()
    cache = Path(args.cache) / f"sft-{key[:12]}"
    if (cache / "config.json").exists():
        log.info("SFT checkpoint from cache %s", cache)
        return load_checkpoint(cache)
    tok = build_tokenizer(world.texts(), wcfg.tokenizer)
    model = build_model(wcfg.model, tok, wcfg.seed)
    t = world.raw_sft
    encoded, _ = encode_table(tok, t.column("prompt").to_pylist(), t.column("response").to_pylist(), 256)
    t0 = time.perf_counter()
    train_sft(model, tok, encoded, steps=args.sft_steps, batch_size=16, lr=args.sft_lr, warmup_steps=4,
              weight_decay=0.0, grad_clip=1.0, seed=0, log_every=100, logger=log, desc="sft")
    log.info("SFT: %d steps in %.0fs", args.sft_steps, time.perf_counter() - t0)
    save_checkpoint(model, tok, cache)
    return load_checkpoint(cache)


@torch.no_grad()
def held_out_reward(model, tok, prompts, *, samples: int, max_new_tokens: int, seed: int) -> float:
    """Mean reward of ``samples`` sampled completions (temperature 1) per held-out prompt."""
    from stages.common.lm import sample
    from stages.gym.provisional import score
    total, n = 0.0, 0
    for i in range(0, len(prompts), 32):
        chunk = prompts[i:i + 32]
        groups = sample(model, tok, [p.prompt for p in chunk], n=samples, max_new_tokens=max_new_tokens,
                        temperature=1.0, seed=seed + i)
        for p, g in zip(chunk, groups):
            for c in g:
                total += float(score(p.verifier, c["text"], p.reference))
                n += 1
    return total / max(n, 1)


def run_method(name, seed, base_state, tok, train_prompts, eval_prompts, args, milestones, log):
    from stages.rl.config import RLConfig
    from stages.rl.engine import train
    model = base_state["factory"]()
    cfg = RLConfig(seed=seed, steps=10_000, prompts_per_step=args.prompts_per_step, group_size=args.group_size,
                   max_new_tokens=args.max_new_tokens, lr=args.lr, rollout_token_budget=args.budget,
                   **METHODS[name])
    curve = [(0, base_state["reward0"])]
    nxt = [1]

    def on_step(step, row, m):
        while nxt[0] < len(milestones) and row["rollout_tokens_total"] >= milestones[nxt[0]]:
            r = held_out_reward(m, tok, eval_prompts, samples=args.eval_samples, max_new_tokens=args.max_new_tokens,
                                seed=10_000)
            curve.append((milestones[nxt[0]], r))
            nxt[0] += 1
    t0 = time.perf_counter()
    res = train(model, tok, train_prompts, cfg, log=log, desc=f"{name}/s{seed}", on_step=on_step)
    while nxt[0] < len(milestones):            # budget hit inside the last step: score the final model there
        curve.append((milestones[nxt[0]], held_out_reward(model, tok, eval_prompts, samples=args.eval_samples,
                                                          max_new_tokens=args.max_new_tokens, seed=10_000)))
        nxt[0] += 1
    m = res.metrics
    return {"curve": curve, "steps": len(m), "time_s": time.perf_counter() - t0,
            "zero_variance_rate": sum(x["zero_variance_rate"] * x["groups"] for x in m) / max(1, sum(x["groups"] for x in m)),
            "updated_steps": sum(x["updated"] for x in m),
            "tokens": m[-1]["rollout_tokens_total"] if m else 0}


def tokens_to_target(curve: list[tuple[float, float]], target: float) -> tuple[float, bool]:
    """First rollout-token count where the curve reaches ``target`` (linear between points); (tokens, reached)."""
    for (t0, r0), (t1, r1) in zip(curve, curve[1:]):
        if r0 >= target:
            return t0, True
        if r1 >= target:
            return t0 + (t1 - t0) * (target - r0) / (r1 - r0), True
    if curve and curve[-1][1] >= target:
        return curve[-1][0], True
    return curve[-1][0] if curve else 0.0, False


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench learning-efficiency", description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--methods", default="grpo,dapo,ours")
    ap.add_argument("--budget", type=int, default=60_000, help="rollout tokens per run")
    ap.add_argument("--milestones", type=int, default=6, help="held-out evaluations per run")
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--sft-steps", type=int, default=700)
    ap.add_argument("--sft-lr", type=float, default=1e-3)
    ap.add_argument("--n-arith", type=int, default=3000)
    ap.add_argument("--n-ifeval", type=int, default=300)
    ap.add_argument("--n-eval", type=int, default=96)
    ap.add_argument("--eval-samples", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "compass-bench"))
    ap.add_argument("--out", default="bench_out/learning_efficiency")
    ap.add_argument("--quick", action="store_true", help="a seconds-long smoke run (numbers mean nothing)")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.budget, args.milestones, args.sft_steps = 1, 1200, 2, 20
        args.n_arith, args.n_ifeval, args.n_eval, args.prompts_per_step = 120, 20, 16, 4
        args.max_new_tokens = 16
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    log = logging.getLogger("compass.bench.learning_efficiency")
    from transformers import AutoModelForCausalLM

    from stages.rl.data import prompts_from_table

    t_all = time.perf_counter()
    wcfg, world = _world(args)
    sft_model, tok = _sft_model(args, wcfg, world, log)
    state = {k: v.clone() for k, v in sft_model.state_dict().items()}

    def factory():
        m = AutoModelForCausalLM.from_config(sft_model.config, dtype=torch.float32)
        m.load_state_dict(state)
        m.generation_config.pad_token_id = tok.pad_token_id
        m.generation_config.eos_token_id = tok.eos_token_id
        return m
    train_prompts = prompts_from_table(world.raw_prompts)
    eval_prompts = prompts_from_table(world.eval_prompts)
    reward0 = held_out_reward(sft_model, tok, eval_prompts, samples=args.eval_samples,
                              max_new_tokens=args.max_new_tokens, seed=10_000)
    milestones = [round(args.budget * i / args.milestones) for i in range(args.milestones + 1)]
    base = {"factory": factory, "reward0": reward0}
    methods = args.methods.split(",")
    runs = {m: [run_method(m, s, base, tok, train_prompts, eval_prompts, args, milestones, log)
                for s in range(args.seeds)] for m in methods}

    mean_curve = {m: [(milestones[i], sum(r["curve"][i][1] for r in runs[m]) / len(runs[m]))
                      for i in range(len(milestones))] for m in methods}
    finals = {m: mean_curve[m][-1][1] for m in methods}
    best = max(finals.values())
    target = reward0 + 0.5 * (best - reward0)
    ttt = {m: tokens_to_target(mean_curve[m], target) for m in methods}

    print(f"\nlearning-efficiency: {len(train_prompts)} RL prompts (arithmetic + ifeval), {len(eval_prompts)} held out "
          f"x {args.eval_samples} samples; budget {args.budget} rollout tokens; {args.seeds} seeds; "
          f"{args.prompts_per_step} prompts x {args.group_size} samples x {args.max_new_tokens} tokens per step")
    print(f"SFT model held-out reward {reward0:.3f}; target (half the best gain) {target:.3f}\n")
    head = f"{'method':<6} {'final':>7} {'tokens to target':>17} {'reached':>8} {'zero-var':>9} {'steps':>6} {'time s':>7}"
    print(head)
    print("-" * len(head))
    for m in methods:
        zv = sum(r["zero_variance_rate"] for r in runs[m]) / len(runs[m])
        steps = sum(r["steps"] for r in runs[m]) / len(runs[m])
        tsec = sum(r["time_s"] for r in runs[m]) / len(runs[m])
        print(f"{m:<6} {finals[m]:>7.3f} {ttt[m][0]:>17,.0f} {str(ttt[m][1]):>8} {zv:>9.2f} {steps:>6.1f} {tsec:>7.1f}")
    print("\nheld-out reward (mean over seeds) at rollout-token milestones:")
    print("tokens  " + " ".join(f"{t:>8}" for t in milestones))
    for m in methods:
        print(f"{m:<7} " + " ".join(f"{r:>8.3f}" for _, r in mean_curve[m]))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _plot(mean_curve, runs, target, out / "curves.png")
    (out / "runs.json").write_text(json.dumps({"milestones": milestones, "runs": runs, "reward0": reward0,
                                               "target": target}, indent=1))
    print(f"\ncurves: {out / 'curves.png'}; per-seed data: {out / 'runs.json'}")
    head_json = {"bench": "learning-efficiency", "seeds": args.seeds, "budget_tokens": args.budget,
                 "reward_sft": round(reward0, 4), "target": round(target, 4),
                 "final": {m: round(v, 4) for m, v in finals.items()},
                 "tokens_to_target": {m: round(v[0]) for m, v in ttt.items()},
                 "reached": {m: v[1] for m, v in ttt.items()}, "time_s": round(time.perf_counter() - t_all, 1)}
    if "ours" in ttt and "grpo" in ttt and ttt["grpo"][0] > 0:
        head_json["tokens_ratio_vs_grpo"] = round(ttt["ours"][0] / ttt["grpo"][0], 3)
    if "ours" in ttt and "dapo" in ttt and ttt["dapo"][0] > 0:
        head_json["tokens_ratio_vs_dapo"] = round(ttt["ours"][0] / ttt["dapo"][0], 3)
    print(json.dumps(head_json))
    return 0


def _plot(mean_curve, runs, target, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for m, curve in mean_curve.items():
        line, = ax.plot([t for t, _ in curve], [r for _, r in curve], marker="o", label=f"{m} (mean)")
        for r in runs[m]:
            ax.plot([t for t, _ in r["curve"]], [x for _, x in r["curve"]], color=line.get_color(), alpha=0.25)
    ax.axhline(target, color="grey", linestyle="--", label="target")
    ax.set_xlabel("rollout tokens")
    ax.set_ylabel("held-out reward")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
