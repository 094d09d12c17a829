from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from compass.config import StrictModel
from compass.lm.model_config import ModelConfig, TokenizerConfig

Language = Literal["en", "zh-TW", "id", "vi", "th", "pt", "ms"]


class SuiteSize(StrictModel):
    n: int = Field(0, ge=0, description="training items, split into teacher SFT samples and RL prompts")
    n_eval: int = Field(0, ge=0, description="held-out evaluation prompts (never seen in training)")


def _default_suites() -> dict[str, SuiteSize]:
    return {"arithmetic": SuiteSize(n=120, n_eval=10), "ecommerce_category": SuiteSize(n=60, n_eval=10)}


class WorldConfig(StrictModel):
    """The embedded default world: synthetic suites with teachers, a BPE tokenizer and the tiny base model."""
    seed: int = 0
    model: ModelConfig = ModelConfig()
    tokenizer: TokenizerConfig = TokenizerConfig()
    suites: dict[str, SuiteSize] = Field(default_factory=_default_suites,
                                         description="suite name -> sizes; see `stages/world/suites/`")
    sft_fraction: float = Field(0.5, ge=0, le=1,
                                description="share of items that get a teacher response in raw_sft; "
                                            "the rest are prompt-only (RL prompts)")
    n_preference_pairs: int = Field(120, ge=0)
    tie_fraction: float = Field(0.2, ge=0, le=1, description="share of preference pairs that are true ties")
    languages: list[Language] = Field(
        ["en", "id"], min_length=1,
        description="languages of the multilingual suites (each suite uses those it supports); the first "
                    "is drawn twice as often as each other")
    n_planted: int = Field(2, ge=0, description="deliberately bad rows of each kind planted in the raw tables "
                                               "(duplicates, truncated traces, empty and wrong responses, "
                                               "copies of eval prompts, prompts without reference) so "
                                               "data_filter has something to quarantine; 0 = clean data")

    @field_validator("suites")
    @classmethod
    def _known_suites(cls, v: dict[str, SuiteSize]) -> dict[str, SuiteSize]:
        from stages.world.suites import all_suites
        known = all_suites()
        for name in v:
            if name not in known:
                raise ValueError(f"unknown suite '{name}' (known: {', '.join(sorted(known))})")
        return v
