"""Name and tag the current Prefect run after what its stages did (the labels come from
``compass.dag.run_plan``), so the UI's run lists tell a real run from a reuse."""
from __future__ import annotations

import logging

from prefect.client.orchestration import get_client
from prefect.context import TaskRunContext
from prefect.runtime import flow_run


def name_task_run(name: str) -> None:
    # Prefect 3 records task runs from the client's state events, which carry the run as the engine holds
    # it (the API may not know the run yet): renaming the engine's copy names the run the final state records.
    ctx = TaskRunContext.get()
    if ctx is not None:
        ctx.task_run.name = name


def label_flow_run(suffix: str, tags: list[str]) -> None:
    """Append ``suffix`` to the flow run's name and add ``tags``; a failure only warns (the stages are done)."""
    try:
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(flow_run.id)
            client.update_flow_run(run.id, name=f"{run.name} · {suffix}", tags=sorted(set(run.tags) | set(tags)))
    except Exception as e:                      # noqa: BLE001 - labels are cosmetic; the run's work is committed
        logging.getLogger("compass.flows").warning("could not label the flow run (%s): %s", suffix, e)
