from pydantic import Field

from stages.rl.config import RLConfig


class DomainRLConfig(RLConfig):
    carryover_min_difficulty: float = Field(0.2, ge=0, le=1,
                                            description="carry phase-1 prompts whose failure rate is at least this")
    carryover_max_pass_rate: float = Field(0.95, ge=0, le=1,
                                           description="...and whose pass rate is at most this (drop the solved)")
