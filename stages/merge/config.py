from typing import Literal

from pydantic import Field

from stages.common.config import StrictModel


class MergeConfig(StrictModel):
    method: Literal["ties", "task_arithmetic", "dare_ties"] = "ties"
    density: float = Field(0.7, gt=0, le=1)
    thinking_weight: float = Field(0.7, ge=0)
    domain_weight: float = Field(0.3, ge=0)
