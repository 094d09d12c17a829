"""One Prefect flow per stage. Each re-runs one pipeline node (e.g. ``sft_domain``)
from a config file, with inputs defaulting to the store's LATEST artifacts."""
from __future__ import annotations

from prefect import flow

from flows.credentials import apply_credentials_block
from flows.stage_task import stage_task
from compass.dag.pipeline_yaml import load_pipeline_config
from compass.dag.pipeline import PIPELINE
from compass.dag.run_plan import node_call
from compass.dag.stages import STAGES


def _make_stage_flow(stage: str, default_run: str):
    def stage_flow(run_name: str = default_run, config_path: str = "configs/tiny.yaml",
                   store: str | None = None, inputs: dict[str, str] | None = None) -> dict:
        """Re-run one stage run of the pipeline.

        Args:
            run_name: the pipeline's stage run (the SFT stage runs as sft_longcot or sft_domain).
            config_path: the pipeline YAML whose section for run_name configures the stage.
            store: the artifact store root (overrides the config).
            inputs: {SLOT: REF}, REF a URI or KIND/NAME[/VERSION] in the store; slots left out read the
                store's LATEST artifacts.
        """
        cfg = load_pipeline_config(config_path)[0]
        if store:
            cfg.store = store
        apply_credentials_block(cfg.store_options)
        return stage_task(**node_call(cfg, run_name, inputs))
    # Served deployments re-import the flow by its qualified name: it must be the module-level one.
    stage_flow.__name__ = stage_flow.__qualname__ = f"{stage}_flow"
    return flow(name=stage, flow_run_name="{run_name}", log_prints=True)(stage_flow)


STAGE_FLOWS = {s: _make_stage_flow(s, next(n.run_name for n in PIPELINE if n.stage == s)) for s in STAGES}

world_flow = STAGE_FLOWS["world"]
data_filter_flow = STAGE_FLOWS["data_filter"]
sft_flow = STAGE_FLOWS["sft"]
merge_flow = STAGE_FLOWS["merge"]
genrm_flow = STAGE_FLOWS["genrm"]
reasoning_rl_flow = STAGE_FLOWS["reasoning_rl"]
domain_rl_flow = STAGE_FLOWS["domain_rl"]
evaluation_flow = STAGE_FLOWS["evaluation"]
