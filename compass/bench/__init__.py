"""``compass bench NAME``: each benchmark prints a readable table and ends with one JSON line."""
from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "pipeline-rerun": "compass.bench.pipeline_rerun",
    "data-filter": "compass.bench.data_filter",
    "dedup-quality": "compass.bench.dedup_quality",
    "gym-math": "compass.bench.gym_math",
    "gym-ifeval": "compass.bench.gym_ifeval",
    "gym-code": "compass.bench.gym_code",
    "gym-mcq": "compass.bench.gym_mcq",
    "gym-bfcl": "compass.bench.gym_bfcl",
    "gym-json": "compass.bench.gym_json",
    "gym-service": "compass.bench.gym_service",
    "router-replay": "compass.bench.router_replay",
    "learning-efficiency": "compass.bench.learning_efficiency",
    "entropy-scale": "compass.bench.entropy_scale",
    "vs-trl": "compass.bench.vs_trl",
    "length-balance": "compass.bench.length_balance",
    "reward-overlap": "compass.bench.reward_overlap",
    "system-ablation": "compass.bench.system_ablation",
    "genrm": "compass.bench.genrm",
    "merge": "compass.bench.merge",
    "sft": "compass.bench.sft",
    "recipe": "compass.bench.recipe",
    "detok": "compass.bench.detok",
    "gpu": "compass.bench.gpu",
    "weight-sync": "compass.bench.weight_sync",
    "scaling": "compass.bench.scaling",
}


def run_bench(name: str, argv: list[str]) -> int:
    if name not in BENCHMARKS:
        print(f"error: unknown benchmark '{name}'; benchmarks: {', '.join(sorted(BENCHMARKS))} "
              f"(compass bench NAME --help for its options)", file=sys.stderr)
        return 2
    return importlib.import_module(BENCHMARKS[name]).main(argv)
