"""Run a stage from plain, JSON-able values (what orchestrators pass around).

This is the one bridge between orchestration (Prefect, the CLI) and a stage:
it validates the config at the edge, opens the input artifacts and calls the
stage's run(). It imports no orchestrator.
"""
from __future__ import annotations

from compass.config import validate
from compass.runtime.runner import StageResult
from compass.store.store import Artifact, ArtifactStore
from compass.dag.stages import stage_module


def invoke_stage(stage: str, *, config: dict, inputs: dict[str, str], store: str,
                 store_options: dict | None = None, run_name: str | None = None,
                 output_names: dict[str, str] | None = None) -> StageResult:
    mod = stage_module(stage)
    cfg = validate(mod.SPEC.config, config, f"{run_name or stage} config")
    st = ArtifactStore(store, storage_options=store_options)
    arts = {slot: Artifact.open_uri(uri, st) for slot, uri in inputs.items()}
    return mod.run(cfg, arts, st, run_name=run_name or stage, output_names=output_names)
