"""The pipeline flow: every stage of the DAG in order, each as one Prefect task; the run is then named and
tagged after which stage runs ran and which reused stored outputs."""
from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from flows.credentials import apply_credentials_block
from flows.run_labels import label_flow_run
from flows.stage_task import stage_task
from compass.config import validate
from compass.dag.config import PipelineConfig
from compass.dag.pipeline_yaml import load_pipeline_config
from compass.dag.run_plan import make_run_plan, pipeline_run_labels, summary_markdown


@flow(name="pipeline", log_prints=True)
def pipeline_flow(config_path: str = "configs/tiny.yaml", config: dict | None = None, store: str | None = None,
                  from_artifacts: list[str] | None = None, until: str | None = None) -> list[dict]:
    """The whole DAG; every stage run whose version is stored is reused.

    Args:
        config_path: the pipeline YAML (built on the embedded default), read where the flow runs.
        config: a whole pipeline config as a dict (no base is laid under it), used instead of config_path.
        store: the artifact store root (overrides the config): ./artifacts, s3://bucket/prefix.
        from_artifacts: resume from stored artifacts: each "NAME=REF", REF a URI from `compass artifacts ls`
            or KIND/NAME[/VERSION] in the store (LATEST without a version), e.g.
            "thinking_base=checkpoint/thinking_base". The stages only needed to make NAME are skipped.
        until: a stage run to stop after (e.g. merge).
    """
    cfg = validate(PipelineConfig, config, "config") if config is not None else \
        load_pipeline_config(config_path)[0]
    if store:
        cfg.store = store
    apply_credentials_block(cfg.store_options)
    run = make_run_plan(cfg, from_artifacts, until)
    rows = []
    for node in run.steps:
        res = stage_task(node.stage, node.run_name, run.configs[node.run_name], run.inputs_for(node),
                         run.store, run.store_options, node.outputs)
        run.record(node, res["outputs"])
        rows.append(res)
    create_markdown_artifact(summary_markdown(rows, run.store, run.store_options), key="pipeline-summary")
    label_flow_run(*pipeline_run_labels(rows))
    return rows
