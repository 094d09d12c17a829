"""The whole pipeline's config: the store, and one section per stage run (keys = run names).

The sections are derived from the DAG (``compass.dag.pipeline``): each run's section is its stage's
config model (``SPEC.config``), looked up by stage name, so adding a node adds its section."""
from __future__ import annotations

from pydantic import Field, create_model

from compass.config import StrictModel
from compass.dag.pipeline import PIPELINE
from compass.dag.stages import stage_spec


class _PipelineBase(StrictModel):
    store: str = Field("./artifacts", description="fsspec root: a local path, file://… or s3://bucket/prefix")
    store_options: dict = Field(default_factory=dict, description="fsspec storage options (e.g. endpoint_url)")
    eval_suites: list[str] = Field(default_factory=list,
                                   description="names of prompts tables in the store (e.g. made by `compass import`) "
                                               "that the evaluation scores beside the run's own eval_prompts: each "
                                               "is the input suites:NAME, read at its LATEST version")

    def stage_config(self, run_name: str):
        return getattr(self, run_name)


def _section(stage: str):
    model = stage_spec(stage).config
    return model, Field(default_factory=model, description=f"config of a `{stage}` stage run")


PipelineConfig = create_model("PipelineConfig", __base__=_PipelineBase,
                              __module__=__name__, **{n.run_name: _section(n.stage) for n in PIPELINE})
PipelineConfig.__doc__ = __doc__
