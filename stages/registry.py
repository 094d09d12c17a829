"""Stage packages by name. Each ``stages/<name>/stage.py`` defines SPEC and run()."""
from __future__ import annotations

import importlib

STAGES = ("world", "data_filter", "sft", "merge", "genrm", "reasoning_rl", "domain_rl", "evaluation")


def stage_module(name: str):
    if name not in STAGES:
        raise KeyError(f"unknown stage '{name}'; known: {', '.join(STAGES)}")
    return importlib.import_module(f"stages.{name}.stage")


def stage_spec(name: str):
    return stage_module(name).SPEC
