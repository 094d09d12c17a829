"""The whole pipeline's config: the store, and one section per stage run (keys = run names)."""
from __future__ import annotations

from pydantic import Field

from stages.common.config import StrictModel
from stages.data_filter.config import DataFilterConfig
from stages.domain_rl.config import DomainRLConfig
from stages.evaluation.config import EvalConfig
from stages.genrm.config import GenRMConfig
from stages.merge.config import MergeConfig
from stages.reasoning_rl.config import ReasoningRLConfig
from stages.sft.config import SFTConfig
from stages.world.config import WorldConfig


class PipelineConfig(StrictModel):
    store: str = Field("./artifacts", description="fsspec root: a local path, file://… or s3://bucket/prefix")
    store_options: dict = Field(default_factory=dict, description="fsspec storage options (e.g. endpoint_url)")
    world: WorldConfig = WorldConfig()
    data_filter: DataFilterConfig = DataFilterConfig()
    sft_longcot: SFTConfig = SFTConfig()
    sft_domain: SFTConfig = SFTConfig()
    merge: MergeConfig = MergeConfig()
    genrm: GenRMConfig = GenRMConfig()
    reasoning_rl: ReasoningRLConfig = ReasoningRLConfig()
    domain_rl: DomainRLConfig = DomainRLConfig()
    evaluation: EvalConfig = EvalConfig()

    def stage_config(self, run_name: str):
        return getattr(self, run_name)
