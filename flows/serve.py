"""Serve every flow as a deployment, so runs can be started and scheduled from the Prefect UI.

Needs a Prefect server (``prefect server start``, or PREFECT_API_URL set).
"""
from __future__ import annotations

from prefect import serve

from flows.pipeline import pipeline_flow
from flows.stage_flows import STAGE_FLOWS
from compass.dag.pipeline import PIPELINE


def deployments(config_path: str, store: str | None = None, nightly_cron: str | None = None) -> list:
    base = {"config_path": config_path, **({"store": store} if store else {})}
    out = [pipeline_flow.to_deployment(name="pipeline", parameters=base,
                                       description="The whole DAG; stored stages are reused.")]
    if nightly_cron:
        out.append(pipeline_flow.to_deployment(name="pipeline-scheduled", parameters=base, cron=nightly_cron,
                                               description="Scheduled re-run of the whole DAG."))
    for node in PIPELINE:
        out.append(STAGE_FLOWS[node.stage].to_deployment(
            name=node.run_name.replace("_", "-"), parameters={**base, "run_name": node.run_name},
            description=f"Re-run {node.run_name} (stage {node.stage}) on the LATEST inputs."))
    return out


def serve_all(config_path: str, store: str | None = None, nightly_cron: str | None = None) -> None:
    serve(*deployments(config_path, store, nightly_cron), print_starting_message=True)
