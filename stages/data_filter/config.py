from pydantic import Field

from stages.common.config import StrictModel


class DataFilterConfig(StrictModel):
    seed: int = 0
    decontam_ngram: int = Field(13, ge=1, description="word n-gram length for decontamination")
    rl_fraction: float = Field(0.5, gt=0, lt=1, description="share of reasoning items held out as RL prompts")
