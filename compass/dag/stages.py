"""Stage packages by name, in DAG order. Each ``stages/<name>/spec.py`` defines SPEC and run(); the
heavy body lives in ``stages/<name>/stage.py`` and is imported only when the stage runs.

The library knows stages only by name: a spec is imported when asked for (``importlib``), so no
library module depends on any stage's code (tests/test_layering.py)."""
from __future__ import annotations

import importlib

from compass.dag.pipeline import PIPELINE

STAGES: tuple[str, ...] = tuple(dict.fromkeys(n.stage for n in PIPELINE))


def stage_module(name: str):
    if name not in STAGES:
        raise KeyError(f"unknown stage '{name}'; known: {', '.join(STAGES)}")
    return importlib.import_module(f"stages.{name}.spec")


def stage_spec(name: str):
    return stage_module(name).SPEC
