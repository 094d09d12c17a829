"""Helpers for whole-pipeline tests: `compass` in a subprocess with its own Prefect home."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

POOL = {"size": 6, "candidates": 8, "k": 2}
# Smaller than tiny.yaml: these tests run the pipeline several times.
E2E_OVERRIDES = {
    "world": {"suites": {"arithmetic": {"n": 120, "n_eval": 8}, "ecommerce_category": {"n": 60, "n_eval": 8}},
              "n_preference_pairs": 24, "pretrain": {"steps": 4, "batch_size": 8}},
    "sft_longcot": {"steps": 6, "batch_size": 8, "eval_max_new_tokens": 16, "eval_max_prompts_per_suite": 4},
    "sft_domain": {"steps": 6, "batch_size": 8, "eval_max_new_tokens": 16, "eval_max_prompts_per_suite": 4},
    "merge": {"sweep": {"methods": ["ties"], "thinking_weights": [0.5, 0.7], "dev_per_suite": 2,
                        "max_new_tokens": 16}},
    "genrm": {"steps": 3, "batch_size": 4, "max_new_tokens": 16, "eval_pairs": 4, "bt": {"steps": 3},
              "grpo": {"steps": 1, "sampling": {"prompts_per_step": 2, "group_size": 2},
                       "rollout": {"max_new_tokens": 16}}},
    # the pool as tiny.yaml has it, smaller; never-solved prompts kept: a 6-step SFT model solves next to nothing
    "reasoning_rl": {"steps": 1, "sampling": {"prompts_per_step": 4, "group_size": 2, "pool": POOL},
                     "rollout": {"max_new_tokens": 16}},
    "domain_rl": {"steps": 1, "sampling": {"prompts_per_step": 4, "group_size": 2, "pool": POOL},
                  "rollout": {"max_new_tokens": 16}},
    "evaluation": {"max_new_tokens": 16},
}


def write_config(path: Path, store: str, **extra) -> Path:
    base = yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text())
    for key, over in E2E_OVERRIDES.items():
        base.setdefault(key, {}).update(over)
    base["store"] = store
    base["base"] = "none"       # a whole config: not laid onto tiny.yaml again (its suites would come back)
    base.update(extra)
    path.write_text(yaml.safe_dump(base, sort_keys=False))
    return path


def compass_env(tmp: Path) -> dict:
    env = dict(os.environ)
    env.update(PREFECT_HOME=str(tmp / "prefect-home"), COMPASS_CACHE=str(tmp / "cache"), COMPASS_STATE_DIR=str(tmp / "state"),
               COMPASS_LOG_DIR=str(tmp / "logs"), COMPASS_PROGRESS="0")
    env.pop("PREFECT_API_URL", None)
    return env


def compass(args: list[str], tmp: Path, check: bool = True, env_extra: dict | None = None, server=None,
            **kw) -> subprocess.CompletedProcess:
    """`compass ARGS` in a subprocess; with ``server`` (a running :class:`PrefectServer`) it talks to that
    server instead of starting Prefect's temporary one."""
    env = {**compass_env(tmp), **(env_extra or {})}
    if server is not None:
        env = server.env(env)
    proc = subprocess.run([sys.executable, "-m", "compass.cli.main", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"compass {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-5000:]}")
    return proc


def last_json(stdout: str) -> dict:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON line in output:\n{stdout[-2000:]}")


@pytest.fixture
def e2e_tmp(tmp_path: Path) -> Path:
    return tmp_path
