"""Length-predicted rollout balancing (paper §3.1.1) on a long-tailed length mix: worker idle share and makespan.

Real parts: the world's tiny model, a :class:`compass.rl.rollout.ray_pool.RayRolloutPool` of ``--workers`` Ray
actors (one torch thread each) running the ``native`` decoder, each actor streaming its samples back as
they finish. What this machine cannot supply is a policy whose answers are long for some prompts and short
for others (the tiny random model almost never samples eos), so the workload sets it: prompt ``i`` has a
mean length ``mu_i`` drawn once from a log-normal (median ``--median``, ``--sigma``: a long tail, as
reasoning rollouts have), and at every visit its samples stop at ``mu_i * exp(noise)`` tokens (``--noise``:
the visit-to-visit spread a policy has) through the decoder's per-prompt budgets. The split never sees
those budgets: only its predictor, from what earlier steps produced.

Every step the same prompts and budgets go through each split, in a rotating order:

- ``round_robin``: prompt ``i`` to worker ``i mod W`` (no length knowledge);
- ``prompt_length``: LPT on ``n x (prompt tokens + max_new_tokens)`` (the split before this bench);
- ``history_lpt`` / ``history_kk``: LPT / Karmarkar-Karp on ``n x`` the history predictor's length
  (:class:`compass.rl.sampling.length_predict.LengthPredictor`, fed each step's real lengths);
- ``oracle``: LPT on this visit's true lengths (what a perfect predictor would give).

Measured per step: each actor's finish time (seconds from dispatch to the end of its decode, as it reports it),
``idle_share`` (mean of ``1 - finish / makespan``), the makespan, and in tokens the split's heaviest worker
over the perfect split of the true lengths (``makespan_over_ideal``). Steps of the first pass over the
prompts (no history yet) are reported apart from the steady state the headline uses.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time

STRATEGIES = ("round_robin", "prompt_length", "history_lpt", "history_kk", "oracle")


def workload(n_prompts: int, median: float, sigma: float, max_tokens: int, seed: int) -> list[float]:
    """Each prompt's mean generation length: log-normal, clipped to [4, max_tokens]."""
    rng = random.Random(seed)
    return [min(max(4.0, median * math.exp(sigma * rng.gauss(0, 1))), max_tokens) for _ in range(n_prompts)]


def visit_budgets(mu: list[float], idx: list[int], noise: float, max_tokens: int, rng: random.Random) -> tuple:
    return tuple(int(min(max(2, round(mu[i] * math.exp(noise * rng.gauss(0, 1)))), max_tokens)) for i in idx)


def run(args) -> dict:
    import torch

    from compass.bench.vs_trl import build_setup
    from compass.lm.chat import chat_prefix
    from compass.rl.sampling.length_balance import schedule_metrics, split_quality
    from compass.rl.sampling.length_predict import LengthPredictor, prediction_error
    from compass.rl.rollout.base import SamplingParams
    from compass.rl.rollout.ray_pool import RayRolloutPool, plan_shards

    torch.set_num_threads(1)
    model, tok, prompts, _ = build_setup(["ifeval"], args.quick, args.seed)
    rng = random.Random(args.seed)
    pool_prompts = rng.sample(prompts, min(args.pool, len(prompts)))
    ids = [tok(chat_prefix(tok, p.prompt), add_special_tokens=False)["input_ids"] for p in pool_prompts]
    mu = workload(len(pool_prompts), args.median, args.sigma, args.max_tokens, args.seed)
    n, W = args.group, args.workers
    order = list(range(len(pool_prompts)))
    steps: list[list[int]] = []
    while len(steps) < args.steps:                 # epochs over the pool, shuffled each time
        rng.shuffle(order)
        steps += [order[k:k + args.prompts] for k in range(0, len(order) - args.prompts + 1, args.prompts)]
    steps = steps[:args.steps]
    first_pass = math.ceil(len(pool_prompts) / args.prompts)
    predictors = {s: LengthPredictor(args.max_tokens) for s in ("history_lpt", "history_kk")}
    rows: list[dict] = []
    t_setup = time.perf_counter()
    pool = RayRolloutPool("native", model, tok, workers=W, threads_per_worker=1, max_batch_rows=args.max_batch_rows)
    setup_s = time.perf_counter() - t_setup
    try:
        pool.generate([ids[0]] * W, 1, SamplingParams(max_new_tokens=4, seed=0))       # warm the actors
        for k, idx in enumerate(steps):
            budgets = visit_budgets(mu, idx, args.noise, args.max_tokens, rng)
            sampling = SamplingParams(max_new_tokens=args.max_tokens, temperature=1.0, seed=1000 + k, budgets=budgets)
            step_ids = [ids[i] for i in idx]
            for r in range(len(STRATEGIES)):
                name = STRATEGIES[(k + r) % len(STRATEGIES)]
                work, predicted = None, None
                if name == "round_robin":
                    pool.partitioner = "round_robin"
                elif name == "prompt_length":
                    pool.partitioner = "lpt"
                elif name == "oracle":
                    pool.partitioner, work = "lpt", [n * b for b in budgets]
                else:
                    pred = predictors[name]
                    predicted = [pred.predict(str(i), "t")[0] for i in idx]
                    pool.partitioner = "lpt" if name == "history_lpt" else "karmarkar_karp"
                    work = [n * x for x in predicted]
                plan = plan_shards(step_ids, n, args.max_tokens, W, work, pool.partitioner)
                out = pool.generate(step_ids, n, sampling, work)
                lengths = [[len(c.ids) for c in g] for g in out]
                actual = [sum(x) / n for x in lengths]
                sched = pool.last_schedule
                row = {"step": k, "strategy": name, "steady": k >= first_pass,
                       **{key: sched[key] for key in ("makespan_s", "idle_share")},
                       "finish_s": sched["finish_s"],
                       **split_quality(plan, [sum(x) for x in lengths]),
                       "tokens": sum(sum(x) for x in lengths)}
                if predicted is not None:
                    row.update(prediction_error(predicted, actual))
                    for i, x in zip(idx, lengths):
                        predictors[name].observe(str(i), "t", x)
                rows.append(row)
    finally:
        pool.close()
    return {"rows": rows, "setup_s": setup_s, "first_pass_steps": first_pass, "mu": mu}


def summarize(r: dict, args) -> dict:
    out = {}
    for name in STRATEGIES:
        for part, keep in (("steady", True), ("first_pass", False)):
            xs = [x for x in r["rows"] if x["strategy"] == name and x["steady"] == keep]
            if not xs:
                continue
            out.setdefault(name, {})[part] = {
                "steps": len(xs),
                "idle_share": statistics.mean(x["idle_share"] for x in xs),
                "makespan_s": statistics.mean(x["makespan_s"] for x in xs),
                "makespan_over_ideal": statistics.mean(x["makespan_over_ideal"] for x in xs),
                "pred_rel_error": (statistics.mean(x["length_pred_rel_error"] for x in xs)
                                   if "length_pred_rel_error" in xs[0] else None),
                "tokens": sum(x["tokens"] for x in xs)}
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench length-balance", description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2, help="rollout actors (one torch thread each)")
    ap.add_argument("--pool", type=int, default=96, help="distinct prompts, visited in shuffled passes")
    ap.add_argument("--prompts", type=int, default=32, help="prompts per step")
    ap.add_argument("--group", type=int, default=8, help="samples per prompt")
    ap.add_argument("--steps", type=int, default=12, help="steps (the first pass over the pool has no history)")
    ap.add_argument("--max-tokens", type=int, default=384)
    ap.add_argument("--median", type=float, default=24.0, help="median of the prompts' mean lengths")
    ap.add_argument("--sigma", type=float, default=1.0, help="log-normal sigma of the prompts' mean lengths")
    ap.add_argument("--noise", type=float, default=0.25, help="log-normal sigma of a visit's length around it")
    ap.add_argument("--max-batch-rows", type=int, default=32,
                    help="rows an actor decodes at once (its KV-cache bound, vLLM's max_num_seqs); 0: all at once")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a small run for the test")
    args = ap.parse_args(argv)
    args.max_batch_rows = args.max_batch_rows or None
    if args.quick:
        args.pool, args.prompts, args.steps, args.max_tokens, args.group = 8, 4, 3, 24, 2
    r = run(args)
    s = summarize(r, args)
    print(f"# Length-balanced rollout split: {args.workers} Ray actors (native decoder, 1 thread each), "
          f"{args.prompts} prompts x {args.group} samples a step, {args.steps} steps over {args.pool} prompts "
          f"(first {r['first_pass_steps']} = first pass, no history); lengths log-normal median {args.median:g}, "
          f"sigma {args.sigma:g}, visit noise {args.noise:g}, cap {args.max_tokens}\n")
    print("| split | part | steps | idle share | makespan s | makespan / ideal (tokens) | prediction error |")
    print("|---|---|---|---|---|---|---|")
    for name in STRATEGIES:
        for part, v in s.get(name, {}).items():
            err = "-" if v["pred_rel_error"] is None else f"{v['pred_rel_error']:.3f}"
            print(f"| {name} | {part} | {v['steps']} | {v['idle_share']:.3f} | {v['makespan_s']:.3f} | "
                  f"{v['makespan_over_ideal']:.3f} | {err} |")
    part = "steady" if "steady" in s["round_robin"] else "first_pass"
    rr, hist = s["round_robin"][part], s["history_lpt"][part]
    kk, pl = s["history_kk"][part], s["prompt_length"][part]
    head = {"idle_reduction_points": rr["idle_share"] - hist["idle_share"],
            "idle_reduction_points_kk": rr["idle_share"] - kk["idle_share"],
            "idle_reduction_points_vs_prompt_length": pl["idle_share"] - hist["idle_share"],
            "makespan_over_ideal": hist["makespan_over_ideal"],
            "makespan_speedup_vs_round_robin": rr["makespan_s"] / hist["makespan_s"],
            "prediction_rel_error": hist["pred_rel_error"],
            "idle_share_round_robin": rr["idle_share"], "idle_share_history_lpt": hist["idle_share"],
            "workers": args.workers, "steps": args.steps, "part": part}
    print(f"\nidle share down {100 * head['idle_reduction_points']:.1f} points vs round robin "
          f"(target >= 12); makespan {head['makespan_over_ideal']:.3f}x the perfect split (target <= 1.1); "
          f"rollout makespan {head['makespan_speedup_vs_round_robin']:.2f}x faster than round robin")
    print(json.dumps(head))
    return 0
