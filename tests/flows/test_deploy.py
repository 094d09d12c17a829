"""deploy/prefect.yaml stays true to the code: entrypoints load, parameters fit, every stage is there."""
from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import yaml
from prefect import Flow

from compass.dag.pipeline import PIPELINE

REPO = Path(__file__).resolve().parents[2]


def _load_flow(entrypoint: str) -> Flow:
    path, _, name = entrypoint.partition(":")
    spec = importlib.util.spec_from_file_location(Path(path).stem + "_deploycheck", REPO / path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def test_prefect_yaml_entrypoints_and_parameters():
    doc = yaml.safe_load((REPO / "deploy" / "prefect.yaml").read_text())
    run_names = set()
    for d in doc["deployments"]:
        fl = _load_flow(d["entrypoint"])
        assert isinstance(fl, Flow), d["name"]
        params = inspect.signature(fl.fn).parameters
        for key in d.get("parameters", {}):
            assert key in params, f"deployment {d['name']}: flow {fl.name} has no parameter '{key}'"
        if "run_name" in params:
            run_names.add(d.get("parameters", {}).get("run_name", params["run_name"].default))
    assert run_names == {n.run_name for n in PIPELINE}  # one deployment per stage run
