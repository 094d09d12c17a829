"""First run of the tiny pipeline vs. a second run that reuses every artifact.

Each run is a fresh ``compass run`` process (Prefect ephemeral mode included),
as a user would type it. Headline: ``rerun_fraction`` = rerun wall / first wall.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def _run(cmd: list[str], env: dict) -> tuple[float, dict]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"compass run failed:\n{proc.stderr[-4000:]}")
    last = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    return wall, json.loads(last)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench pipeline-rerun")
    ap.add_argument("--config", default=None, help="pipeline YAML (default: configs/tiny.yaml)")
    args = ap.parse_args(argv)
    from compass.cli.main import default_config
    config = os.path.abspath(args.config or default_config())
    with tempfile.TemporaryDirectory(prefix="compass-bench-") as tmp:
        env = {**os.environ, "PREFECT_HOME": f"{tmp}/prefect", "COMPASS_CACHE": f"{tmp}/cache",
               "COMPASS_PROGRESS": "0"}
        cmd = [sys.executable, "-m", "compass.cli.main", "run", "--config", config, "--store", f"{tmp}/store", "--json"]
        first_wall, first = _run(cmd, env)
        second_wall, second = _run(cmd, env)
    print(f"{'stage run':<14} {'first: status':<14} {'wall s':>8}   {'rerun: status':<14} {'wall s':>8}")
    for a, b in zip(first["stages"], second["stages"]):
        print(f"{a['run_name']:<14} {a['status']:<14} {a['wall_s']:>8.2f}   {b['status']:<14} {b['wall_s']:>8.2f}")
    print(f"{'whole command':<14} {'':<14} {first_wall:>8.2f}   {'':<14} {second_wall:>8.2f}")
    reused = sum(s["status"] == "reused" for s in second["stages"])
    print(json.dumps({"bench": "pipeline-rerun", "first_run_s": round(first_wall, 2),
                      "rerun_s": round(second_wall, 2), "rerun_fraction": round(second_wall / first_wall, 4),
                      "stages_reused": reused, "stages": len(second["stages"])}))
    return 0
