from pydantic import Field

from stages.common.config import StrictModel


class GenRMConfig(StrictModel):
    seed: int = 0
    steps: int = Field(20, ge=1)
    batch_size: int = Field(8, ge=1)
    lr: float = Field(1e-3, gt=0)
