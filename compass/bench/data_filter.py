"""The data_filter stage at scale: samples per minute and peak memory, against a peer baseline.

Writes a synthetic sft_samples table (default 1,000,000 rows of 50-150 words, half of them
Long-CoT, in row groups) with planted exact duplicates (2%), near-duplicates (2%: sentences
reordered or 5% of words substituted) and eval leaks (0.05%), plus 1% as many RL prompts and
2,000 eval prompts; then runs the real stage on it in a child process (streaming) and reads
that process's peak RSS. Side by side, on a subset (``--baseline-rows``), near-dedup alone:
this stage's MinHash + verified LSH index against the plain datasketch recipe (a ``MinHash``
object per document, ``update_batch`` over word 3-grams, an in-memory ``MinHashLSH``), each in
its own child process. Headline: ``samples_per_min`` (whole stage) and ``peak_rss_gib``.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from compass.bench.dedup_quality import FRAMES, NOUNS, Synth

SFT_SCHEMA = pa.schema([(c, pa.string()) for c in ("id", "domain", "task", "language", "prompt", "response")])
POOL = 200_000            # distinct sentences that training rows are assembled from
TRAIN_FRAMES, EVAL_FRAMES = FRAMES[:30], FRAMES[30:]   # eval text is written differently, as in real life


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20   # KiB on Linux


def _current_rss_gib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


# -- the synthetic input ------------------------------------------------------------------
class Generator:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.np = np.random.default_rng(seed)
        synth = Synth(seed)
        self.pool = [synth.render([synth._fill(self.rng.choice(TRAIN_FRAMES))]) for _ in range(POOL)]
        self.synth = synth

    def text(self, lo: int, hi: int) -> str:
        return " ".join(self.pool[i] for i in self.np.integers(0, POOL, self.rng.randint(lo, hi)))

    def eval_prompts(self, n: int) -> list[str]:
        s = self.synth
        return [s.render([s._fill(self.rng.choice(EVAL_FRAMES)) for _ in range(self.rng.randint(2, 4))])
                for _ in range(n)]

    def near_copy(self, row: dict) -> dict:
        """The prompt's sentences reordered, or 5% of the response's words substituted (tags kept)."""
        if self.rng.random() < 0.5:
            parts = row["prompt"].split(". ")
            self.rng.shuffle(parts)
            return {**row, "prompt": ". ".join(parts)}
        words = row["response"].split()
        free = [j for j, w in enumerate(words) if "<" not in w]
        for j in self.rng.sample(free, max(1, len(words) // 20)):
            words[j] = self.rng.choice(NOUNS)
        return {**row, "response": " ".join(words)}


def make_inputs(store, rows: int, seed: int = 0, subset: int = 0, chunk: int = 65_536,
                leak_share: float = 0.0005) -> tuple[dict, dict]:
    """Commit the three input artifacts; return them and what was planted (``copies_in_subset``: exact
    and near copies among the first ``subset`` rows; ``copy_rows``: the row index of every copy)."""
    from artifacts_schema.tables import TABLE_SCHEMAS
    from compass.bench.dedup_quality import commit
    g = Generator(seed)
    rng = g.rng
    evals = g.eval_prompts(2000)
    eval_tbl = pa.Table.from_pylist([{"id": f"eval-{i}", "domain": "bench", "task": f"suite{i % 4}", "language": "en",
                                      "prompt": p, "reference": "A", "verifier": '{"type": "mcq"}',
                                      "difficulty": None, "pass_rate": None} for i, p in enumerate(evals)],
                                    schema=TABLE_SCHEMAS["prompts"])
    planted = {"duplicate": 0, "near_duplicate": 0, "contaminated": 0, "copies_in_subset": 0}
    copy_rows: list[int] = []

    def rows_of(start: int, n: int, recent: list) -> list[dict]:
        out = []
        for i in range(start, start + n):
            u = rng.random()
            if u < 0.02 and recent:
                src = rng.choice(recent)
                row, kind = dict(src), "duplicate"
            elif u < 0.04 and recent:
                src = rng.choice(recent)
                row, kind = g.near_copy(src), "near_duplicate"
            else:
                think = rng.random() < 0.5
                body = g.text(3, 6)
                response = f"<think>{body}</think>{g.text(1, 2)}" if think else body
                row, kind = {"domain": "math" if think else "ecommerce", "task": "bench", "language": "en",
                             "prompt": g.text(2, 4), "response": response}, None
                if u > 1 - leak_share:
                    row["prompt"] = f"{row['prompt']} {rng.choice(evals)}"
                    kind = "contaminated"
            if kind:
                planted[kind] += 1
                planted["copies_in_subset"] += i < subset and kind != "contaminated"
                if kind != "contaminated":
                    copy_rows.append(i)
            row["id"] = f"s{i}"
            out.append(row)
            if kind is None and len(recent) < 50_000:
                recent.append(row)
            elif kind is None:
                recent[rng.randrange(len(recent))] = row
        return out

    w = store.begin("sft_samples", "bench_sft", f"rows{rows}-seed{seed}", producer="bench", stage="bench",
                    config_fingerprint="bench", code_version="bench")
    recent: list[dict] = []
    with w.table_writer() as write:
        for start in range(0, rows, chunk):
            write(pa.Table.from_pylist(rows_of(start, min(chunk, rows - start), recent), schema=SFT_SCHEMA))
    sft = w.commit()
    n_prompts = max(10, rows // 100)
    prompt_rows = [{"id": f"p{i}", "domain": "math", "task": "bench", "language": "en", "prompt": g.text(2, 5),
                    "reference": str(rng.randint(1, 999)), "verifier": '{"type": "math_exact"}', "difficulty": None,
                    "pass_rate": None} for i in range(n_prompts)]
    prompts = commit(store, "prompts", "bench_prompts", pa.Table.from_pylist(prompt_rows,
                                                                               schema=TABLE_SCHEMAS["prompts"]))
    planted["copy_rows"] = copy_rows
    return {"sft": sft, "prompts": prompts, "eval": commit(store, "prompts", "bench_eval", eval_tbl)}, planted


# -- what the child processes do -----------------------------------------------------------
class TreeRss:
    """Peak RSS of this process and all its descendants (Ray's and datatrove's worker processes),
    sampled every 0.1 s on a thread."""

    def __init__(self):
        import threading
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        import psutil
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:   # exited meanwhile
                    pass
            self.peak = max(self.peak, total)
            self._stop.wait(0.1)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak / 2**30


def _child_stage(store_dir: str, uris: dict, config: str = "{}") -> dict:
    import logging

    from compass.store.store import ArtifactStore
    from stages.data_filter import stage as data_filter
    from stages.data_filter.config import DataFilterConfig
    stats = {}

    class Grab(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            if msg.startswith("screen stats: "):
                stats.update(json.loads(msg[len("screen stats: "):]))
    logging.getLogger("compass.data_filter").addHandler(Grab())
    logging.getLogger("compass.data_filter").setLevel(logging.INFO)
    store = ArtifactStore(store_dir)
    inputs = {slot: store.open(uri) for slot, uri in uris.items()}
    rss = TreeRss()
    t0 = time.perf_counter()
    res = data_filter.run(DataFilterConfig(**json.loads(config)), inputs, store)
    wall = time.perf_counter() - t0
    tree = rss.stop()
    q = store.open(res.outputs["quarantine"])
    qt = q.read_table().select(["slot", "row_index", "reason"]).to_pylist()
    removed = [r["row_index"] for r in qt if r["slot"] == "sft" and r["reason"] in ("duplicate", "near_duplicate")]
    return {"wall_s": wall, "peak_rss_gib": _rss_gib(), "tree_rss_gib": tree, "extra": q.manifest.extra,
            "screen": stats, "outputs": res.outputs, "removed": removed}


def _subset_texts(path: str, n: int) -> list[str]:
    out = []
    for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536, columns=["prompt", "response"]):
        p, r = batch.column(0).to_pylist(), batch.column(1).to_pylist()
        out.extend(f"{a}\n{b}" for a, b in zip(p, r))
        if len(out) >= n:
            break
    return out[:n]


def _child_ours(path: str, n: int) -> dict:
    from stages.data_filter.config import DataFilterConfig
    from compass.dedup.near_dup import NearDupIndex, shingles, signatures
    from compass.dedup.text import normalize, tokens_of
    cfg = DataFilterConfig()
    texts = _subset_texts(path, n)
    base = _current_rss_gib()
    t0 = time.perf_counter()
    index, found, removed = NearDupIndex(cfg.near_dup_threshold, cfg.minhash_num_perm, cfg.minhash_bands), 0, []
    for start in range(0, len(texts), cfg.batch_rows):
        docs = [shingles(tokens_of(normalize(t)), cfg.shingle_size) for t in texts[start:start + cfg.batch_rows]]
        index.prepare(signatures(docs, cfg.minhash_num_perm))
        for j in range(len(docs)):
            if index.match(j) is None:
                index.keep(j, start + j)
            else:
                found += 1
                removed.append(start + j)
        index.commit()
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "found": found, "peak_rss_gib": _rss_gib(), "growth_gib": _rss_gib() - base,
            "removed": removed}


def _child_baseline(path: str, n: int) -> dict:
    from datasketch import MinHash, MinHashLSH

    from stages.data_filter.config import DataFilterConfig
    cfg = DataFilterConfig()
    texts = _subset_texts(path, n)
    base = _current_rss_gib()
    t0 = time.perf_counter()
    lsh, found = MinHashLSH(threshold=cfg.near_dup_threshold, num_perm=cfg.minhash_num_perm), 0
    for i, text in enumerate(texts):
        words = text.lower().split()
        m = MinHash(num_perm=cfg.minhash_num_perm)
        m.update_batch([" ".join(words[k:k + 3]).encode() for k in range(len(words) - 2)])
        if lsh.query(m):
            found += 1
        else:
            lsh.insert(i, m)
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "found": found, "peak_rss_gib": _rss_gib(), "growth_gib": _rss_gib() - base}


def _spawn(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "compass.bench.data_filter", "--child", *args],
                          capture_output=True, text=True, env={**os.environ, "COMPASS_PROGRESS": "0"})
    if proc.returncode != 0:
        raise SystemExit(f"child {args[0]} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _recall(removed: list[int], copies: set[int]) -> tuple[float, int]:
    """(share of the planted copies removed, rows removed that are not planted copies)."""
    got = set(removed)
    return (len(got & copies) / len(copies) if copies else 1.0), len(got - copies)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench data-filter")
    ap.add_argument("--rows", type=int, default=1_000_000, help="SFT rows to generate and filter")
    ap.add_argument("--baseline-rows", type=int, default=100_000, help="subset for the near-dedup comparison")
    ap.add_argument("--ray-workers", type=int, default=0,
                    help="also run the stage on Ray Data with N tasks (local Ray unless $RAY_ADDRESS), check its "
                         "output equals the streaming stage's, and run datatrove's MinHash dedup with N workers "
                         "on the same rows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one, removed after)")
    args = ap.parse_args(argv)
    from compass.store.store import ArtifactStore
    from compass.store.layout import TABLE_FILE
    ray_out = dt = None
    if args.dir is not None:
        os.makedirs(args.dir, exist_ok=True)     # a folder the user names is made, not a traceback
    with tempfile.TemporaryDirectory(prefix="compass-bench-df-", dir=args.dir) as tmp:
        store = ArtifactStore(f"{tmp}/store")
        t0 = time.perf_counter()
        m = min(args.baseline_rows, args.rows)
        inputs, planted = make_inputs(store, args.rows, args.seed, subset=m)
        copies = set(planted.pop("copy_rows"))
        gen_s = time.perf_counter() - t0
        uris = {slot: a.uri for slot, a in inputs.items()}
        stage = _spawn("stage", f"{tmp}/store", json.dumps(uris))
        path = str(inputs["sft"].local_path(TABLE_FILE))
        size_mib = os.path.getsize(path) / 2**20
        n_sft = inputs["sft"].manifest.rows
        if args.ray_workers:
            ray_out = _spawn("stage", f"{tmp}/store", json.dumps(uris), json.dumps({"ray_workers": args.ray_workers}))
            for slot in ("sft_longcot", "sft_domain", "rl_prompts", "quarantine"):
                a, b = store.open(stage["outputs"][slot]).read_table(), store.open(ray_out["outputs"][slot]).read_table()
                if not a.equals(b):
                    raise SystemExit(f"Ray Data output differs from the streaming stage's in {slot}")
            dt = _spawn("datatrove", path, str(n_sft), f"{tmp}/datatrove", str(args.ray_workers))
            ours_all = _spawn("ours", path, str(n_sft))
        ours = _spawn("ours", path, str(m))
        base = _spawn("baseline", path, str(m))

    ex, sc = stage["extra"], stage["screen"]
    n_in = ex["rows_in"]["sft"] + ex["rows_in"]["prompts"]
    per_min = n_in / stage["wall_s"] * 60
    dd_s = sum(sc[s]["seconds"].get(k, 0) for s in ("sft", "prompts") for k in ("tokens", "decontam", "minhash", "lsh"))
    print(f"input: {ex['rows_in']['sft']:,} SFT rows + {ex['rows_in']['prompts']:,} RL prompts "
          f"({size_mib:.0f} MiB of Parquet), generated in {gen_s:.0f}s; "
          f"planted {planted}")
    print(f"{'stage phase':<22} {'seconds':>9}")
    for k in sorted(sc["sft"]["seconds"]):
        print(f"{k:<22} {sc['sft']['seconds'][k] + sc['prompts']['seconds'].get(k, 0):>9.1f}")
    print(f"{'whole stage (wall)':<22} {stage['wall_s']:>9.1f}")
    print(f"quarantined: sft {ex['quarantined']['sft']}, prompts {ex['quarantined']['prompts']}; "
          f"kept {ex['kept']}; decontamination hits {ex['decontamination']['hits']}")
    print(f"near-dup index: {sc['sft'].get('near_dup_index')}")
    print()
    print(f"near-dedup only, first {m:,} rows     {'this stage':>12} {'datasketch':>12} {'ratio':>8}")
    print(f"{'samples per minute':<36} {m / ours['wall_s'] * 60:>12,.0f} {m / base['wall_s'] * 60:>12,.0f} "
          f"{base['wall_s'] / ours['wall_s']:>7.1f}x")
    print(f"{'peak RSS GiB':<36} {ours['peak_rss_gib']:>12.2f} {base['peak_rss_gib']:>12.2f} "
          f"{base['peak_rss_gib'] / ours['peak_rss_gib']:>7.1f}x")
    print(f"{'RSS growth while indexing GiB':<36} {ours['growth_gib']:>12.2f} {base['growth_gib']:>12.2f} "
          f"{base['growth_gib'] / max(ours['growth_gib'], 1e-3):>7.1f}x")
    print(f"{'copies found (planted ' + format(planted['copies_in_subset'], ',') + ')':<36} {ours['found']:>12,} "
          f"{base['found']:>12,}")
    head = {"bench": "data-filter", "rows": n_in, "samples_per_min": round(per_min),
            "dedup_decontam_samples_per_min": round(n_in / dd_s * 60) if dd_s else None,
            "stage_wall_s": round(stage["wall_s"], 1), "peak_rss_gib": round(stage["peak_rss_gib"], 3),
            "baseline_rows": m, "speedup_vs_datasketch": round(base["wall_s"] / ours["wall_s"], 2),
            "memory_ratio_vs_datasketch": round(base["growth_gib"] / max(ours["growth_gib"], 1e-3), 2),
            "planted": planted, "quarantined_sft": ex["quarantined"]["sft"]}
    if ray_out is not None:
        head.update(_print_peers(args.ray_workers, n_in, n_sft, copies, stage, ray_out, ours_all, dt))
    print(json.dumps(head))
    return 0


def _print_peers(workers: int, n_in: int, n_sft: int, copies: set[int], stage: dict, ray_out: dict,
                 ours_all: dict, dt: dict) -> dict:
    """The Ray Data and datatrove table; returns the headline figures it adds."""
    dt_s = sum(dt["seconds"].values())
    rows = [  # name, rows processed, wall s, peak RSS (process tree) GiB, removed rows
        ("data_filter stage, streaming (1 process)", n_in, stage["wall_s"], stage["tree_rss_gib"], stage["removed"]),
        (f"data_filter stage, Ray Data ({workers} tasks)", n_in, ray_out["wall_s"], ray_out["tree_rss_gib"],
         ray_out["removed"]),
        ("our near-dedup only (1 process)", n_sft, ours_all["wall_s"], ours_all["peak_rss_gib"], ours_all["removed"]),
        (f"datatrove MinHash dedup ({workers} workers)", n_sft, dt_s, dt["tree_rss_gib"], dt["removed"]),
    ]
    print()
    print(f"identical output, streaming vs Ray Data: yes (sft_longcot, sft_domain, rl_prompts, quarantine); "
          f"{len(copies):,} planted copies among {n_sft:,} SFT rows")
    print(f"{'contender':<44} {'samples/min':>12} {'peak RSS GiB':>13} {'recall':>8} {'false pos':>10}")
    out = {}
    for name, n, wall, rss, removed in rows:
        rec, fp = _recall(removed, copies)
        print(f"{name:<44} {n / wall * 60:>12,.0f} {rss:>13.2f} {rec:>8.4f} {fp:>10,}")
        out[name] = (n / wall * 60, rec, fp, rss)
    print(f"datatrove steps (s): " + ", ".join(f"{k} {v:.1f}" for k, v in dt["seconds"].items()))
    (s_pm, s_rec, s_fp, s_rss), (r_pm, _, _, r_rss), (o_pm, o_rec, o_fp, _), (d_pm, d_rec, d_fp, d_rss) = out.values()
    print(f"ratios: stage/datatrove throughput {s_pm / d_pm:.2f}x, dedup-only/datatrove {o_pm / d_pm:.2f}x, "
          f"Ray/streaming {r_pm / s_pm:.2f}x")
    return {"ray_workers": workers, "ray_identical": True, "ray_samples_per_min": round(r_pm),
            "ray_tree_rss_gib": round(r_rss, 3), "stage_tree_rss_gib": round(s_rss, 3),
            "stage_recall": round(s_rec, 4), "stage_false_pos": s_fp,
            "dedup_only_samples_per_min": round(o_pm), "dedup_only_recall": round(o_rec, 4), "dedup_only_false_pos": o_fp,
            "datatrove_samples_per_min": round(d_pm), "datatrove_tree_rss_gib": round(d_rss, 3),
            "datatrove_recall": round(d_rec, 4), "datatrove_false_pos": d_fp,
            "stage_vs_datatrove_throughput": round(s_pm / d_pm, 2),
            "dedup_only_vs_datatrove_throughput": round(o_pm / d_pm, 2)}


def _child_datatrove(path: str, rows: int, workdir: str, workers: int) -> dict:
    from compass.bench import datatrove_dedup
    rss = TreeRss()
    out = datatrove_dedup.run(path, rows, workdir, workers)
    return {**out, "tree_rss_gib": rss.stop(), "peak_rss_gib": _rss_gib()}


def _child_main(argv: list[str]) -> None:
    kind = argv[0]
    if kind == "stage":
        out = _child_stage(argv[1], json.loads(argv[2]), *argv[3:4])
    elif kind == "ours":
        out = _child_ours(argv[1], int(argv[2]))
    elif kind == "datatrove":
        out = _child_datatrove(argv[1], int(argv[2]), argv[3], int(argv[4]))
    else:
        out = _child_baseline(argv[1], int(argv[2]))
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child_main(sys.argv[2:])
    else:
        sys.exit(main(sys.argv[1:]))
