from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from compass.config import StrictModel
from compass.lm.model_config import ModelConfig, TokenizerConfig

Language = Literal["en", "zh-TW", "id", "vi", "th", "pt", "ms"]


class SuiteSize(StrictModel):
    n: int = Field(0, ge=0, description="training items, split into teacher SFT samples and RL prompts")
    n_eval: int = Field(0, ge=0, description="held-out evaluation prompts (never seen in training)")


class PretrainConfig(StrictModel):
    """The base's pretraining: plain documents of every suite, so both SFT parents start from one model.

    A share of each suite's training items (taken before the SFT / RL split, never an eval item) is
    written as a document: the question, the worked solution and the answer as plain text, without the
    chat template or the ``<think>`` tags, loss on every token. The base then knows the suites' content
    but not the chat format: the home skills, as the evaluation asks for them, are left to SFT
    (docs/world.md, "The pretrained base").
    """
    fraction: float = Field(0.0, ge=0, lt=1, description="share of each suite's training items made into "
                                                          "documents (0: no pretraining corpus)")
    steps: int = Field(0, ge=0, description="AdamW steps on the documents (0: the base stays the random init)")
    batch_size: int = Field(16, ge=1)
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(20, ge=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="cosine decay to lr x this")
    grad_clip: float = Field(1.0, gt=0)
    max_len: int = Field(256, ge=8, description="documents longer than this many tokens are skipped (counted)")
    log_every: int = Field(100, ge=1)
    checkpoint_every: int = Field(200, ge=0, description="trainer state saved every K steps: a killed world "
                                                         "stage resumes its pretraining (0: never)")


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
    pretrain: PretrainConfig = PretrainConfig()
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
