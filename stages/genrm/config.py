from pydantic import Field

from stages.common.config import StrictModel


class GenRMConfig(StrictModel):
    """Generative reward model: judges (prompt, response A, response B) with <answer>A|B|TIE</answer>."""
    seed: int = 0
    steps: int = Field(60, ge=1, description="optimizer steps")
    batch_size: int = Field(8, ge=1)
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(3, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    max_len: int = Field(512, ge=16, description="judge inputs longer than this (tokens) are skipped and counted")
    swap_augment: bool = Field(True, description="also train on each pair with A and B swapped (label swapped)")
    eval_pairs: int = Field(64, ge=0, description="training pairs judged greedily for the accuracy metric")
    max_new_tokens: int = Field(8, ge=3, description="generation budget for a verdict")
    log_every: int = Field(20, ge=1)
