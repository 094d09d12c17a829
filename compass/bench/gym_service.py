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

from stages.gym.provisional import parse_verifier, score
from stages.gym.service import RewardService


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


def _inline(samples) -> tuple[list[float], float]:
    t0 = time.perf_counter()
    scores = [score(spec, resp, ref) for _, spec, resp, ref in samples]
    return scores, time.perf_counter() - t0


def _service(samples, workers: int) -> tuple[list[float], float, dict]:
    with RewardService(workers) as svc:
        svc.submit_spec('{"type": "math_exact"}', "1", "1").result(60)          # workers up before timing
        t0 = time.perf_counter()
        futs = [svc.submit_spec(spec, resp, ref) for _, spec, resp, ref in samples]
        scores = [f.result().score for f in futs]
        wall = time.perf_counter() - t0
        return scores, wall, svc.metrics()


BAD_INPUTS = [
    ("10 MB answer", "tool", {"response": "x" * 10_000_000, "gold_calls": []}),
    ("malformed gold JSON", "tool", {"response": "<think/>", "gold_calls": "{not json"}),
    ("unknown verifier", "no-such-verifier", {"response": "x"}),
    ("missing field", "json", {"response": "{}"}),
    ("lone surrogate", "json", {"response": "\ud800", "schema": {"type": "object"}}),
    ("hung program", "code", {"response": "import time\ntime.sleep(600)", "tests": ["assert True"],
                              "timeout_s": 600}),
]


def _bad_inputs(timeout_s: float) -> list[dict]:
    rows = []
    with RewardService(1, timeouts={"code": timeout_s}) as svc:
        for label, verifier, row in BAD_INPUTS:
            t0 = time.perf_counter()
            res = svc.submit(verifier, row).result(timeout_s * 4 + 60)
            after = svc.submit("tool", {"response": "<think>x</think>", "gold_calls": []}).result(60)
            rows.append({"case": label, "kind": res.kind, "error": (res.error or "")[:60],
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
    svc_scores, svc_s, metrics = _service(samples, args.workers)
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
    m = metrics["verifiers"]["spec"]
    print(f"\nservice latency p50 {m['p50_latency_s'] * 1e3:.1f} ms, p99 {m['p99_latency_s'] * 1e3:.1f} ms; "
          f"failures {m['failures'] or 'none'}\n")
    bad = _bad_inputs(args.timeout)
    print("| bad input | answered as | error | s | service alive after |\n|---|---|---|---|---|")
    for r in bad:
        print(f"| {r['case']} | {r['kind']} | {r['error']} | {r['seconds']:.2f} | {r['service_alive']} |")
    survived = sum(r["service_alive"] and r["kind"] in ("error", "timeout") for r in bad)
    print(json.dumps({"bench": "gym-service", "samples": n, "workers": args.workers,
                      "inline_samples_per_s": round(n / inline_s, 1), "service_samples_per_s": round(n / svc_s, 1),
                      "speedup_vs_inline": round(inline_s / svc_s, 2), "scores_identical": identical,
                      "p50_latency_ms": round(m["p50_latency_s"] * 1e3, 2),
                      "p99_latency_ms": round(m["p99_latency_s"] * 1e3, 2),
                      "bad_inputs_survived": f"{survived}/{len(bad)}"}))
    return 0 if identical and survived == len(bad) else 1
