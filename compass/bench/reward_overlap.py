"""Rewards scored as samples finish (paper §3.2.2): how much reward time generation hides.

Real parts: the world's tiny model and its ``ifeval`` prompts (their rule checks, language detection most
of all, are the costliest world reward: a quarter of our RL step in ``compass bench vs-trl``), a
:class:`compass.rl.rollout.ray_pool.RayRolloutPool` of ``--workers`` actors running the ``native`` decoder, and
the gym's scoring, either in the controller or in the reward service's ``--reward-workers`` processes.

Lengths: the tiny random model almost never samples eos, so every sample would end at the token cap, all at
once, and nothing would be left to overlap. As in ``compass bench length-balance``, each prompt gets a
long-tailed mean length and each visit a budget around it (the decoder's per-prompt budgets), which is what a
reasoning policy's rollouts look like: most samples end early, a few run long.

Each step runs twice on the same prompts and seed (so the same samples), in alternating order:

- **after**: ``pool.generate`` returns every sample, then they are scored (the reward service gets them
  all at once and is waited on). Its scoring wall time is the reward time ``R`` a non-overlapped step pays;
- **streamed**: :func:`compass.rl.rollout.scored.rollout_and_score`: each sample goes to the scorer the
  moment its actor's decoder ends it, while the actors go on. Its exposed reward time ``E`` is what ran
  past the last actor's finish.

``reward_time_hidden = 1 - sum(E) / sum(R)``; the step times (rollout + reward) of both are reported too:
on a machine whose cores the actors already fill, hiding reward time behind generation also slows the
generation it hides behind, and the step-time ratio says what is left of the gain.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time


def run(args) -> dict:
    import torch

    from compass.bench.length_balance import visit_budgets, workload
    from compass.bench.vs_trl import build_setup, schedule
    from compass.gym.instructions.text import _detect_cached
    from compass.gym.score import judge
    from compass.lm.chat import chat_prefix
    from compass.rl.rollout.base import SamplingParams
    from compass.rl.rollout.ray_pool import RayRolloutPool
    from compass.rl.rollout.scored import rollout_and_score, scored

    torch.set_num_threads(1)
    model, tok, prompts, _ = build_setup(["ifeval"], args.quick, args.seed)
    plan = schedule(prompts, args.steps + 1, args.prompts, args.seed)
    rng = random.Random(args.seed)
    mu = {p.id: m for p, m in zip(prompts, workload(len(prompts), args.median, args.sigma, args.max_tokens,
                                                      args.seed))}
    services = {}
    if args.reward_workers:
        # one service per mode: the scorers cache language detection per process, and the second mode must
        # not score the first one's texts from that cache
        from compass.gym.service import RewardService
        services = {m: RewardService(args.reward_workers, default_timeout_s=60) for m in ("after", "streamed")}
    pool = RayRolloutPool("native", model, tok, workers=args.workers, threads_per_worker=1)
    rows = []
    try:
        for k, batch in enumerate(plan):
            ids = [tok(chat_prefix(tok, p.prompt), add_special_tokens=False)["input_ids"] for p in batch]
            budgets = visit_budgets([mu[p.id] for p in batch], list(range(len(batch))), args.noise,
                                    args.max_tokens, rng)
            sampling = SamplingParams(max_new_tokens=args.max_tokens, temperature=1.0, seed=k, budgets=budgets)
            got = {}
            for mode in (("after", "streamed") if k % 2 == 0 else ("streamed", "after")):
                service = services.get(mode)
                _detect_cached.cache_clear()            # in-controller scoring: no reuse across the modes
                t0 = time.perf_counter()
                if mode == "after":
                    groups = pool.generate(ids, args.group, sampling)
                    t_gen = time.perf_counter()
                    if service is not None:
                        futs = [[service.submit_spec(p.verifier, c.text, p.reference) for c in g]
                                for p, g in zip(batch, groups)]
                        rewards = [[f.result().score for f in row] for row in futs]
                    else:
                        rewards = [[scored(judge(p.verifier, c.text, p.reference))[0] for c in g]
                                   for p, g in zip(batch, groups)]
                    t_end = time.perf_counter()
                    got[mode] = {"step_s": t_end - t0, "reward_s": t_end - t_gen, "generate_s": t_gen - t0,
                                 "texts": [[c.text for c in g] for g in groups], "rewards": rewards}
                else:
                    out = rollout_and_score(pool, batch, ids, args.group, sampling, judge, service)
                    t_end = time.perf_counter()
                    got[mode] = {"step_s": t_end - t0, "reward_s": out.reward_exposed_s,
                                 "generate_s": out.schedule["makespan_s"], "tail_s": out.reward_tail_s,
                                 "texts": [[c.text for c in g] for g in out.groups],
                                 "rewards": out.rewards.tolist()}
            same = got["after"]["texts"] == got["streamed"]["texts"]
            same_r = all(abs(a - b) < 1e-6 for ra, rb in zip(got["after"]["rewards"], got["streamed"]["rewards"])
                         for a, b in zip(ra, rb))
            rows.append({"step": k, "warmup": k == 0, "same_samples": same, "same_rewards": same_r,
                         **{f"{m}_{key}": v[key] for m, v in got.items() for key in ("step_s", "reward_s",
                                                                                      "generate_s")},
                         "streamed_tail_s": got["streamed"]["tail_s"]})
    finally:
        pool.close()
        for service in services.values():
            service.close()
    return {"rows": rows}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench reward-overlap", description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2, help="rollout actors (one torch thread each)")
    ap.add_argument("--reward-workers", type=int, default=1,
                    help="reward service processes; 0: score in the controller")
    ap.add_argument("--prompts", type=int, default=32, help="prompts per step (as compass bench length-balance)")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--median", type=float, default=24.0, help="median of the prompts' mean lengths (log-normal)")
    ap.add_argument("--sigma", type=float, default=1.0, help="log-normal sigma of the prompts' mean lengths")
    ap.add_argument("--noise", type=float, default=0.25, help="log-normal sigma of a visit's length around it")
    ap.add_argument("--steps", type=int, default=6, help="timed steps (after one warm-up)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a small run for the test")
    args = ap.parse_args(argv)
    if args.quick:
        args.prompts, args.group, args.max_tokens, args.steps = 4, 2, 16, 2
    rows = run(args)["rows"]
    timed = [r for r in rows if not r["warmup"]]
    R = sum(r["after_reward_s"] for r in timed)
    E = sum(r["streamed_reward_s"] for r in timed)
    where = f"{args.reward_workers} reward service process(es)" if args.reward_workers else "the controller"
    print(f"# Reward overlap: {args.workers} Ray actors (native decoder), {args.prompts} ifeval prompts x "
          f"{args.group} samples, lengths log-normal median {args.median:g} sigma {args.sigma:g} up to "
          f"{args.max_tokens} tokens; scoring in {where}; {len(timed)} timed steps "
          f"after 1 warm-up\n")
    print("| step | after: generate s | after: reward s | after: step s | streamed: generate s | "
          "streamed: exposed reward s | streamed: step s | same samples, rewards |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['step']}{' (warm-up)' if r['warmup'] else ''} | {r['after_generate_s']:.3f} | "
              f"{r['after_reward_s']:.3f} | {r['after_step_s']:.3f} | {r['streamed_generate_s']:.3f} | "
              f"{r['streamed_reward_s']:.3f} | {r['streamed_step_s']:.3f} | "
              f"{r['same_samples']}, {r['same_rewards']} |")
    head = {"reward_time_hidden": 1.0 - E / R if R > 0 else 0.0,
            "reward_s_after": R / len(timed), "reward_s_exposed_streamed": E / len(timed),
            "step_speedup": sum(r["after_step_s"] for r in timed) / sum(r["streamed_step_s"] for r in timed),
            "generate_slowdown": (sum(r["streamed_generate_s"] for r in timed)
                                  / sum(r["after_generate_s"] for r in timed)),
            "identical": all(r["same_samples"] and r["same_rewards"] for r in rows),
            "reward_workers": args.reward_workers, "workers": args.workers, "steps": len(timed),
            "median_step_s_after": statistics.median(r["after_step_s"] for r in timed),
            "median_step_s_streamed": statistics.median(r["streamed_step_s"] for r in timed)}
    print(f"\nreward time hidden behind generation: {100 * head['reward_time_hidden']:.1f}% (target >= 95%); "
          f"step {head['step_speedup']:.2f}x faster streamed; generation {head['generate_slowdown']:.2f}x as long "
          f"while scoring ran beside it; identical samples and rewards: {head['identical']}")
    print(json.dumps(head))
    return 0
