"""The one Prefect task every stage runs in: retries on infrastructure errors only,
publishes the run's markdown summary as a Prefect artifact, and renames the task run after what it did
(``sft_longcot · ran 152 s``, ``world · reused``)."""
from __future__ import annotations

from prefect import task
from prefect.artifacts import create_markdown_artifact

from flows.run_labels import name_task_run
from compass.dag.run_plan import stage_run_label
from compass.runtime.invoke import invoke_stage
from compass.runtime.runner import is_infra_error
from compass.runtime.stage_summary import markdown_key, stage_summary
from compass.store.store import ArtifactStore


def _retry_on_infra_error(task, task_run, state) -> bool:
    exc = state.result(raise_on_failure=False)
    return isinstance(exc, BaseException) and is_infra_error(exc)


@task(task_run_name="{run_name}", retries=2, retry_delay_seconds=5, retry_condition_fn=_retry_on_infra_error,
      persist_result=False)
def stage_task(stage: str, run_name: str, config: dict, inputs: dict[str, str], store: str,
               store_options: dict, output_names: dict[str, str]) -> dict:
    result = invoke_stage(stage, config=config, inputs=inputs, store=store, store_options=store_options,
                          run_name=run_name, output_names=output_names)
    name_task_run(stage_run_label(result.to_dict()))
    create_markdown_artifact(stage_summary(result, ArtifactStore(store, storage_options=store_options)),
                             key=markdown_key(run_name), description=f"{run_name}: stage {stage}")
    return result.to_dict()
