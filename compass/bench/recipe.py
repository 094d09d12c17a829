"""``compass bench recipe``: does the default pipeline teach? One fresh ``compass run`` per seed.

Each seed is a fresh process on a fresh store (Prefect ephemeral mode included), as a user types it,
with every stage's ``seed`` set to the seed. From the evaluation report (every checkpoint × suite) and
the RL phases' metrics it prints the checkpoint × suite table and one JSON line:

- ``first_run_s``, ``peak_rss_gib`` (the largest process of the run);
- ``sft_longcot_home_gain``, ``sft_domain_home_gain``: each SFT model's mean accuracy on its home suites
  (the merge sweep's ``thinking_domains`` / ``domain_domains``) minus the base model's;
- ``merge_min_margin``: merged minus each parent on that parent's home suites, the worse of the two;
- ``reasoning_rl_gain``: phase 1 minus merged on the suites phase 1 trains on (the domains that make at least
  5% of its prompt pool, from its checkpoint's ``pool_domains``), ``reasoning_rl_gain_untrained`` on the others;
- ``domain_rl_gain``: final minus phase 1 on the suites phase 2 trains on, ``domain_rl_gain_untrained`` on the
  others; ``reasoning_forgetting``: phase 1 minus final on phase 1's suites;
- ``rl_zero_variance_token_share``: rollout tokens in zero-variance groups ÷ all RL rollout tokens, both
  phases (from each phase's ``metrics.jsonl``);
- per RL phase (``reasoning_rl_…``, ``domain_rl_…``, from its checkpoint's manifest): the shares of its groups
  that were all-pass and all-fail (``zv_all_pass``, ``zv_all_fail``), the prompt draws skipped before rollout
  (``prompts_skipped``) and, where ``sampling.pool`` graded its pool, the graded prompts' all-pass and all-fail
  shares (``pool_all_pass``, ``pool_all_fail``) and the grading's tokens (``pool_tokens``).

Each figure is computed from the evaluation's per-sample rows on three measures: exact accuracy (the names
above), the mean verifier score (``…_score``: partial credit) and, where the evaluation ran its ``sampled`` pass,
mean@k (``…_mean_at_k``), each with ``_se``: its standard error over prompts, each change paired by prompt and
the suites weighted equally (``change``). Fractions (0.10 = 10 points); with ``--seeds K`` each figure is the
mean over seeds, ``_se`` the mean of the runs' SEs, and ``_std`` the spread between seeds.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from compass.lm.sample_metrics import paired_se, values_by_prompt
from compass.rl.run_summary import zero_variance_tokens as run_zero_variance_tokens

CKPTS = ("base", "sft_longcot", "sft_domain", "merged", "phase1", "model")
FIGURES = ("sft_longcot_home_gain", "sft_domain_home_gain", "merge_min_margin", "reasoning_rl_gain",
           "reasoning_rl_gain_untrained", "domain_rl_gain", "domain_rl_gain_untrained", "reasoning_forgetting",
           "rl_zero_variance_token_share")
# figure -> (checkpoint, the checkpoint it is compared with, the suites: a parent's home, or what an RL phase
# trains on, or the suites it does not train on)
CHANGES = {"sft_longcot_home_gain": ("sft_longcot", "base", "thinking"),
           "sft_domain_home_gain": ("sft_domain", "base", "domain"),
           "reasoning_rl_gain": ("phase1", "merged", "phase1"),
           "reasoning_rl_gain_untrained": ("phase1", "merged", "phase1_other"),
           "domain_rl_gain": ("model", "phase1", "phase2"),
           "domain_rl_gain_untrained": ("model", "phase1", "phase2_other"),
           "reasoning_forgetting": ("phase1", "model", "phase1")}
# per RL phase: figure suffix -> the key of its checkpoint manifest's ``extra``
PHASE_KEYS = {"zv_all_pass": "zero_variance_all_pass_rate", "zv_all_fail": "zero_variance_all_fail_rate",
              "prompts_skipped": "prompts_skipped", "pool_all_pass": "pool_all_pass_share",
              "pool_all_fail": "pool_all_fail_share", "pool_tokens": "pool_tokens"}
PHASES = ("reasoning_rl", "domain_rl")
COUNTS = ("prompts_skipped", "pool_tokens")       # of PHASE_KEYS: counts, not shares
# a suite counts as trained by an RL phase when its domain is at least this share of the phase's prompt pool
TRAINED_SHARE = 0.05
MARGINS = (("merged", "sft_longcot", "thinking"), ("merged", "sft_domain", "domain"))
# what a figure is measured on: (eval_results field, decoding, suffix of the figure's name)
MEASURES = {"accuracy": ("correct", "main", ""), "mean score": ("score", "main", "_score"),
            "mean@k": ("correct", "sampled", "_mean_at_k")}


def per_prompt_values(rows: list[dict], field: str, decoding: str) -> dict:
    """checkpoint -> suite -> prompt id -> the samples' ``field`` values, from eval_results rows of one
    ``decoding`` (rows written before the column existed are "main")."""
    groups: dict = {}
    for r in rows:
        if (r.get("decoding") or "main") == decoding:
            groups.setdefault(r["checkpoint"], {}).setdefault(r["suite"], []).append(r)
    return {ck: {suite: values_by_prompt(rs, field) for suite, rs in suites.items()} for ck, suites in groups.items()}


def change(values: dict, new: str, old: str, suites) -> tuple[float | None, float | None]:
    """(mean over ``suites`` of new − old, its standard error): each suite's change is paired by prompt
    (``paired_se``), suites weigh equally, so SE = sqrt(Σ SE_s²) / S. (None, None) when a checkpoint is absent."""
    a, b = values.get(new, {}), values.get(old, {})
    both = [s for s in suites if s in a and s in b]
    if not both:
        return None, None
    mean = lambda d: sum(sum(v) / len(v) for v in d.values()) / len(d)      # noqa: E731  (over prompts)
    diff = sum(mean(a[s]) - mean(b[s]) for s in both) / len(both)
    ses = [paired_se(a[s], b[s]) for s in both]
    se = None if any(x is None for x in ses) else math.sqrt(sum(x * x for x in ses)) / len(both)
    return diff, se


def trained_suites(pool_domains: dict[str, int] | None) -> list[str] | None:
    """The domains that make at least ``TRAINED_SHARE`` of an RL phase's pool (its manifest's ``pool_domains``);
    None when the run did not record it."""
    if not pool_domains:
        return None
    n = sum(pool_domains.values())
    return sorted(d for d, c in pool_domains.items() if c >= TRAINED_SHARE * n)


def figures(rows: list[dict], thinking: list[str], domain: list[str], zv_tokens: int, tokens: int,
            measure: str = "accuracy", phase1: list[str] | None = None, phase2: list[str] | None = None) -> dict:
    """The headline figures of one run from its eval_results rows, on ``measure`` (a key of ``MEASURES``:
    the figure names carry its suffix), each with ``_se`` beside it (over prompts, paired); the zero-variance
    share with the accuracy figures. ``phase1``/``phase2``: the suites each RL phase trains on
    (``trained_suites``); each phase's gain is measured there and, as ``…_untrained``, on the other suites.
    Without them the merge sweep's homes stand in (reasoning: ``thinking``, domain: ``domain``)."""
    field, decoding, suffix = MEASURES[measure]
    values = per_prompt_values(rows, field, decoding)
    suites = sorted({s for ck in values.values() for s in ck})
    phase1, phase2 = phase1 or thinking, phase2 or domain
    homes = {"thinking": thinking, "domain": domain, "phase1": phase1, "phase2": phase2,
             "phase1_other": [s for s in suites if s not in phase1],
             "phase2_other": [s for s in suites if s not in phase2]}
    out = {}
    for name, (new, old, home) in CHANGES.items():
        out[name + suffix], out[f"{name}{suffix}_se"] = change(values, new, old, homes[home])
    margins = [m for m in (change(values, new, old, homes[home]) for new, old, home in MARGINS) if m[0] is not None]
    out["merge_min_margin" + suffix], out[f"merge_min_margin{suffix}_se"] = \
        min(margins, key=lambda m: m[0]) if margins else (None, None)
    if not suffix:
        out["rl_zero_variance_token_share"] = zv_tokens / tokens if tokens else None
    return out


def phase_means(per_run: list[dict]) -> dict:
    """Each ``<phase>_<PHASE_KEYS name>`` figure: its mean over the runs that recorded it (None: none did)."""
    out = {}
    for phase in PHASES:
        for name in PHASE_KEYS:
            vals = [r[f"{phase}_{name}"] for r in per_run if r.get(f"{phase}_{name}") is not None]
            out[f"{phase}_{name}"] = round(statistics.mean(vals), 4) if vals else None
    return out


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
    return read_run(store, cfg_path, wall)


def read_run(store: Path, cfg_path: Path, wall: float) -> dict:
    """What the figures need from a finished run's store (its evaluation report and rows, both RL checkpoints)
    and its whole config file."""
    from compass.store.store import ArtifactStore
    st = ArtifactStore(str(store))
    summary = json.loads(st.get("report", "eval_report").read_bytes("summary.json"))
    rl = [st.get("checkpoint", name) for name in ("ckpt_r1", "ckpt_final")]
    metrics = [c.local_dir() / "metrics.jsonl" for c in rl]
    pipe = yaml.safe_load(cfg_path.read_text())
    sweep = pipe.get("merge", {}).get("sweep", {})          # the merge sweep names each parent's home domains
    return {"wall_s": wall, "checkpoints": summary.get("checkpoints", {}),
            "rows": st.get("eval_results", "eval_results").read_table().select(
                ["checkpoint", "suite", "prompt_id", "correct", "score", "decoding"]).to_pylist(),
            "thinking": sweep.get("thinking_domains", ["math", "code", "tool"]),
            "domain": sweep.get("domain_domains", ["ecommerce", "general", "instruction"]),
            "zv": zero_variance_tokens([m for m in metrics if m.exists()]),
            "trained": [trained_suites(c.manifest.extra.get("pool_domains")) for c in rl],
            "phases": {f"{phase}_{name}": c.manifest.extra.get(key) for phase, c in zip(PHASES, rl)
                       for name, key in PHASE_KEYS.items()}}


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
            runs.append(with_figures(run_once(config, seed, Path(tmp))))
            print(f"seed {seed}: {runs[-1]['wall_s']:.0f} s")
    report(runs, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2 ** 20)     # KiB on Linux
    return 0


def with_figures(r: dict) -> dict:
    """A run read by ``read_run`` with its figures on every measure in place of its rows."""
    rows = r.pop("rows")
    r["figures"] = {k: v for m in MEASURES for k, v in figures(
        rows, r["thinking"], r["domain"], *r["zv"], measure=m, phase1=r["trained"][0],
        phase2=r["trained"][1]).items()}
    return r


def report(runs: list[dict], peak_gib: float) -> None:
    """Print the checkpoint table, the figures over seeds, the per-phase zero variance and the JSON line."""
    last = runs[-1]
    suites = sorted({s for c in last["checkpoints"].values() for s in c["accuracy"]})
    labels = {slot: c.get("label", slot) for slot, c in last["checkpoints"].items()}
    trained = [", ".join(t) if t else "not recorded" for t in last["trained"]]
    print(f"\nheld-out accuracy, mean over {len(runs)} seed(s) (the merge's homes: reasoning "
          f"{', '.join(last['thinking'])}; domain {', '.join(last['domain'])}. Trained by reasoning RL: {trained[0]}; "
          f"by domain RL: {trained[1]})")
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
    print("\nfigures: mean over seeds ± the mean within-run standard error (over prompts, paired), "
          "[std over seeds]; mean@k only where the evaluation's `sampled` pass ran")
    print(f"{'figure':<30}" + "".join(f"{m:>30}" for m in MEASURES))
    for k in FIGURES:
        cells = []
        for _, (_, _, suffix) in MEASURES.items():
            name = k + suffix
            if k == "rl_zero_variance_token_share" and suffix:
                cells.append(f"{'':>30}")
                continue
            vals = [r["figures"].get(name) for r in runs if r["figures"].get(name) is not None]
            ses = [r["figures"].get(f"{name}_se") for r in runs if r["figures"].get(f"{name}_se") is not None]
            out[name] = round(statistics.mean(vals), 4) if vals else None
            if ses:
                out[f"{name}_se"] = round(statistics.mean(ses), 4)
            if len(vals) > 1:
                out[f"{name}_std"] = round(statistics.stdev(vals), 4)
            shown = "—" if out[name] is None else (f"{out[name]:.3f}" if k == "rl_zero_variance_token_share"
                                                   else f"{out[name]:+.3f}")
            shown += f" ± {out[f'{name}_se']:.3f}" if f"{name}_se" in out else ""
            shown += f" [{out[f'{name}_std']:.3f}]" if f"{name}_std" in out else ""
            cells.append(f"{shown:>30}")
        print(f"{k:<30}" + "".join(cells))
    phase_out = phase_means([r["phases"] for r in runs])
    out.update(phase_out)
    print("\nzero variance per RL phase, mean over seeds (shares of groups; pool: of the prompts graded before RL)")
    print(f"{'phase':<14}" + "".join(f"{n:>17}" for n in PHASE_KEYS))
    for phase in PHASES:
        cells = [(name, phase_out[f"{phase}_{name}"]) for name in PHASE_KEYS]
        # counts as whole numbers, shares as fractions (a count of 0 or 1 is not a share)
        print(f"{phase:<14}" + "".join(f"{'—' if v is None else (f'{v:,.0f}' if name in COUNTS else f'{v:.3f}'):>17}"
                                       for name, v in cells))
    print(json.dumps(out))
