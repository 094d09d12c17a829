"""``compass bench recipe``: does the default pipeline teach? One fresh ``compass run`` per seed.

Each seed is a fresh process on a fresh store (Prefect ephemeral mode included), as a user types it,
with every stage's ``seed`` set to the seed. From the evaluation report (every checkpoint × suite) and
the RL phases' metrics it prints the checkpoint × suite table and one JSON line:

- ``first_run_s``, ``peak_rss_gib`` (the largest process of the run);
- ``sft_longcot_home_gain``, ``sft_domain_home_gain``: each SFT model's mean accuracy on its home suites
  (the merge sweep's ``thinking_domains`` / ``domain_domains``) minus the base model's;
- ``merge_min_margin``: merged minus each parent on that parent's home suites, the worse of the two;
- ``reasoning_rl_gain``: phase 1 minus merged on the reasoning suites (the thinking domains);
- ``domain_rl_gain``: final minus phase 1 on the domain suites; ``reasoning_forgetting``: phase 1 minus
  final on the reasoning suites;
- ``rl_zero_variance_token_share``: rollout tokens in zero-variance groups ÷ all RL rollout tokens, both
  phases (from each phase's ``metrics.jsonl``).

Fractions (0.10 = 10 points); with ``--seeds K`` each figure is the mean, with ``_std`` beside it.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from compass.rl.run_summary import zero_variance_tokens as run_zero_variance_tokens

CKPTS = ("base", "sft_longcot", "sft_domain", "merged", "phase1", "model")
FIGURES = ("sft_longcot_home_gain", "sft_domain_home_gain", "merge_min_margin", "reasoning_rl_gain",
           "domain_rl_gain", "reasoning_forgetting", "rl_zero_variance_token_share")


def _mean(acc: dict[str, float], suites) -> float | None:
    vals = [acc[s] for s in suites if s in acc]
    return sum(vals) / len(vals) if vals else None


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def figures(checkpoints: dict[str, dict], thinking: list[str], domain: list[str], zv_tokens: int,
            tokens: int) -> dict:
    """The headline figures from the evaluation summary's ``checkpoints`` (slot -> {"accuracy": {suite: x}})."""
    acc = {slot: checkpoints.get(slot, {}).get("accuracy", {}) for slot in CKPTS}
    m = lambda slot, suites: _mean(acc[slot], suites)          # noqa: E731
    margins = [_diff(m("merged", thinking), m("sft_longcot", thinking)),
               _diff(m("merged", domain), m("sft_domain", domain))]
    margins = [x for x in margins if x is not None]
    return {
        "sft_longcot_home_gain": _diff(m("sft_longcot", thinking), m("base", thinking)),
        "sft_domain_home_gain": _diff(m("sft_domain", domain), m("base", domain)),
        "merge_min_margin": min(margins) if margins else None,
        "reasoning_rl_gain": _diff(m("phase1", thinking), m("merged", thinking)),
        "domain_rl_gain": _diff(m("model", domain), m("phase1", domain)),
        "reasoning_forgetting": _diff(m("phase1", thinking), m("model", thinking)),
        "rl_zero_variance_token_share": zv_tokens / tokens if tokens else None,
    }


def zero_variance_tokens(metrics_files: list[Path]) -> tuple[int, int]:
    """(rollout tokens in zero-variance groups, all rollout tokens) over the metrics rows of the files."""
    rows = [json.loads(line) for f in metrics_files for line in f.read_text().splitlines()]
    zv, total = run_zero_variance_tokens(rows)
    return round(zv), round(total)


def _seeded_config(config: Path, seed: int, out: Path) -> Path:
    from compass.dag.pipeline_yaml import NO_BASE, load_pipeline_dict
    cfg, _ = load_pipeline_dict(config)    # a partial file built on its base, written whole
    cfg["base"] = NO_BASE
    for section in cfg.values():
        if isinstance(section, dict) and "seed" in section:
            section["seed"] = seed
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out


def run_once(config: Path, seed: int, tmp: Path) -> dict:
    """One fresh pipeline run: wall time, the evaluation's checkpoints and the RL metrics files."""
    from compass.store.store import ArtifactStore
    cfg_path = _seeded_config(config, seed, tmp / f"seed{seed}.yaml")
    store = tmp / f"store{seed}"
    env = {**os.environ, "PREFECT_HOME": str(tmp / f"prefect{seed}"), "COMPASS_CACHE": str(tmp / f"cache{seed}"),
           "COMPASS_STATE_DIR": str(tmp / f"state{seed}"), "COMPASS_PROGRESS": "0"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "compass.cli.main", "run", "--config", str(cfg_path),
                           "--store", str(store), "--json"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"compass run (seed {seed}) failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    st = ArtifactStore(str(store))
    summary = json.loads(st.get("report", "eval_report").read_bytes("summary.json"))
    metrics = [st.get("checkpoint", name).local_dir() / "metrics.jsonl" for name in ("ckpt_r1", "ckpt_final")]
    pipe = yaml.safe_load(cfg_path.read_text())
    sweep = pipe.get("merge", {}).get("sweep", {})          # the merge sweep names each parent's home domains
    return {"wall_s": wall, "checkpoints": summary.get("checkpoints", {}),
            "thinking": sweep.get("thinking_domains", ["math", "code", "tool"]),
            "domain": sweep.get("domain_domains", ["ecommerce", "general", "instruction"]),
            "zv": zero_variance_tokens([m for m in metrics if m.exists()])}


def _fmt(x) -> str:
    return "—" if x is None else f"{x:+.3f}"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench recipe", description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=None, help="pipeline YAML (default: configs/tiny.yaml)")
    ap.add_argument("--seeds", type=int, default=1, help="fresh runs, seeds 0 .. K-1")
    ap.add_argument("--keep", default=None, metavar="DIR",
                    help="keep each seed's store (reports, plots, checkpoints) under DIR/store<seed>; DIR must "
                         "not exist (default: a temporary folder, removed)")
    args = ap.parse_args(argv)
    if args.keep and Path(args.keep).exists():
        ap.error(f"--keep {args.keep}: already exists (each run needs fresh stores)")
    from compass.cli.main import default_config
    config = Path(os.path.abspath(args.config or default_config()))
    runs = []
    keep = contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory(prefix="compass-bench-recipe-")
    with keep as tmp:
        Path(tmp).mkdir(parents=True, exist_ok=True)
        for seed in range(args.seeds):
            r = run_once(config, seed, Path(tmp))
            r["figures"] = figures(r["checkpoints"], r["thinking"], r["domain"], *r["zv"])
            runs.append(r)
            print(f"seed {seed}: {r['wall_s']:.0f} s")
    peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2 ** 20     # KiB on Linux
    last = runs[-1]
    suites = sorted({s for c in last["checkpoints"].values() for s in c["accuracy"]})
    labels = {slot: c.get("label", slot) for slot, c in last["checkpoints"].items()}
    print(f"\nheld-out accuracy, mean over {len(runs)} seed(s) (reasoning suites: {', '.join(last['thinking'])}; "
          f"domain: {', '.join(last['domain'])})")
    print(f"{'checkpoint':<14}" + "".join(f"{s:>13}" for s in suites))
    for slot in [s for s in CKPTS if s in last["checkpoints"]]:
        cells = []
        for s in suites:
            vals = [r["checkpoints"][slot]["accuracy"][s] for r in runs
                    if slot in r["checkpoints"] and s in r["checkpoints"][slot]["accuracy"]]
            cells.append(f"{sum(vals) / len(vals):>13.3f}" if vals else f"{'—':>13}")
        print(f"{labels[slot]:<14}" + "".join(cells))
    out = {"bench": "recipe", "seeds": len(runs), "first_run_s": round(statistics.mean(r["wall_s"] for r in runs), 1),
           "peak_rss_gib": round(peak_gib, 2)}
    print()
    for k in FIGURES:
        vals = [r["figures"][k] for r in runs if r["figures"][k] is not None]
        out[k] = round(statistics.mean(vals), 4) if vals else None
        if len(vals) > 1:
            out[f"{k}_std"] = round(statistics.stdev(vals), 4)
        shown = _fmt(out[k]) if k != "rl_zero_variance_token_share" or out[k] is None else f"{out[k]:.3f}"
        print(f"{k:<30} {shown}" + (f"  (std {out[f'{k}_std']:.3f})" if f"{k}_std" in out else ""))
    print(json.dumps(out))
    return 0
