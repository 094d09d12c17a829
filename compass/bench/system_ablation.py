"""The paper's Table 1 on this CPU: RL step time as the rollout system's parts are added one by one.

Real parts: the RL engine (``compass.rl.engine.train``: rollout, reward, update, weight sync) on the world's
tiny model and ``ifeval`` prompts, ``--workers`` Ray rollout actors (``native`` decoder, one thread each),
the gym's rule checks scored in the controller. Rows, each adding one part to the one above (paper §3):

1. **baseline**: actors return ids, the controller decodes every completion in one process, scores after
   the whole batch is generated, and splits prompts round robin;
2. **+ parallel detokenization** (§3.2.1): ``--detok-workers`` processes decode (``rollout.detokenize``);
3. **+ reward overlap** (§3.2.2): each sample scored as it finishes (``reward.overlap``);
4. **+ length balancing** (§3.1.1): the split by the history predictor's lengths, LPT
   (``rollout.balance``).

FP8 rollout (§3.1.2) needs a GPU and vLLM: its row says "not measured" here.

Lengths: as in ``compass bench length-balance``, each prompt gets a long-tailed token budget
(``rollout.max_new_tokens_by_task``, each prompt its own task name), because the tiny random model almost
never samples eos. The split never reads the budgets, only what earlier steps produced.

Every row samples the same completions (the native decoder's draws do not depend on the split), so the rows
must agree on every response, reward and loss: the table says whether they do. Rows run in rotating order,
``--rounds`` times; each row's step time is its median over rounds of the mean over steps after the first
pass over the prompts (when the history predictor has seen every prompt once).
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import logging
import os
import statistics

ROWS = ("baseline", "+ parallel detokenization", "+ reward overlap", "+ length balancing")


def row_config(k: int, args) -> dict:
    """The RL config overrides of row ``k`` (cumulative)."""
    return {
        "rollout": {"workers": args.workers, "backend": {"kind": "native"}, "max_new_tokens": args.max_tokens,
                    "detokenize": "processes" if k >= 1 else "controller", "detokenize_workers": args.detok_workers,
                    "balance": ({"partitioner": "lpt", "predict": "history"} if k >= 3
                                else {"partitioner": "round_robin", "predict": "none"})},
        "reward": {"overlap": k >= 2},
    }


def run(args) -> dict:
    import torch

    from compass.bench.length_balance import workload
    from compass.bench.vs_trl import build_setup
    from compass.gym.instructions.text import _detect_cached
    from compass.gym.score import judge
    from compass.rl.config import RLConfig
    from compass.rl.engine import train

    torch.set_num_threads(args.threads)      # the controller's update; the actors run one thread each
    model, tok, prompts, _ = build_setup(["ifeval"], args.quick, args.seed)
    prompts = [dataclasses.replace(p, task=f"len{i:03d}") for i, p in enumerate(prompts[:args.pool])]
    mu = workload(len(prompts), args.median, args.sigma, args.max_tokens, args.seed)
    budgets = {p.task: int(round(m)) for p, m in zip(prompts, mu)}
    first_pass = -(-len(prompts) // args.prompts)
    results: dict[str, list] = {name: [] for name in ROWS}
    outputs: dict[str, tuple] = {}
    log = logging.getLogger("compass.bench.system_ablation")
    log.setLevel(logging.WARNING)                 # per-step lines would bury the table
    for r in range(args.rounds):
        for j in range(len(ROWS)):
            k = (j + r) % len(ROWS)
            over = row_config(k, args)
            over["rollout"]["max_new_tokens_by_task"] = budgets
            cfg = RLConfig(seed=args.seed, steps=args.steps, checkpoint_every=0, **over,
                           sampling={"prompts_per_step": args.prompts, "group_size": args.group},
                           trainer={"lr": 5e-5})
            _detect_cached.cache_clear()        # every row scores the same texts: none from an earlier row's cache
            res = train(copy.deepcopy(model), tok, prompts, cfg, score_fn=judge, log=log, desc=ROWS[k])
            steady = [m for m in res.metrics if m["step"] >= first_pass] or res.metrics
            results[ROWS[k]].append({
                "step_s": statistics.mean(m["time_step_s"] for m in steady),
                **{ph: statistics.mean(m[f"time_{ph}_s"] for m in steady)
                   for ph in ("rollout", "reward", "update", "sync")},
                "idle_share": statistics.mean(m.get("rollout_idle_share", 0.0) for m in steady),
                "makespan_s": statistics.mean(m.get("rollout_makespan_s", 0.0) for m in steady),
                "samples_per_s": (sum(m["samples"] for m in steady) / sum(m["time_step_s"] for m in steady))})
            out = (tuple((x["prompt_id"], x["sample_idx"], x["response"], round(x["reward"], 6)) for x in res.rollouts),
                   tuple(round(m.get("loss", 0.0), 5) for m in res.metrics))
            outputs.setdefault(ROWS[k], out)
            if out != outputs[ROWS[k]]:
                raise RuntimeError(f"{ROWS[k]}: round {r} sampled other outputs than round 0")
    base = outputs[ROWS[0]]
    return {"results": results, "identical": {name: outputs[name] == base for name in ROWS},
            "first_pass": first_pass, "samples": len(base[0])}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench system-ablation", description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2, help="Ray rollout actors")
    ap.add_argument("--detok-workers", type=int, default=2, help="detokenization processes (rows 2-4)")
    ap.add_argument("--pool", type=int, default=64, help="distinct prompts")
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step")
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--steps", type=int, default=8, help="steps per run (the first pass over the pool is left out)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of the controller (its update); with more, CPU reductions may differ in the "
                         "last bit between runs and the rows could no longer be held to identical outputs")
    ap.add_argument("--rounds", type=int, default=2, help="runs of every row, in rotating order")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--median", type=float, default=24.0)
    ap.add_argument("--sigma", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a small run for the test")
    args = ap.parse_args(argv)
    os.environ.setdefault("COMPASS_PROGRESS", "0")        # the table is the output, not per-run progress bars
    if args.quick:
        args.pool, args.prompts, args.group, args.steps, args.rounds, args.max_tokens = 8, 4, 2, 3, 1, 24
    r = run(args)
    med = {name: {key: statistics.median(x[key] for x in xs) for key in xs[0]} for name, xs in r["results"].items()}
    base = med[ROWS[0]]["step_s"]
    print(f"# Table 1 on this CPU: {args.workers} Ray rollout actors (native, 1 thread each; the controller's "
          f"update {args.threads} threads), {args.prompts} ifeval prompts x "
          f"{args.group} samples a step, long-tailed budgets (median {args.median:g}, sigma {args.sigma:g}, cap "
          f"{args.max_tokens}); {args.steps} steps a run, steps {r['first_pass']}+ timed; median of {args.rounds} "
          f"round(s)\n")
    print("| method | step s | speedup | rollout s | reward s (exposed) | update s | idle share | samples/s | "
          "same outputs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in ROWS:
        m = med[name]
        print(f"| {name} | {m['step_s']:.3f} | {base / m['step_s']:.2f}x | {m['rollout']:.3f} | {m['reward']:.3f} | "
              f"{m['update']:.3f} | {m['idle_share']:.3f} | {m['samples_per_s']:.1f} | {r['identical'][name]} |")
    print("| + FP8 rollout | not measured (needs a GPU and vLLM) | | | | | | | |")
    head = {"bench": "system-ablation", "quick": args.quick,
            "overall_speedup": base / med[ROWS[-1]]["step_s"],
            **{f"speedup_{i}": base / med[name]["step_s"] for i, name in enumerate(ROWS)},
            "identical_outputs": all(r["identical"].values()), "step_s_baseline": base,
            "step_s_all": med[ROWS[-1]]["step_s"], "workers": args.workers, "fp8": "not measured"}
    print(f"\noverall step-time speedup {head['overall_speedup']:.2f}x (target >= 1.5x) at identical outputs: "
          f"{head['identical_outputs']}")
    print(json.dumps(head))
    return 0
