from __future__ import annotations

from typing import Literal

from pydantic import Field

from stages.common.config import StrictModel
from stages.common.model_config import ModelConfig


class WorldConfig(StrictModel):
    """The embedded default world: synthetic suites with teachers, and the tiny base model."""
    seed: int = 0
    model: ModelConfig = ModelConfig()
    n_math: int = Field(600, ge=0, description="reasoning items (arithmetic with Long-CoT traces)")
    n_domain: int = Field(300, ge=0, description="domain items (e-commerce multiple choice)")
    sft_fraction: float = Field(0.5, ge=0, le=1,
                                description="share of items that get a teacher response in raw_sft; "
                                            "the rest are prompt-only (RL prompts)")
    n_preference_pairs: int = Field(120, ge=0)
    tie_fraction: float = Field(0.2, ge=0, le=1, description="share of preference pairs that are true ties")
    n_eval: int = Field(48, ge=0, description="held-out evaluation prompts per suite")
    languages: list[Literal["en", "id"]] = Field(
        ["en", "id"], min_length=1, description="languages of the e-commerce items; the first is the most frequent")
    n_planted: int = Field(2, ge=0, description="deliberately bad rows of each kind planted in the raw tables "
                                               "(duplicates, truncated traces, empty and wrong responses, "
                                               "copies of eval prompts, prompts without reference) so "
                                               "data_filter has something to quarantine; 0 = clean data")
