from typing import Literal

from pydantic import Field, model_validator

from stages.common.config import StrictModel


class MergeConfig(StrictModel):
    """mergekit merge of the thinking and domain SFT checkpoints onto their common base."""
    method: Literal["ties", "task_arithmetic", "dare_ties"] = "ties"
    density: float = Field(0.7, gt=0, le=1, description="share of each task vector kept (ties, dare_ties)")
    thinking_weight: float = Field(0.7, ge=0)
    domain_weight: float = Field(0.3, ge=0)
    normalize: bool | None = Field(None, description="divide by the sum of weights; None = mergekit's default "
                                                     "for the method (ties: yes, task_arithmetic/dare_ties: no)")
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    seed: int = Field(0, description="random seed (dare_ties drops at random)")

    @model_validator(mode="after")
    def _some_weight(self):
        if self.thinking_weight + self.domain_weight <= 0:
            raise ValueError("thinking_weight + domain_weight must be > 0 (both 0 would return the base)")
        return self
