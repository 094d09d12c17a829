from pydantic import Field

from stages.common.config import StrictModel
from stages.common.model_factory import ModelConfig


class WorldConfig(StrictModel):
    """The embedded default world: synthetic suites with teachers, and the tiny base model."""
    seed: int = 0
    model: ModelConfig = ModelConfig()
    n_math: int = Field(600, ge=0, description="reasoning items (arithmetic with Long-CoT traces)")
    n_domain: int = Field(300, ge=0, description="domain items (e-commerce multiple choice)")
    n_preference_pairs: int = Field(120, ge=0)
    n_eval: int = Field(48, ge=0, description="held-out evaluation prompts per suite")
