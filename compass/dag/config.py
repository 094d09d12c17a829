"""The whole pipeline's config: the store, and one section per stage run (keys = run names).

The sections are derived from the DAG (``compass.dag.pipeline``): each run's section is its stage's
config model (``SPEC.config``), looked up by stage name, so adding a node adds its section."""
from __future__ import annotations

from pydantic import Field, create_model, field_validator

from compass.config import StrictModel
from compass.credentials import refuse_credentials
from compass.dag.pipeline import PIPELINE
from compass.dag.stages import stage_spec


class _PipelineBase(StrictModel):
    store: str = Field("./artifacts", description="fsspec root: a local path, file://… or s3://bucket/prefix")
    store_options: dict = Field(default_factory=dict, description="fsspec storage options (e.g. endpoint_url)")
    eval_suites: list[str] = Field(default_factory=list,
                                   description="names of prompts tables in the store (e.g. made by `compass import`) "
                                               "that the evaluation scores beside the run's own eval_prompts: each "
                                               "is the input suites:NAME, read at its LATEST version")

    schedules: dict[str, str] = Field(default_factory=dict,
                                      description="cron schedules of the deployments `compass serve` registers: "
                                                  "key `pipeline` (the whole DAG) or a stage run name (e.g. "
                                                  "sft_domain), value a cron string such as '0 2 * * *'")
    schedule_timezone: str = Field("UTC", description="the time zone the `schedules` crons are read in")

    @field_validator("schedules")
    @classmethod
    def _known_crons(cls, v: dict[str, str]) -> dict[str, str]:
        from compass.dag.deployments import check_cron, schedule_keys
        unknown = sorted(set(v) - set(schedule_keys()))
        if unknown:
            raise ValueError(f"unknown key(s) {unknown}; use one of {schedule_keys()}")
        return {k: check_cron(k, c) for k, c in v.items()}

    @field_validator("store_options")
    @classmethod
    def _no_credentials(cls, v: dict) -> dict:
        refuse_credentials(v, "store_options.")   # the config is a flow parameter: it is stored and shown
        return v

    def stage_config(self, run_name: str):
        return getattr(self, run_name)


def _section(stage: str):
    model = stage_spec(stage).config
    return model, Field(default_factory=model, description=f"config of a `{stage}` stage run")


PipelineConfig = create_model("PipelineConfig", __base__=_PipelineBase,
                              __module__=__name__, **{n.run_name: _section(n.stage) for n in PIPELINE})
PipelineConfig.__doc__ = __doc__
