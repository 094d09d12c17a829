"""Stage packages by name. Each ``stages/<name>/spec.py`` defines SPEC and run(); the heavy
body lives in ``stages/<name>/stage.py`` and is imported only when the stage runs."""
from __future__ import annotations

import importlib

STAGES = ("world", "data_filter", "sft", "merge", "genrm", "reasoning_rl", "domain_rl", "evaluation")


def stage_module(name: str):
    if name not in STAGES:
        raise KeyError(f"unknown stage '{name}'; known: {', '.join(STAGES)}")
    return importlib.import_module(f"stages.{name}.spec")


def stage_spec(name: str):
    return stage_module(name).SPEC
