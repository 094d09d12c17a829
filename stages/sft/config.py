from pydantic import Field

from stages.common.config import StrictModel


class SFTConfig(StrictModel):
    seed: int = 0
    steps: int = Field(40, ge=1)
    batch_size: int = Field(16, ge=1)
    lr: float = Field(1e-3, gt=0)
    max_len: int = Field(256, ge=8)
