"""Reward service benchmark: the world's samples scored inline (one process, in order) vs through the service.

Samples: for every world suite, items at each difficulty with the teacher's
(correct) response and the suite's typical wrong one, scored against their
verifier specs (code runs in the sandbox, tool calls by eq. (4)-(10), …).
The same samples go through ``RewardService`` with ``--workers`` processes.
Reported: samples/s both ways and the ratio, whether every score is identical,
per-verifier p50/p99 latency and failures from the service's metrics, and a
bad-input round (10 MB answer, malformed and unknown specs, a hung program)
that must leave the service answering.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import time

from compass.gym.score import parse_verifier, score
from compass.gym.service import RewardService


def world_samples(per_level: int, seed: int = 0) -> list[tuple[str, str, str, str]]:
    """``(suite, spec, response, reference)``: teacher and wrong responses for every suite and difficulty."""
    from stages.world.suites import all_suites
    rng = random.Random(seed)
    out = []
    for name, suite in sorted(all_suites().items()):
        for level in range(1, 6):
            for k in range(per_level):
                lang = suite.languages[k % len(suite.languages)]
                item = suite.make(rng, f"{name}-{level}-{k}", level, lang)
                out.append((name, item.verifier, item.response, item.reference))
                out.append((name, item.verifier, suite.wrong(rng, item), item.reference))
    return out


def _score_inline(samples) -> list[float]:
    return [score(spec, resp, ref) for _, spec, resp, ref in samples]


def _submit(svc: RewardService, samples) -> list:
    return [svc.submit_spec(spec, resp, ref) for _, spec, resp, ref in samples]


def _inline(samples) -> tuple[list[float], float]:
    _score_inline(samples)                                # an untimed warm pass, as the service gets
    t0 = time.perf_counter()
    scores = _score_inline(samples)
    return scores, time.perf_counter() - t0


def _service(svc: RewardService, samples) -> tuple[list[float], float, dict]:
    """One timed pass through a warm service: scores, wall seconds, latency of this pass and failures."""
    t0 = time.perf_counter()
    results = [f.result() for f in _submit(svc, samples)]
    wall = time.perf_counter() - t0
    lat = sorted(r.latency_s for r in results)            # this pass only (metrics() holds the warm one too)
    return [r.score for r in results], wall, {"p50_latency_s": lat[len(lat) // 2],
                                              "p99_latency_s": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
                                              "failures": svc.metrics()["verifiers"]["spec"]["failures"]}


def _overlap(svc: RewardService, samples, batches: int, gen_s: float) -> tuple[float, float]:
    """Wall time of ``batches`` RL steps whose generation takes ``gen_s`` on an accelerator (modelled as a
    sleep: the CPU is free meanwhile), scoring inline after each batch vs submitting each batch to the service
    as it is generated and collecting all scores at the end."""
    chunks = [samples[i::batches] for i in range(batches)]
    t0 = time.perf_counter()
    for chunk in chunks:
        time.sleep(gen_s)
        _score_inline(chunk)
    inline_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    futs = []
    for chunk in chunks:
        time.sleep(gen_s)
        futs += _submit(svc, chunk)
    [f.result() for f in futs]
    return inline_wall, time.perf_counter() - t0


BAD_INPUTS = [
    ("10 MB answer", "tool_call", {"response": "x" * 10_000_000, "gold_calls": []}),
    ("malformed gold JSON", "tool_call", {"response": "<think/>", "gold_calls": "{not json"}),
    ("unknown verifier", "no-such-verifier", {"response": "x"}),
    ("missing field", "json_schema", {"response": "{}"}),
    ("lone surrogate", "json_schema", {"response": "\ud800", "schema": {"type": "object"}}),
    ("hung program", "code", {"response": "import time\ntime.sleep(600)", "tests": ["assert True"],
                              "timeout_s": 300}),
]


def _bad_inputs(timeout_s: float) -> list[dict]:
    rows = []
    with RewardService(1, timeouts={"code": timeout_s}) as svc:
        for label, verifier, row in BAD_INPUTS:
            t0 = time.perf_counter()
            res = svc.submit(verifier, row).result(timeout_s * 4 + 60)
            after = svc.submit("tool_call", {"response": "<think>x</think>", "gold_calls": []}).result(60)
            rows.append({"case": label, "kind": res.kind, "score": res.score, "error": (res.error or "")[:60],
                         "seconds": time.perf_counter() - t0, "service_alive": after.score == 4.0})
    return rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench gym-service", description=__doc__.splitlines()[0])
    ap.add_argument("--per-level", type=int, default=6, help="items per suite and difficulty (x2 responses)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=float, default=3.0, help="service deadline for the hung-program case")
    args = ap.parse_args(argv)

    samples = world_samples(args.per_level)
    types = [parse_verifier(spec)["type"] for _, spec, _, _ in samples]
    inline_scores, inline_s = _inline(samples)
    with RewardService(args.workers) as svc:
        # one untimed pass first: every worker has started its sandbox pool and loaded langdetect's profiles
        [f.result(300) for f in _submit(svc, samples)]
        svc_scores, svc_s, metrics = _service(svc, samples)
        batches = 10
        gen_s = inline_s / batches
        inline_wall, overlap_wall = _overlap(svc, samples, batches, gen_s)
    identical = inline_scores == svc_scores
    n = len(samples)

    print(f"# Reward service: {n} world samples ({len(set(s[0] for s in samples))} suites), "
          f"{args.workers} workers\n")
    print("| mode | samples/s | wall s |\n|---|---|---|")
    print(f"| inline (one process) | {n / inline_s:,.0f} | {inline_s:.2f} |")
    print(f"| service | {n / svc_s:,.0f} | {svc_s:.2f} |")
    print(f"\nscores identical: {identical}\n")
    print("| verifier spec | samples | mean score |\n|---|---|---|")
    for t in sorted(set(types)):
        vals = [s for s, ty in zip(inline_scores, types) if ty == t]
        print(f"| {t} | {len(vals)} | {sum(vals) / len(vals):.3f} |")
    print(f"RL-step model: {batches} batches, generation {gen_s * 1e3:.0f} ms each on an accelerator (a sleep), "
          f"scoring after each batch inline vs streamed to the service:\n")
    print("| scoring | wall s | generation share |\n|---|---|---|")
    print(f"| inline after each batch | {inline_wall:.2f} | {batches * gen_s / inline_wall:.0%} |")
    print(f"| streamed to the service | {overlap_wall:.2f} | {batches * gen_s / overlap_wall:.0%} |\n")
    m = metrics
    print(f"\nservice latency p50 {m['p50_latency_s'] * 1e3:.1f} ms, p99 {m['p99_latency_s'] * 1e3:.1f} ms; "
          f"failures {m['failures'] or 'none'}\n")
    bad = _bad_inputs(args.timeout)
    print("| bad input | answered as | error | s | service alive after |\n|---|---|---|---|---|")
    for r in bad:
        print(f"| {r['case']} | {r['kind']} | {r['error']} | {r['seconds']:.2f} | {r['service_alive']} |")
    survived = sum(r["service_alive"] and r["score"] <= 0.0 for r in bad)   # scored as a failure (tool: -3)
    print(json.dumps({"bench": "gym-service", "samples": n, "workers": args.workers,
                      "inline_samples_per_s": round(n / inline_s, 1), "service_samples_per_s": round(n / svc_s, 1),
                      "speedup_vs_inline": round(inline_s / svc_s, 2), "scores_identical": identical,
                      "step_speedup_with_overlap": round(inline_wall / overlap_wall, 2),
                      "p50_latency_ms": round(m["p50_latency_s"] * 1e3, 2),
                      "p99_latency_ms": round(m["p99_latency_s"] * 1e3, 2),
                      "bad_inputs_survived": f"{survived}/{len(bad)}"}))
    return 0 if identical and survived == len(bad) else 1
