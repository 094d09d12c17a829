"""Detokenization of long completions: one process (the rollout's ``completion_text`` loop) vs a
``DetokenizerPool`` of ``--workers`` processes (paper "Each Prompt Matters" §3.2.1).

Workload: ``--completions`` completions of ``--min-tokens``..``--max-tokens`` tokens in the world's
byte-level BPE tokenizer, each a window of the world's own text encoded as one stream (so windows
start and end inside words and multi-byte characters), ending in eos, some followed by pad as in a
padded batch, some cut at the length limit with no eos. Both sides get an untimed warm pass; then
``--repeats`` timed passes each, alternated, and the medians are compared. The pool's start-up
(spawning the workers, loading the tokenizer) is timed on its own and left out of the speedup.
Every text must equal the single-process text.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time

from compass.rl.rollout.detokenize import DetokenizerPool, completion_text


def world_tokenizer_and_texts(quick: bool):
    """The world's tokenizer (as the world stage trains it) and its corpus; a one-suite world with ``quick``."""
    from compass.cli.main import default_config
    from compass.config import read_yaml, validate
    from compass.lm.model_factory import build_tokenizer
    from stages.world.build import build_world
    from stages.world.config import WorldConfig

    raw = read_yaml(default_config(), "world")
    if quick:
        raw = {**raw, "suites": {"ifeval": {"n": 60, "n_eval": 0}}, "n_preference_pairs": 0, "n_planted": 0}
    cfg = validate(WorldConfig, raw)
    texts = list(build_world(cfg).texts())
    return build_tokenizer(texts, cfg.tokenizer), texts


def make_completions(tok, texts: list[str], n: int, lo: int, hi: int, seed: int = 0) -> list[list[int]]:
    """``n`` token-id lists of ``lo``..``hi`` tokens (+ eos, and pad for a quarter): windows of one stream."""
    rng = random.Random(seed)
    order = rng.sample(range(len(texts)), len(texts))
    stream: list[int] = []
    for i in order:                                       # enough text that windows rarely repeat
        stream += tok(texts[i] + "\n\n")["input_ids"]
        if len(stream) >= max(20 * hi, 50_000):
            break
    while len(stream) < hi + 1:
        stream += stream
    out = []
    for _ in range(n):
        length = rng.randint(lo, hi)
        start = rng.randrange(0, len(stream) - length)
        ids = stream[start:start + length]
        r = rng.random()
        if r < 0.75:                                      # finished; a quarter of those padded after eos
            ids = ids + [tok.eos_token_id] + [tok.pad_token_id] * (rng.randint(1, 64) if r < 0.25 else 0)
        out.append(ids)                                   # else: cut at the length limit, no eos
    return out


def _timed(fn, repeats: int) -> tuple[list, float]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times)


def _cpu_seconds(pids: list[int]) -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, of ``pids``) so far: the difference is other people's load."""
    import psutil
    busy = psutil.cpu_times()
    ours = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            ours += t.user + t.system
        except psutil.Error:
            pass
    return busy.user + busy.nice + busy.system + busy.irq + busy.softirq, ours


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench detok", description=__doc__.splitlines()[0])
    ap.add_argument("--completions", type=int, default=256)
    ap.add_argument("--min-tokens", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=8000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7, help="timed passes per side (the median is reported)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a seconds-long smoke run for tests (numbers mean nothing)")
    args = ap.parse_args(argv)
    if args.quick:
        args.completions, args.min_tokens, args.max_tokens, args.repeats = 16, 50, 400, 2

    tok, texts = world_tokenizer_and_texts(args.quick)
    comps = make_completions(tok, texts, args.completions, args.min_tokens, args.max_tokens, args.seed)
    n_tokens = sum(map(len, comps))

    def single():
        return [completion_text(tok, ids) for ids in comps]

    t0 = time.perf_counter()
    pool = DetokenizerPool(tok, args.workers)
    start_s = time.perf_counter() - t0
    with pool:
        ref, pool_out = single(), pool.decode_many(comps)        # warm passes, untimed
        pids = [os.getpid()] + [w.proc.pid for w in getattr(pool, "_workers", [])]
        busy0, ours0 = _cpu_seconds(pids)
        t_timed = time.perf_counter()
        single_times, pool_times = [], []
        for _ in range(args.repeats):                            # alternated: load on the machine hits both
            ref, s = _timed(single, 1)
            pool_out, p = _timed(lambda: pool.decode_many(comps), 1)
            single_times.append(s)
            pool_times.append(p)
            if pool_out != ref:
                break
        busy1, ours1 = _cpu_seconds(pids)
        timed_wall = time.perf_counter() - t_timed
        streamed, submit_s = _timed(lambda: [f.result() for f in [pool.submit(ids) for ids in comps]], 1)
    others = max(0.0, (busy1 - busy0) - (ours1 - ours0)) / timed_wall   # cores other processes kept busy
    single_s, pool_s = statistics.median(single_times), statistics.median(pool_times)
    identical = pool_out == ref and streamed == ref
    same = sum(a == b for a, b in zip(pool_out, ref))

    print(f"# Detokenization: {len(comps)} completions, {n_tokens:,} tokens "
          f"({args.min_tokens}-{args.max_tokens} each), world tokenizer ({len(tok)} tokens), "
          f"{args.workers} workers, median of {args.repeats}\n")
    print("| mode | wall s | Mtokens/s | speedup |\n|---|---:|---:|---:|")
    print(f"| one process (`completion_text` loop) | {single_s:.3f} | {n_tokens / single_s / 1e6:.2f} | 1.00 |")
    print(f"| pool `decode_many` ({args.workers} workers) | {pool_s:.3f} | {n_tokens / pool_s / 1e6:.2f} | "
          f"{single_s / pool_s:.2f} |")
    print(f"| pool `submit` per completion (one pass) | {submit_s:.3f} | {n_tokens / submit_s / 1e6:.2f} | "
          f"{single_s / submit_s:.2f} |")
    print(f"\npool start-up (spawn {args.workers} workers, load the tokenizer; not in the speedup): {start_s:.2f} s")
    print(f"single-process passes: {', '.join(f'{t:.3f}' for t in single_times)} s; "
          f"pool passes: {', '.join(f'{t:.3f}' for t in pool_times)} s")
    print(f"other processes' load during the timed passes: {others:.2f} of {os.cpu_count()} cores "
          f"(load average {os.getloadavg()[0]:.2f})")
    print(f"texts identical: {identical} ({same}/{len(ref)} equal in decode_many, "
          f"{sum(a == b for a, b in zip(streamed, ref))}/{len(ref)} via submit), "
          f"{sum(map(len, ref)):,} characters\n")
    print(json.dumps({"bench": "detok", "speedup": round(single_s / pool_s, 2), "identical": identical,
                      "workers": args.workers, "completions": len(comps), "tokens": n_tokens,
                      "single_s": round(single_s, 4), "pool_s": round(pool_s, 4),
                      "pool_start_s": round(start_s, 2), "submit_s": round(submit_s, 4),
                      "other_load_cores": round(others, 2), "quick": args.quick}))
    return 0 if identical else 1
