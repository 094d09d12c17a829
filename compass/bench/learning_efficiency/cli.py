"""``compass bench learning-efficiency``: the command line, and the order of the work."""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

from compass.bench.learning_efficiency import grader, plots, regimes, report, runner, signal_vs_n, start
from compass.bench.learning_efficiency.heldout import evaluate
from compass.bench.learning_efficiency.methods import ALL, methods, uses_grades
from compass.bench.learning_efficiency.summary import summarize

FIG3_NS = (2, 4, 8, 16, 32)


def parse(argv: list[str]) -> argparse.Namespace:
    from compass.bench.learning_efficiency import __doc__ as doc
    ap = argparse.ArgumentParser(prog="compass bench learning-efficiency", description=doc.splitlines()[0])
    ap.add_argument("--regimes", default="paper,lowz", help="comma list of: " + ", ".join(regimes.REGIMES))
    ap.add_argument("--methods", default=",".join(ALL), help="comma list of: " + ", ".join(ALL))
    ap.add_argument("--lowz-methods", default="grpo,ours",
                    help="methods of the lowz regime, the control ('all': --methods)")
    ap.add_argument("--starts", type=int, default=3, help="SFT'd start checkpoints, one per start seed")
    ap.add_argument("--first-start", type=int, default=0, help="starts are first-start .. first-start+starts-1")
    ap.add_argument("--seeds", type=int, default=3, help="RL seeds per start (paired across methods)")
    ap.add_argument("--first-seed", type=int, default=0, help="seeds run are first-seed .. first-seed+seeds-1")
    ap.add_argument("--config", default=None, help="pipeline YAML whose reasoning_rl section is 'ours' "
                                                   "(default: the embedded configs/tiny.yaml)")
    ap.add_argument("--set", action="append", default=[], metavar="REGIME.KEY=VALUE",
                    help="override a regime setting, e.g. paper.budget=150000 or lowz.eval_samples=8")
    ap.add_argument("--grader-samples", type=int, default=8, help="samples per pool prompt the grader draws")
    ap.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples of the starts and seeds")
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time, each in its own process")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "compass-bench"))
    ap.add_argument("--out", default="bench_out/learning_efficiency")
    ap.add_argument("--quick", action="store_true", help="a smoke run of every part in well under a minute "
                                                          "(numbers mean nothing)")
    args = ap.parse_args(argv)
    if args.quick:
        args.starts, args.seeds, args.grader_samples, args.bootstrap = 2, 1, 4, 200
    return args


def _regimes(args) -> list[regimes.Regime]:
    over: dict[str, dict] = {}
    for item in args.set:
        key, _, value = item.partition("=")
        name, _, field = key.partition(".")
        if name not in regimes.REGIMES or not field or not value:
            raise SystemExit(f"--set {item!r}: expected REGIME.KEY=VALUE with REGIME in {', '.join(regimes.REGIMES)}")
        over.setdefault(name, {})[field] = value
    out = []
    for name in args.regimes.split(","):
        if name not in regimes.REGIMES:
            raise SystemExit(f"unknown regime {name!r} (known: {', '.join(regimes.REGIMES)})")
        r = regimes.REGIMES[name]
        if args.quick:
            import dataclasses
            r = dataclasses.replace(r, **regimes.QUICK[name])
        out.append(r.with_overrides(over.get(name, {})))
    return out


def _mix(prompts, labels: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for p in prompts:
        counts[labels[p.id]] = counts.get(labels[p.id], 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def _hist(rates: list[float]) -> str:
    n = len(rates)
    zero = sum(r == 0 for r in rates) / n
    one = sum(r == 1 for r in rates) / n
    return f"{zero:.0%} at 0, {1 - zero - one:.0%} between, {one:.0%} at 1 (mean {sum(rates) / n:.2f})"


def main(argv: list[str]) -> int:
    args = parse(argv)
    os.environ.setdefault("COMPASS_PROGRESS", "0")
    import torch
    torch.set_num_threads(args.threads)
    log = logging.getLogger(runner.LOGGER)
    log.setLevel(logging.WARNING)
    t_all = time.perf_counter()
    size = start.QUICK_WORLD if args.quick else start.WorldSize()
    table = methods(args.config)
    wanted = args.methods.split(",")
    unknown = [m for m in wanted if m not in table]
    if unknown:
        raise SystemExit(f"unknown method(s) {', '.join(unknown)} (known: {', '.join(table)})")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    start_seeds = list(range(args.first_start, args.first_start + args.starts))
    regs = _regimes(args)
    wcfg, world = start.build(size)

    # the starts: one SFT'd model per start seed, trained --jobs at a time where not cached
    t0 = time.perf_counter()
    ckpts = {a: str(p) for a in start_seeds if (p := start.cached(size, wcfg, Path(args.cache), a))}
    todo = [start.StartJob(size, a, args.cache) for a in start_seeds if a not in ckpts]
    if todo:
        print(f"training {len(todo)} start(s) (SFT, {size.sft_steps} steps each; cached in {args.cache})", flush=True)
        ckpts.update(zip((j.seed for j in todo), runner.run_all(
            todo, workers=min(args.jobs, len(todo)), threads=args.threads, fn=start.ensure,
            done=lambda j, p: print(f"start {j.seed}: {p}", flush=True))))
    starts_s = time.perf_counter() - t0

    # per start and regime: the grader's pass rates on the pool, the SFT model's held-out reward
    setups, jobs, eval0s = {}, [], {r.name: {} for r in regs}
    per = {r.name: {"grades": [], "tokens": {}, "z": [], "t": 0.0} for r in regs}
    methods_of = {r.name: wanted if r.name != "lowz" or args.lowz_methods == "all" else
                  [m for m in args.lowz_methods.split(",") if m in table] for r in regs}
    pools = {r.name: regimes.pool(r, world) for r in regs}
    helds = {r.name: regimes.heldout(r, world) for r in regs}
    for a in start_seeds:
        model, tok = start.load(Path(ckpts[a]))
        key = start.sft_key(wcfg, size, a)
        for reg in regs:
            t0 = time.perf_counter()
            held, labels = helds[reg.name]
            grades = grader.grade(model, tok, pools[reg.name], k=args.grader_samples,
                                  max_new_tokens=reg.max_new_tokens, cache=Path(args.cache), sft_key=key)
            pool = grader.with_pass_rates(pools[reg.name], grades)
            gs = [grades[p.id] for p in pool]
            n = reg.group_size
            per[reg.name]["z"].append(
                signal_vs_n.predicted_zero_variance(gs, n) if n <= args.grader_samples else
                next(r["belief_zero_variance"] for r in signal_vs_n.curves(gs, [n], args.grader_samples)))
            per[reg.name]["grades"] += gs
            per[reg.name]["tokens"][a] = sum(g["tokens"] for g in gs)
            e0 = eval0s[reg.name][a] = evaluate(model, tok, held, samples=reg.eval_samples,
                                                max_new_tokens=reg.max_new_tokens, groups=labels)
            ms = methods_of[reg.name]
            for s in seeds:
                for m in ms:
                    jobs.append(runner.Job(reg.name, m, s, table[m], reg.rl_settings(), reg.milestone_tokens(),
                                           reg.eval_samples, ckpts[a], tuple(pool), tuple(held), labels, start=a))
            per[reg.name]["t"] += time.perf_counter() - t0
            print(f"{reg.name} start {a}: grader {_hist([g['passes'] / g['k'] for g in gs])}; predicted "
                  f"zero-variance at N={n}: {per[reg.name]['z'][-1]:.2f}; SFT held-out {e0['reward']:.3f} "
                  f"± {e0['se']:.3f}; {len(ms) * len(seeds)} runs", flush=True)
        del model
    level = regimes.levels(world.raw_prompts)
    for reg in regs:
        held, labels = helds[reg.name]
        pool, gs = pools[reg.name], per[reg.name]["grades"]
        ms = methods_of[reg.name]
        sharing = len(seeds) * sum(uses_grades(table[m]) for m in ms)     # runs of a start that read its grades
        setups[reg.name] = {
            "regime": reg.name, "description": reg.description,
            "pool": len(pool), "pool_mix": _mix(pool, {p.id: regimes.tier_label(p, level) for p in pool}),
            "heldout": len(held), "heldout_mix": _mix(held, labels), "eval_samples": reg.eval_samples,
            "settings": (f"budget {reg.budget:,} rollout tokens, {reg.milestones} milestones; "
                         f"{reg.prompts_per_step} prompts x {reg.group_size} samples x <= {reg.max_new_tokens} "
                         f"tokens per step, lr {reg.lr:g}, {reg.mini_batches} mini-batch(es) per batch; "
                         f"{len(start_seeds)} starts x {len(seeds)} seeds"),
            "starts": start_seeds, "seeds": seeds,
            "grader_k": args.grader_samples,
            "grader_tokens": sum(per[reg.name]["tokens"].values()) / len(start_seeds),      # per start
            "grader_runs_sharing": sharing,
            "grader_hist": _hist([g["passes"] / g["k"] for g in gs]),
            "z_predicted": sum(per[reg.name]["z"]) / len(start_seeds),
            "group_size": reg.group_size, "methods": ms,
            "fig3": signal_vs_n.curves(gs, FIG3_NS, args.grader_samples),
            "regime_settings": {k: v for k, v in reg.__dict__.items()},
            "setup_s": per[reg.name]["t"], "starts_s": starts_s,
            "ours": table.get("ours")}

    def done(job, res):
        c = " ".join(f"{e['reward']:.3f}" for e in res["evals"])
        print(f"  {job.regime}/{job.method}/start {job.start}/seed {job.seed}: held-out {c}; {len(res['steps'])} steps, "
              f"{res['time_s']:.0f}s ({res['eval_time_s']:.0f}s evaluating)", flush=True)
    t_runs = time.perf_counter()
    results = runner.run_all(jobs, workers=args.jobs, threads=args.threads, done=done)
    runs_s = time.perf_counter() - t_runs

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    heads = {}
    for name, setup in setups.items():
        runs = {m: [r for r in results if r["regime"] == name and r["method"] == m] for m in setup["methods"]}
        milestones = next(j.milestones for j in jobs if j.regime == name)
        summ = summarize(runs, eval0s[name], milestones, n_boot=args.bootstrap)
        print("\n" + report.tables(summ, setup), flush=True)
        heads[name] = report.headline(summ, setup)
        plots.curves(summ, out / f"curves_{name}.png", f"{name}: held-out reward against rollout tokens")
        pts = plots.run_points({m: runs[m] for m in ("grpo", "greso", "ours", "ours+espo+zvp") if m in runs})
        plots.fig3(setup["fig3"], pts, out / f"fig3_{name}.png", f"{name}: group size N (Fig. 3)")
        (out / f"runs_{name}.json").write_text(json.dumps({"setup": setup, "eval0": eval0s[name], "summary": summ,
                                                           "runs": runs}, indent=1, default=str))
    total = time.perf_counter() - t_all
    print(f"\nplots and per-seed data in {out}/ (curves_*.png, fig3_*.png, runs_*.json); runs {runs_s:.0f}s, "
          f"whole bench {total:.0f}s")
    first = next(iter(heads))
    head = {"bench": "learning-efficiency", "regime": first, "starts": len(start_seeds), "seeds": len(seeds),
            **heads[first]}
    for name, h in heads.items():
        if name != first:
            head[name] = h
    head["time_s"] = round(total, 1)
    print(json.dumps(head))
    return 0
