from pydantic import Field

from stages.common.config import StrictModel


class EvalConfig(StrictModel):
    seed: int = 0
    samples_per_prompt: int = Field(1, ge=1)
    max_new_tokens: int = Field(64, ge=1)
    temperature: float = Field(0.0, ge=0, description="0 = greedy")
