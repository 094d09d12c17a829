from pydantic import Field

from stages.common.config import StrictModel


class SFTConfig(StrictModel):
    """Supervised fine-tuning on (prompt, response) pairs; defaults are the tiny 2-core values."""
    seed: int = 0
    steps: int = Field(150, ge=1, description="optimizer steps (~5 s on 2 cores with the tiny model)")
    batch_size: int = Field(16, ge=1, description="samples per step")
    lr: float = Field(1e-3, gt=0, description="peak AdamW learning rate")
    warmup_steps: int = Field(4, ge=0, description="linear warmup from 0 to lr, then constant")
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0, description="max global gradient norm")
    max_len: int = Field(256, ge=8, description="pairs longer than this (tokens) are skipped, never truncated")
    log_every: int = Field(25, ge=1, description="log the loss every N steps")
