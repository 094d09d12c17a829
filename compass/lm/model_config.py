"""Architecture settings of the tiny models (light: no torch import)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from compass.config import StrictModel


def is_moe(hf_config) -> bool:
    """Whether a Hugging Face model config is a mixture of experts (has routers to record or replay)."""
    return getattr(hf_config, "num_experts", 0) > 0


class ModelConfig(StrictModel):
    """Architecture of the tiny base model (a Qwen3-MoE, or dense Qwen3)."""
    arch: Literal["qwen3_moe", "qwen3"] = "qwen3_moe"
    hidden_size: int = Field(64, gt=0)
    num_layers: int = Field(2, gt=0)
    num_heads: int = Field(2, gt=0)
    num_kv_heads: int = Field(1, gt=0)
    head_dim: int = Field(32, ge=32, description="vLLM needs 32, 64, ...")
    intermediate_size: int = Field(128, gt=0, description="dense MLP width")
    num_experts: int = Field(4, gt=0)
    experts_per_token: int = Field(2, gt=0)
    expert_size: int = Field(64, gt=0, description="per-expert MLP width")
    max_positions: int = Field(512, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> "ModelConfig":
        if self.experts_per_token > self.num_experts:
            raise ValueError(f"experts_per_token ({self.experts_per_token}) > num_experts ({self.num_experts})")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        if self.head_dim % 32:
            raise ValueError(f"head_dim ({self.head_dim}) must be a multiple of 32 (vLLM kernels)")
        return self


class TokenizerConfig(StrictModel):
    vocab_size: int = Field(1024, ge=300, le=65536,
                            description="BPE vocabulary incl. the 256 byte tokens and the special tokens")
    min_frequency: int = Field(2, ge=1, description="a pair seen fewer times than this is never merged")
