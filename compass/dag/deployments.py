"""The deployments ``compass serve`` registers, read from ``deploy/prefect.yaml`` (one source for
``compass serve`` and ``prefect deploy``) and completed from the pipeline config: its path and store
as parameters, and the cron schedule of each deployment from the config's ``schedules``.

Plain data, no Prefect: ``flows/serve.py`` turns each ``DeploymentSpec`` into a Prefect deployment."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from compass.dag.pipeline import PIPELINE

PREFECT_YAML = Path(__file__).resolve().parents[2] / "deploy" / "prefect.yaml"
PIPELINE_KEY = "pipeline"      # the key of the whole DAG's schedule in the config's ``schedules``

# Five cron fields (minute hour day month weekday) of the characters cron allows; Prefect's own cron
# parser checks the values again when the schedule is made.
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*,/-]+$")


@dataclass(frozen=True)
class DeploymentSpec:
    name: str                                # deployment name, e.g. "sft-domain"
    module: str                              # e.g. "flows.stage_flows"
    flow: str                                # attribute of the module, e.g. "sft_flow"
    parameters: dict = field(default_factory=dict)
    description: str = ""
    cron: str | None = None
    timezone: str = "UTC"


def schedule_keys() -> list[str]:
    """What ``schedules`` may name: the whole pipeline, or one stage run."""
    return [PIPELINE_KEY, *(n.run_name for n in PIPELINE)]


def deployment_name(key: str) -> str:
    """``sft_domain`` -> ``sft-domain``: deployment names are the run names, dashed."""
    return key.replace("_", "-")


def check_cron(key: str, cron: str) -> str:
    fields = cron.split()
    if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
        raise ValueError(f"schedules.{key}: {cron!r} is not a cron string of five fields "
                         f"(minute hour day month weekday), e.g. '0 2 * * *'")
    return cron


def _run_name_of(entry: dict) -> str:
    """The schedule key of a deployment entry: ``pipeline`` for the DAG's flow, else the stage run it
    re-runs (its ``run_name`` parameter, or the flow's default run, the deployment's name dashed)."""
    if entry["entrypoint"].endswith(":pipeline_flow"):
        return PIPELINE_KEY
    return entry.get("parameters", {}).get("run_name", entry["name"].replace("-", "_"))


def deployment_specs(config_path: str, store: str | None = None, schedules: dict[str, str] | None = None,
                     timezone: str = "UTC", prefect_yaml: Path = PREFECT_YAML) -> list[DeploymentSpec]:
    """Every deployment of ``prefect.yaml``, with ``config_path`` (and ``store``) as parameters and the
    cron of ``schedules[key]`` where the config gives one (key: ``pipeline`` or a stage run name)."""
    doc = yaml.safe_load(prefect_yaml.read_text())
    schedules = dict(schedules or {})
    unknown = set(schedules) - set(schedule_keys())
    if unknown:
        raise ValueError(f"schedules: unknown key(s) {sorted(unknown)}; use one of {schedule_keys()}")
    out = []
    for entry in doc["deployments"]:
        path, _, flow_name = entry["entrypoint"].partition(":")
        key = _run_name_of(entry)
        cron = schedules.pop(key, None)
        params = {**entry.get("parameters", {}), "config_path": config_path, **({"store": store} if store else {})}
        out.append(DeploymentSpec(name=entry["name"], module=path.removesuffix(".py").replace("/", "."),
                                  flow=flow_name, parameters=params, description=entry.get("description", ""),
                                  cron=check_cron(key, cron) if cron else None, timezone=timezone))
    if schedules:   # a key the YAML has no deployment for: say so rather than drop the schedule
        raise ValueError(f"schedules: no deployment in {prefect_yaml} for {sorted(schedules)}")
    return out
