"""``compass bench learning-efficiency``: rollout tokens each method needs to reach a held-out reward.

From one SFT'd tiny model (the world's arithmetic + instruction-following
suites, cached between runs), three methods with the same rollout token budget
and the same seeds:

- ``grpo``  — TRL-like defaults: group mean/std advantages, token-level PPO-clip 0.2;
- ``dapo``  — DAPO: dynamic sampling (re-sample until every group has reward spread;
  every generated token is paid for), clip-higher 0.28, token-mean loss;
- ``ours``  — ESPO (eq. 1-3) + RL-ZVP on zero-variance groups + retiring prompts the
  policy solves every time (zero-variance elimination).

Every other setting (prompts and group size per step, tokens, lr, prompt pool)
is shared. Held-out reward (sampled, temperature 1) is measured when a run
passes each rollout-token milestone; a run's curve is interpolated at the
milestones from the token counts where it was really measured, then averaged
over seeds. The standard error of one held-out estimate (sampling noise on the
fixed held-out prompts) is printed beside it. The target is half the gain the
best method reached over the SFT model; tokens-to-target interpolates between
milestones (a method that never gets there is charged the whole budget and
flagged). Plots of the curves go to ``--out``.

The defaults are chosen in docs/benchmarks.md: 2,500 SFT steps on 10,000
arithmetic rows give a start of ~0.4 held-out reward (the 25-75% window of
docs/architecture.md §5, with arithmetic levels 4-5 left to learn); 8 x 8 per step;
a 500-prompt RL pool that the 300k-token budget covers ~2.4 times, so that
retiring solved prompts has prompts that come back; 8 held-out samples per
prompt (standard error ~0.007 against gains of ~0.06).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import random
import time
from pathlib import Path

import torch

METHODS = {  # each method's RLConfig sections (the sampling keys join the shared ones)
    "grpo": {"advantage": {"kind": "grpo"}, "loss": {"kind": "ppo_clip_token_mean", "clip_eps": 0.2}},
    "dapo": {"advantage": {"kind": "grpo"},
             "loss": {"kind": "ppo_clip_token_mean", "clip_eps": 0.2, "clip_eps_high": 0.28},
             "sampling": {"dynamic": True}},
    "ours": {"advantage": {"kind": "rl_zvp"}, "loss": {"kind": "espo"}, "sampling": {"retire_solved": True}},
}
SUITES = ("arithmetic", "ifeval")


def _world(args):
    from stages.world.build import build_world
    from stages.world.config import WorldConfig
    from compass.lm.model_config import ModelConfig
    cfg = WorldConfig(seed=0, model=ModelConfig(hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2,
                                                head_dim=32, intermediate_size=256, num_experts=8,
                                                experts_per_token=2, expert_size=128, max_positions=512),
                      suites={"arithmetic": {"n": args.n_arith, "n_eval": args.n_eval},
                              "ifeval": {"n": args.n_ifeval, "n_eval": args.n_eval // 4}},
                      n_planted=0, n_preference_pairs=0, languages=["en"])
    return cfg, build_world(cfg)


def _sft_model(args, wcfg, world, log):
    """The SFT'd starting point, cached under ``--cache`` by its settings."""
    from compass.lm.model_factory import build_model, build_tokenizer, load_checkpoint, save_checkpoint
    from compass.lm.sft.train import encode_table, train_sft
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
    print(f"SFT: {args.sft_steps} steps in {time.perf_counter() - t0:.0f}s (cached in {cache})", flush=True)
    save_checkpoint(model, tok, cache)
    return load_checkpoint(cache)


@torch.no_grad()
def held_out(model, tok, prompts, *, samples: int, max_new_tokens: int, seed: int) -> dict:
    """Sampled (temperature 1) held-out reward: ``samples`` completions per prompt.

    Returns ``reward`` (mean over every completion), ``se`` (its standard error from
    sampling on these fixed prompts: sqrt(sum_p s_p^2 / k) / P, with s_p^2 the
    variance of prompt p's k rewards) and ``by_suite`` (mean reward per task).
    """
    from compass.lm.chat import sample
    from compass.gym.score import score
    per_prompt: list[tuple[str, list[float]]] = []
    for i in range(0, len(prompts), 32):
        chunk = prompts[i:i + 32]
        groups = sample(model, tok, [p.prompt for p in chunk], n=samples, max_new_tokens=max_new_tokens,
                        temperature=1.0, seed=seed + i)
        for p, g in zip(chunk, groups):
            per_prompt.append((p.task, [float(score(p.verifier, c["text"], p.reference)) for c in g]))
    flat = [x for _, rs in per_prompt for x in rs]
    mean = sum(flat) / max(len(flat), 1)
    if samples > 1:
        var = sum(_var(rs) / len(rs) for _, rs in per_prompt) / max(len(per_prompt), 1) ** 2
    else:                                    # one sample per prompt: the plain standard error
        var = _var(flat) / max(len(flat), 1)
    by_suite = {}
    for task in sorted({t for t, _ in per_prompt}):
        xs = [x for t, rs in per_prompt if t == task for x in rs]
        by_suite[task] = sum(xs) / len(xs)
    return {"reward": mean, "se": math.sqrt(var), "by_suite": by_suite}


def _var(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def run_method(name, seed, base_state, tok, train_prompts, eval_prompts, args, milestones, log):
    from compass.rl.config import RLConfig
    from compass.rl.engine import train
    model = base_state["factory"]()
    method = METHODS[name]
    cfg = RLConfig(seed=seed, steps=10_000, rollout_token_budget=args.budget,
                   rollout={"max_new_tokens": args.max_new_tokens},
                   trainer={"lr": args.lr, "mini_batches": args.mini_batches},
                   sampling={"prompts_per_step": args.prompts_per_step, "group_size": args.group_size,
                             **method.get("sampling", {})},
                   advantage=method["advantage"], loss=method["loss"])
    evals = [dict(base_state["eval0"], tokens=0)]      # held-out results at the token counts they were taken at
    nxt = [1]
    t_eval = [0.0]

    def evaluate(m, tokens):
        t0 = time.perf_counter()
        evals.append(dict(held_out(m, tok, eval_prompts, samples=args.eval_samples,
                                   max_new_tokens=args.max_new_tokens, seed=10_000), tokens=tokens))
        t_eval[0] += time.perf_counter() - t0

    def on_step(step, row, m):
        if nxt[0] < len(milestones) and row["rollout_tokens_total"] >= milestones[nxt[0]]:
            evaluate(m, row["rollout_tokens_total"])
            while nxt[0] < len(milestones) and row["rollout_tokens_total"] >= milestones[nxt[0]]:
                nxt[0] += 1
    t0 = time.perf_counter()
    res = train(model, tok, train_prompts, cfg, log=log, desc=f"{name}/s{seed}", on_step=on_step)
    m = res.metrics
    if not m or evals[-1]["tokens"] < m[-1]["rollout_tokens_total"]:   # the final model, where it stopped
        evaluate(model, m[-1]["rollout_tokens_total"] if m else 0)
    groups = max(1, sum(x["groups"] for x in m))
    return {"evals": evals,
            "curve": [(t, _interp([(e["tokens"], e["reward"]) for e in evals], t)) for t in milestones],
            "suite_curves": {s: [(t, _interp([(e["tokens"], e["by_suite"].get(s, 0.0)) for e in evals], t))
                                 for t in milestones] for s in evals[0]["by_suite"]},
            "steps": len(m), "time_s": time.perf_counter() - t0, "eval_time_s": t_eval[0],
            "zero_variance_rate": sum(x["zero_variance_all_pass"] + x["zero_variance_all_fail"] for x in m) / groups,
            "zero_variance_all_pass_rate": sum(x["zero_variance_all_pass"] for x in m) / groups,
            "zero_variance_all_fail_rate": sum(x["zero_variance_all_fail"] for x in m) / groups,
            "groups_dropped_rate": 1.0 - sum(x["groups_kept"] for x in m) / groups,
            "prompts_retired": m[-1]["prompts_retired"] if m else 0,
            "updated_steps": sum(x["updated"] for x in m),
            "tokens": m[-1]["rollout_tokens_total"] if m else 0}


def _interp(points: list[tuple[float, float]], t: float) -> float:
    """Piecewise-linear value at ``t`` of points sorted by their first element (held flat beyond the ends)."""
    if t <= points[0][0]:
        return points[0][1]
    for (t0, r0), (t1, r1) in zip(points, points[1:]):
        if t0 <= t <= t1:
            return r1 if t1 == t0 else r0 + (r1 - r0) * (t - t0) / (t1 - t0)
    return points[-1][1]


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


def _mean_std(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    return m, math.sqrt(_var(xs))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench learning-efficiency", description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds run are first-seed .. first-seed+seeds-1")
    ap.add_argument("--methods", default="grpo,dapo,ours")
    ap.add_argument("--budget", type=int, default=300_000, help="rollout tokens per run")
    ap.add_argument("--milestones", type=int, default=8,
                    help="held-out evaluations per run, at budget * (i/N)^1.5: denser early, where curves are steep")
    ap.add_argument("--prompts-per-step", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--mini-batches", type=int, default=1,
                    help="optimizer steps per rollout batch, every method (>1: the clip ranges act)")
    ap.add_argument("--sft-steps", type=int, default=2500)
    ap.add_argument("--sft-lr", type=float, default=1e-3)
    ap.add_argument("--n-arith", type=int, default=20_000, help="arithmetic items (half SFT rows, half RL prompts)")
    ap.add_argument("--n-ifeval", type=int, default=300)
    ap.add_argument("--n-eval", type=int, default=200, help="held-out arithmetic prompts (ifeval: a quarter)")
    ap.add_argument("--rl-prompts", type=int, default=500, help="RL prompt pool: a seeded sample of this many of "
                                                            "the world's RL prompts (0: all)")
    ap.add_argument("--eval-samples", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "compass-bench"))
    ap.add_argument("--out", default="bench_out/learning_efficiency")
    ap.add_argument("--quick", action="store_true", help="a seconds-long smoke run (numbers mean nothing)")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.budget, args.milestones, args.sft_steps = 1, 1200, 2, 20
        args.n_arith, args.n_ifeval, args.n_eval, args.prompts_per_step = 120, 20, 16, 4
        args.max_new_tokens, args.group_size, args.eval_samples, args.rl_prompts = 16, 4, 2, 0
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    log = logging.getLogger("compass.bench.learning_efficiency")
    from transformers import AutoModelForCausalLM

    from compass.rl.data import prompts_from_table

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
    if 0 < args.rl_prompts < len(train_prompts):
        train_prompts = random.Random(0).sample(train_prompts, args.rl_prompts)
    eval_prompts = prompts_from_table(world.eval_prompts)
    eval0 = held_out(sft_model, tok, eval_prompts, samples=args.eval_samples, max_new_tokens=args.max_new_tokens,
                     seed=10_000)
    reward0 = eval0["reward"]
    milestones = [round(args.budget * (i / args.milestones) ** 1.5) for i in range(args.milestones + 1)]
    base = {"factory": factory, "eval0": eval0}
    methods = args.methods.split(",")
    runs: dict[str, list[dict]] = {m: [] for m in methods}
    for m in methods:
        for s in range(args.first_seed, args.first_seed + args.seeds):
            r = run_method(m, s, base, tok, train_prompts, eval_prompts, args, milestones, log)
            runs[m].append(r)
            print(f"{m}/seed {s}: held-out " + " ".join(f"{x:.3f}" for _, x in r["curve"]) +
                  f"; {r['steps']} steps, zero-variance {r['zero_variance_rate']:.2f}, {r['time_s']:.0f}s "
                  f"({r['eval_time_s']:.0f}s evaluating)", flush=True)

    stats = {m: [_mean_std([r["curve"][i][1] for r in runs[m]]) for i in range(len(milestones))] for m in methods}
    mean_curve = {m: [(milestones[i], stats[m][i][0]) for i in range(len(milestones))] for m in methods}
    finals = {m: mean_curve[m][-1][1] for m in methods}
    best = max(finals.values())
    target = reward0 + 0.5 * (best - reward0)
    ttt = {m: tokens_to_target(mean_curve[m], target) for m in methods}
    ttt_seed = {m: [tokens_to_target(r["curve"], target) for r in runs[m]] for m in methods}
    suites = list(eval0["by_suite"])
    suite_final = {m: {s: sum(r["suite_curves"][s][-1][1] for r in runs[m]) / len(runs[m]) for s in suites}
                   for m in methods}
    se = sum(e["se"] for m in methods for r in runs[m] for e in r["evals"]) / \
        max(1, sum(len(r["evals"]) for m in methods for r in runs[m]))

    def avg(m, k):
        return sum(r[k] for r in runs[m]) / len(runs[m])

    n_by_suite = {s: sum(p.task == s for p in eval_prompts) for s in suites}
    print(f"\nlearning-efficiency: {len(train_prompts)} RL prompts (arithmetic + ifeval), {len(eval_prompts)} held out "
          f"({', '.join(f'{n} {s}' for s, n in n_by_suite.items())}) x {args.eval_samples} samples; "
          f"budget {args.budget:,} rollout tokens; {args.seeds} seeds; {args.prompts_per_step} prompts x "
          f"{args.group_size} samples x {args.max_new_tokens} tokens per step; lr {args.lr:g}")
    print(f"SFT model ({args.sft_steps} steps) held-out reward {reward0:.3f} ± {eval0['se']:.3f} (SE) "
          f"[{', '.join(f'{s} {v:.3f}' for s, v in eval0['by_suite'].items())}]; "
          f"target (half the best gain) {target:.3f}")
    print(f"standard error of one held-out estimate (sampling, fixed prompts): {se:.3f}; "
          f"of a {args.seeds}-seed mean from evaluation alone: {se / math.sqrt(max(args.seeds, 1)):.3f}\n")
    head = (f"{'method':<6} {'final (mean ± std)':>19} " + " ".join(f"{s[:10]:>10}" for s in suites) +
            f" {'to target':>10} {'reached':>7} {'zero-var':>8} {'all-pass':>8} {'all-fail':>8} {'dropped':>7} "
            f"{'retired':>7} {'steps':>5} {'updates':>7} {'time s':>7}")
    print(head)
    print("-" * len(head))
    for m in methods:
        fm, fs = stats[m][-1]
        print(f"{m:<6} {fm:>11.3f} ± {fs:.3f} " + " ".join(f"{suite_final[m][s]:>10.3f}" for s in suites) +
              f" {ttt[m][0]:>10,.0f} {str(ttt[m][1]):>7} {avg(m, 'zero_variance_rate'):>8.2f} "
              f"{avg(m, 'zero_variance_all_pass_rate'):>8.2f} {avg(m, 'zero_variance_all_fail_rate'):>8.2f} "
              f"{avg(m, 'groups_dropped_rate'):>7.2f} {avg(m, 'prompts_retired'):>7.0f} {avg(m, 'steps'):>5.0f} "
              f"{avg(m, 'updated_steps'):>7.0f} {avg(m, 'time_s'):>7.0f}")
    print("\nheld-out reward, mean ± std over seeds, at rollout-token milestones:")
    print("tokens  " + " ".join(f"{t:>13,}" for t in milestones))
    for m in methods:
        print(f"{m:<7} " + " ".join(f"{a:>7.3f}±{s:.3f}" for a, s in stats[m]))
    for s in suites:
        print(f"\n{s} only (mean over seeds):")
        for m in methods:
            pts = [sum(r["suite_curves"][s][i][1] for r in runs[m]) / len(runs[m]) for i in range(len(milestones))]
            print(f"{m:<7} " + " ".join(f"{x:>13.3f}" for x in pts))
    print("\ntokens to target per seed: " + "; ".join(
        f"{m} " + ", ".join(f"{t:,.0f}{'' if ok else '*'}" for t, ok in ttt_seed[m]) for m in methods) +
        "  (* not reached: whole budget charged)")
    for base_m in ("grpo", "dapo"):
        if "ours" in ttt_seed and base_m in ttt_seed:
            ratios = [o[0] / b[0] for o, b in zip(ttt_seed["ours"], ttt_seed[base_m]) if b[0] > 0]
            if ratios:
                print(f"ours / {base_m} tokens to target, seed by seed: " + ", ".join(f"{x:.2f}" for x in ratios))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _plot(stats, runs, milestones, target, out / "curves.png")
    (out / "runs.json").write_text(json.dumps({"milestones": milestones, "runs": runs, "eval0": eval0,
                                               "target": target, "args": vars(args)}, indent=1))
    print(f"\ncurves: {out / 'curves.png'}; per-seed data: {out / 'runs.json'}")
    head_json = {"bench": "learning-efficiency", "seeds": args.seeds, "budget_tokens": args.budget,
                 "mini_batches": args.mini_batches,
                 "reward_sft": round(reward0, 4), "target": round(target, 4), "held_out_se": round(se, 4),
                 "final": {m: round(v, 4) for m, v in finals.items()},
                 "final_std": {m: round(stats[m][-1][1], 4) for m in methods},
                 "tokens_to_target": {m: round(v[0]) for m, v in ttt.items()},
                 "reached": {m: v[1] for m, v in ttt.items()},
                 "tokens_to_target_per_seed": {m: [round(t) for t, _ in v] for m, v in ttt_seed.items()},
                 "zero_variance_rate": {m: round(avg(m, "zero_variance_rate"), 3) for m in methods},
                 "time_s": round(time.perf_counter() - t_all, 1)}
    for base_m in ("grpo", "dapo"):        # null when the baseline needs no tokens (no method gained anything)
        if "ours" in ttt and base_m in ttt:
            head_json[f"tokens_ratio_vs_{base_m}"] = (round(ttt["ours"][0] / ttt[base_m][0], 3)
                                                      if ttt[base_m][0] > 0 else None)
    print(json.dumps(head_json))
    return 0


def _plot(stats, runs, milestones, target, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    suites = list(next(iter(runs.values()))[0]["suite_curves"])
    fig, axes = plt.subplots(1, 1 + len(suites), figsize=(5 * (1 + len(suites)), 4))
    ax = axes[0]
    for m, st in stats.items():
        mean = [a for a, _ in st]
        std = [s for _, s in st]
        line, = ax.plot(milestones, mean, marker="o", label=f"{m} (mean ± std)")
        ax.fill_between(milestones, [a - s for a, s in zip(mean, std)], [a + s for a, s in zip(mean, std)],
                        color=line.get_color(), alpha=0.15)
        for r in runs[m]:
            ax.plot([e["tokens"] for e in r["evals"]], [e["reward"] for e in r["evals"]], color=line.get_color(),
                    alpha=0.3, linewidth=0.8)
    ax.axhline(target, color="grey", linestyle="--", label="target")
    ax.set_xlabel("rollout tokens")
    ax.set_ylabel("held-out reward")
    ax.set_title("all held-out prompts")
    ax.legend()
    for ax, s in zip(axes[1:], suites):
        for m in stats:
            pts = [sum(r["suite_curves"][s][i][1] for r in runs[m]) / len(runs[m]) for i in range(len(milestones))]
            ax.plot(milestones, pts, marker="o", label=m)
        ax.set_xlabel("rollout tokens")
        ax.set_title(f"{s} (mean over seeds)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
