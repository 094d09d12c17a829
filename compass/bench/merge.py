"""``compass bench merge``: does the merged model keep both parents' skills on held-out suites?

The pipeline's stages on a tiny world, each run through its stage API into a store
kept under ``--cache`` (a re-run reuses every stage run whose settings did not change):

1. the world stage (all 11 suites, no planted rows; ``--n-eval`` held-out prompts per suite);
2. the SFT rows split by home: thinking = math, code, tool (the teacher thinks: the
   Long-CoT table), domain = ecommerce, general, instruction (the domain table); a
   seeded ``--base-share`` of each is held apart as "pretraining" data;
3. regime ``warm`` (the paper's setting: both parents are fine-tuned from one pretrained
   model): the random base is SFT'd on the held-apart share of both tables (``--base-steps``),
   then each parent is fine-tuned from that warm base on its own rows (``--parent-steps``,
   ``--parent-lr``), and the merge's base is the warm base. Regime ``random`` (the tiny
   pipeline's setting): each parent is SFT'd from the random init on its own rows
   (``--random-steps``, lr 1e-3) and merged onto the random init;
4. the merge stage with its sweep (task arithmetic / TIES / DARE-TIES x Long-CoT weight x
   domain weight: by default both in {0.5, 1}, unnormalised, so task vectors can be added), its dev suite drawn from the world's RL prompts (never the eval prompts);
5. the evaluation stage (greedy) on the held-out eval prompts for the base, both parents,
   the selected merge and the dev-best merge of each method.

A home score is the mean over the home's domains of the mean verifier score (x100);
``margin`` = merged minus the parent on that parent's home suite, with a paired standard
error (same prompts); ``min_margin_to_parents`` is the smaller of the two for the headline
regime (``warm``), and the target is >= -2 points.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import random
import time
from collections import defaultdict
from pathlib import Path

import torch

from stages.merge import sweep as sw

THINKING = ("math", "code", "tool")
DOMAIN = ("ecommerce", "general", "instruction")
HOMES = {"thinking": THINKING, "domain": DOMAIN}
SUITES = ("arithmetic", "math_word", "code", "tool_use", "ifeval", "qa", "ecommerce_category",
          "ecommerce_relevance", "ecommerce_brand", "attribute_json", "title_rewrite")


def _key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _commit_table(store, kind: str, name: str, table, key: str):
    """A bench-made table as an artifact (reused when this exact one is stored)."""
    if store.exists(kind, name, key):
        return store.get(kind, name, key)
    w = store.begin(kind, name, key, producer="bench-merge", stage="bench", config_fingerprint=key,
                    code_version="bench")
    w.write_table(table)
    return w.commit()


def _world(args, store):
    from compass.lm.model_config import ModelConfig
    from stages.world import stage as world
    from stages.world.config import WorldConfig
    n = {"arithmetic": args.n_arith}
    cfg = WorldConfig(seed=args.seed, model=ModelConfig(hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2,
                                                        head_dim=32, intermediate_size=256, num_experts=8,
                                                        experts_per_token=2, expert_size=128, max_positions=512),
                      suites={s: {"n": n.get(s, args.n_suite), "n_eval": args.n_eval} for s in SUITES},
                      n_planted=0, n_preference_pairs=0, languages=["en", "id", "zh-TW", "vi", "th", "pt", "ms"],
                      tokenizer={"vocab_size": 2048, "min_frequency": 2})
    res = world.run(cfg, {}, store)
    return {slot: store.open(uri) for slot, uri in res.outputs.items()}


def _splits(args, store, raw_sft):
    """sft tables: 'pretrain' (a share of both homes' rows), 'thinking' and 'domain' (the rest)."""
    import pyarrow as pa
    t = raw_sft.read_table()
    rows = t.to_pylist()
    out = {"pretrain": [], "thinking": [], "domain": []}
    for home, domains in HOMES.items():
        idx = [i for i, r in enumerate(rows) if r["domain"] in domains]
        random.Random(f"{args.seed}:split:{home}").shuffle(idx)
        k = round(len(idx) * args.base_share)
        out["pretrain"] += idx[:k]
        out[home] += idx[k:]
    arts = {}
    for name, idx in out.items():
        table = t.take(pa.array(sorted(idx), pa.int64()))
        arts[name] = _commit_table(store, "sft_samples", f"bench_{name}",
                                   table, _key(raw_sft.version, args.base_share, args.seed, name))
    return arts


def _sft(store, base, data, name, *, steps, lr, seed):
    from stages.sft import spec as sft
    from stages.sft.config import SFTConfig
    cfg = SFTConfig(seed=seed, steps=steps, batch_size=16, lr=lr, warmup_steps=4, max_len=256)
    t0 = time.perf_counter()
    res = sft.run(cfg, {"base": base, "data": data}, store, run_name=name, output_names={"checkpoint": name})
    print(f"  sft {name}: {steps} steps, lr {lr:g}: {res.status} in {time.perf_counter() - t0:.0f}s", flush=True)
    return store.open(res.outputs["checkpoint"])


def _evaluate(store, model, suites, args) -> dict[str, float]:
    """prompt id -> score (greedy), and prompt id -> domain, from the evaluation stage."""
    from stages.evaluation import spec as evaluation
    from stages.evaluation.config import EvalConfig
    cfg = EvalConfig(seed=0, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, report_examples=0)
    t0 = time.perf_counter()
    res = evaluation.run(cfg, {"model": model, "suites": suites}, store,
                         output_names={"results": f"bench_eval_{model.name}", "report": f"bench_eval_{model.name}"})
    rows = store.open(res.outputs["results"]).read_table().to_pylist()
    print(f"  eval {model.name}: {res.status} in {time.perf_counter() - t0:.0f}s", flush=True)
    return {r["prompt_id"]: (r["suite"], r["score"]) for r in rows}


def _var(xs):
    if len(xs) < 2:
        return 0.0
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def home_stats(scores: dict, home: str, ref: dict | None = None) -> tuple[float, float]:
    """(mean over the home's domains of the mean score, its standard error), in points. With ``ref``
    (another model's scores on the same prompts): the paired difference and its standard error."""
    by_dom = defaultdict(list)
    for pid, (dom, s) in scores.items():
        if dom in HOMES[home]:
            by_dom[dom].append(s - (ref[pid][1] if ref is not None else 0.0))
    doms = sorted(by_dom)
    mean = sum(sum(v) / len(v) for v in by_dom.values()) / len(doms)
    se = math.sqrt(sum(_var(by_dom[d]) / len(by_dom[d]) for d in doms)) / len(doms)
    return 100 * mean, 100 * se


def domain_means(scores: dict) -> dict[str, float]:
    by_dom = defaultdict(list)
    for dom, s in scores.values():
        by_dom[dom].append(s)
    return {d: 100 * sum(v) / len(v) for d, v in sorted(by_dom.items())}


def _regime(name, args, store, world, splits, log) -> dict:
    from stages.merge import spec as merge
    from stages.merge.config import MergeConfig, SweepConfig
    t0 = time.perf_counter()
    print(f"\n== regime {name} ==", flush=True)
    if name == "warm":
        base = _sft(store, world["base"], splits["pretrain"], "bench_warm_base", steps=args.base_steps,
                    lr=args.base_lr, seed=args.seed)
        parents = {h: _sft(store, base, splits[h], f"bench_warm_{h}", steps=args.parent_steps, lr=args.parent_lr,
                           seed=args.seed) for h in HOMES}
    else:
        base = world["base"]
        parents = {h: _sft(store, base, splits[h], f"bench_random_{h}", steps=args.random_steps, lr=args.random_lr,
                           seed=args.seed) for h in HOMES}
    sweep = SweepConfig(methods=args.methods.split(","), thinking_weights=[float(w) for w in args.weights.split(",")],
                        domain_weights=[float(w) for w in args.domain_weights.split(",")] if args.domain_weights
                        else None, dev_per_suite=args.dev_per_suite, max_new_tokens=args.max_new_tokens,
                        batch_size=args.batch_size, thinking_domains=list(THINKING), domain_domains=list(DOMAIN))
    normalize = {"default": None, "true": True, "false": False}[args.normalize]
    cfg = MergeConfig(density=args.density, normalize=normalize, sweep=sweep)
    inputs = {"base": base, "thinking": parents["thinking"], "domain": parents["domain"], "dev": world["raw_prompts"]}
    t1 = time.perf_counter()
    res = merge.run(cfg, inputs, store, run_name=f"bench_merge_{name}",
                    output_names={"checkpoint": f"bench_{name}_merged", "sweep": f"bench_{name}_sweep"})
    merged = store.open(res.outputs["checkpoint"])
    table = store.open(res.outputs["sweep"]).read_table().to_pylist()
    print(f"  merge sweep ({merged.manifest.extra['candidates']} candidates): {res.status} in "
          f"{time.perf_counter() - t1:.0f}s; kept {merged.manifest.extra['selected']}", flush=True)
    # the dev-best candidate of each method, by the stage's own rule, merged alone for held-out evaluation
    models = {"base": base, **parents, "merged": merged}
    _, scored, chosen = sw.from_table(table)
    best_of = sw.best_per_method(scored)          # method -> index in scored
    method_models = {}
    for m, i in best_of.items():
        if i == chosen:
            method_models[m] = merged
            continue
        c = scored[i][0]
        one = MergeConfig(method=m, thinking_weight=c.thinking_weight, domain_weight=c.domain_weight,
                          density=c.density or args.density, normalize=normalize)
        rr = merge.run(one, {k: v for k, v in inputs.items() if k != "dev"}, store, run_name=f"bench_{name}_{m}",
                       output_names={"checkpoint": f"bench_{name}_{m}", "sweep": f"bench_{name}_{m}_sweep"})
        method_models[m] = store.open(rr.outputs["checkpoint"])
    scores = {k: _evaluate(store, a, world["eval_prompts"], args) for k, a in models.items()}
    for m, a in method_models.items():
        if a is not merged:
            scores[f"best {m}"] = _evaluate(store, a, world["eval_prompts"], args)
    home = {k: {h: home_stats(s, h) for h in HOMES} for k, s in scores.items()}
    margins = {h: home_stats(scores["merged"], h, ref=scores[h]) for h in HOMES}
    method_margins = {m: {h: home_stats(scores["merged" if a is merged else f"best {m}"], h, ref=scores[h])
                          for h in HOMES} for m, a in method_models.items()}
    return {"regime": name, "selected": merged.manifest.extra["selected"], "sweep": table, "home": home,
            "domains": {k: domain_means(s) for k, s in scores.items()}, "margins": margins,
            "method_best": {m: scored[i][0].name for m, i in best_of.items()}, "method_margins": method_margins,
            "min_margin": min(margins[h][0] for h in HOMES),
            "min_margin_se": margins[min(HOMES, key=lambda h: margins[h][0])][1],
            "eval_prompts": len(scores["base"]), "dev_prompts": merged.manifest.extra["dev_prompts"],
            "wall_s": time.perf_counter() - t0}


def _print_regime(r: dict) -> None:
    print(f"\nregime {r['regime']}: held-out eval ({r['eval_prompts']} prompts), greedy; "
          "mean verifier score x100 +- standard error")
    head = f"{'model':<22} {'thinking home':>15} {'domain home':>15}   per domain"
    print(head)
    print("-" * (len(head) + 40))
    for k, hs in r["home"].items():
        print(f"{k:<22} " + " ".join(f"{hs[h][0]:>8.1f} +-{hs[h][1]:>4.1f}" for h in HOMES) + "   " +
              ", ".join(f"{d} {v:.1f}" for d, v in r["domains"][k].items()))
    gains = {h: r["home"][h][h][0] - r["home"]["base"][h][0] for h in HOMES}
    print("\neach parent's gain over the base on its own home: " +
          ", ".join(f"{h} {g:+.1f}" for h, g in gains.items()) + " points (what a merge can keep)")
    print(f"selected merge (on dev): {r['selected']}")
    for h in HOMES:
        m, se = r["margins"][h]
        print(f"  margin to the {h} parent on its home suite: {m:+.1f} +- {se:.1f} points (paired)")
    print(f"  min_margin_to_parents: {r['min_margin']:+.1f} points "
          f"({'meets' if r['min_margin'] >= -2 else 'misses'} the >= -2 target)")
    print("\ndev-best merge of each method, held-out margins (merged - parent on the parent's home):")
    for m, mm in r["method_margins"].items():
        print(f"  {m:<16} {r['method_best'][m]:<26} " +
              "  ".join(f"{h} {mm[h][0]:+6.1f} +-{mm[h][1]:.1f}" for h in HOMES))
    print("\nsweep on dev (x100): candidate, thinking home, domain home, mean, min margin to a parent")
    parents, scored, chosen = sw.from_table(r["sweep"])
    lines = [(f"{h} (parent)", parents[h], "", False) for h in HOMES]
    lines += [(c.name, res, f"{100 * res['margins']['min']:+7.1f}", i == chosen) for i, (c, res) in enumerate(scored)]
    for cand, res, mm, selected in lines:
        hs = res["home"]
        print(f"  {cand:<26} {100 * hs['thinking']:>6.1f} {100 * hs['domain']:>6.1f} "
              f"{100 * hs['mean']:>6.1f} {mm:>7} {'*' if selected else ''}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench merge", description=__doc__.splitlines()[0])
    ap.add_argument("--regimes", default="warm", help="comma list of warm, random (headline: warm)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-arith", type=int, default=2000, help="arithmetic items (half SFT rows, half RL prompts)")
    ap.add_argument("--n-suite", type=int, default=400, help="items of every other suite")
    ap.add_argument("--n-eval", type=int, default=60, help="held-out eval prompts per suite")
    ap.add_argument("--base-share", type=float, default=0.3,
                    help="share of each home's SFT rows held apart to warm the base (the parents never see them)")
    ap.add_argument("--base-steps", type=int, default=1000)
    ap.add_argument("--base-lr", type=float, default=1e-3)
    ap.add_argument("--parent-steps", type=int, default=500)
    ap.add_argument("--parent-lr", type=float, default=1e-4)
    ap.add_argument("--random-steps", type=int, default=800, help="random regime: parent SFT steps from the random init")
    ap.add_argument("--random-lr", type=float, default=1e-3)
    ap.add_argument("--methods", default="task_arithmetic,ties,dare_ties")
    ap.add_argument("--weights", default="0.5,1.0", help="Long-CoT weights swept")
    ap.add_argument("--domain-weights", default="0.5,1.0",
                    help="domain weights swept with every Long-CoT weight (need not sum to 1); empty: 1 - w")
    ap.add_argument("--normalize", choices=("default", "true", "false"), default="false",
                    help="merge.normalize for every candidate (default: mergekit's, ties: yes, ta/dare: no)")
    ap.add_argument("--density", type=float, default=0.7)
    ap.add_argument("--dev-per-suite", type=int, default=30, help="dev prompts per task for the sweep's selection (12 was too noisy to rank candidates 1-2 points apart)")
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "compass-bench" / "merge-store"),
                    help="artifact store the stage runs go to (reused across runs)")
    ap.add_argument("--out", default="bench_out/merge")
    ap.add_argument("--quick", action="store_true", help="a smoke run (numbers mean nothing)")
    args = ap.parse_args(argv)
    if args.quick:
        args.n_arith, args.n_suite, args.n_eval, args.base_steps, args.parent_steps = 60, 30, 4, 4, 4
        args.random_steps, args.weights, args.dev_per_suite, args.max_new_tokens = 4, "0.5", 2, 8
        args.domain_weights = "0.5" if args.domain_weights else ""
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    log = logging.getLogger("compass.bench.merge")
    from compass.store.store import ArtifactStore
    t0 = time.perf_counter()
    store = ArtifactStore(args.cache)
    world = _world(args, store)
    splits = _splits(args, store, world["raw_sft"])
    print(f"world: {world['raw_sft'].manifest.rows} SFT rows -> pretrain {splits['pretrain'].manifest.rows}, "
          f"thinking {splits['thinking'].manifest.rows}, domain {splits['domain'].manifest.rows}; "
          f"{world['raw_prompts'].manifest.rows} RL prompts (dev drawn from these), "
          f"{world['eval_prompts'].manifest.rows} held-out eval prompts; store {args.cache}", flush=True)
    results = {r: _regime(r, args, store, world, splits, log) for r in args.regimes.split(",")}
    for r in results.values():
        _print_regime(r)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    head = results.get("warm") or next(iter(results.values()))
    wall = time.perf_counter() - t0
    print(f"\nwall time {wall:.0f}s; details: {out / 'results.json'}")

    def brief(r):
        return {"selected": r["selected"], "min_margin_to_parents": round(r["min_margin"], 2),
                "min_margin_se": round(r["min_margin_se"], 2),
                "parent_gain_over_base": {h: round(r["home"][h][h][0] - r["home"]["base"][h][0], 2) for h in HOMES},
                "margins": {h: round(r["margins"][h][0], 2) for h in HOMES},
                "home_scores": {k: {h: round(v[h][0], 2) for h in HOMES} for k, v in r["home"].items()},
                "method_margins": {m: {h: round(v[h][0], 2) for h in HOMES} for m, v in r["method_margins"].items()}}
    print(json.dumps({"bench": "merge", "regime": head["regime"], "min_margin_to_parents": round(head["min_margin"], 2),
                      "min_margin_se": round(head["min_margin_se"], 2), "target_met": head["min_margin"] >= -2,
                      "selected": head["selected"], "eval_prompts": head["eval_prompts"],
                      "dev_prompts": head["dev_prompts"], "regimes": {k: brief(r) for k, r in results.items()},
                      "threads": args.threads, "wall_s": round(wall)}))
    return 0
