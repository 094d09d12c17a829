from pydantic import Field

from stages.common.config import StrictModel


class RLConfig(StrictModel):
    """Settings of the RL engine shared by both RL stages."""
    seed: int = 0
    steps: int = Field(4, ge=1)
    prompts_per_step: int = Field(8, ge=1)
    group_size: int = Field(4, ge=2)
    max_new_tokens: int = Field(48, ge=1)
    temperature: float = Field(1.0, gt=0)
    lr: float = Field(5e-5, gt=0)
