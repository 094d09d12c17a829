"""The one Prefect task every stage runs in: retries on infrastructure errors only."""
from __future__ import annotations

from prefect import task

from stages.common.invoke import invoke_stage
from stages.common.runner import is_infra_error


def _retry_on_infra_error(task, task_run, state) -> bool:
    exc = state.result(raise_on_failure=False)
    return isinstance(exc, BaseException) and is_infra_error(exc)


@task(task_run_name="{run_name}", retries=2, retry_delay_seconds=5, retry_condition_fn=_retry_on_infra_error,
      persist_result=False)
def stage_task(stage: str, run_name: str, config: dict, inputs: dict[str, str], store: str,
               store_options: dict, output_names: dict[str, str]) -> dict:
    return invoke_stage(stage, config=config, inputs=inputs, store=store, store_options=store_options,
                        run_name=run_name, output_names=output_names).to_dict()
