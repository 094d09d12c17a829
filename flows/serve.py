"""Serve every deployment of deploy/prefect.yaml (the specs come from ``compass.dag.deployments``), so
runs can be started and scheduled from the Prefect UI. Needs a Prefect server (PREFECT_API_URL)."""
from __future__ import annotations

import importlib

from prefect import serve
from prefect.schedules import Cron

from compass.dag.deployments import DeploymentSpec


def to_deployment(spec: DeploymentSpec):
    fl = getattr(importlib.import_module(spec.module), spec.flow)
    return fl.to_deployment(name=spec.name, parameters=spec.parameters, description=spec.description or None,
                            schedules=[Cron(spec.cron, timezone=spec.timezone)] if spec.cron else None)


def serve_all(specs: list[DeploymentSpec]) -> None:
    serve(*(to_deployment(s) for s in specs), print_starting_message=True)
