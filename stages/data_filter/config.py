from __future__ import annotations

from pydantic import Field, field_validator

from compass.dedup.settings import DedupSettings
from stages.data_filter.grading import GradingConfig


class DataFilterConfig(DedupSettings):
    """Dedup and decontamination (fields of :class:`~compass.dedup.settings.DedupSettings`),
    harmful-content and quality filters, routing."""
    # -- content -------------------------------------------------------------------------
    harm_filter: str = Field("lexicon", description="harmful-content filter by name (stages/data_filter/harm.py); "
                                                    "'none' turns it off")
    max_field_chars: int = Field(200_000, ge=1, description="a longer text field is quarantined as too_long")
    check_answers: bool = Field(True, description="quarantine teacher responses whose final answer does not "
                                                  "verify against the reference, when one is known")
    require_reference: bool = Field(True, description="quarantine RL prompts without a reference (unverifiable)")
    grading: GradingConfig = Field(default_factory=GradingConfig,
                                   description="difficulty of rl_prompts by a grader model's pass rate")
    # -- streaming -----------------------------------------------------------------------
    batch_rows: int = Field(4096, ge=1, description="rows read, screened and written at a time (memory: a batch "
                                                    "of rows as Arrow and as Python strings)")
    ray_workers: int = Field(0, ge=0, description="0: the per-row work runs in the stage's process; N: on Ray Data "
                                                   "with N concurrent tasks (the cluster at $RAY_ADDRESS, else a "
                                                   "local Ray); the dedup decisions stay in the stage's process, "
                                                   "so the output is the same")

    @field_validator("harm_filter")
    @classmethod
    def _known_filter(cls, v: str) -> str:
        from stages.data_filter.harm import HARM_FILTERS
        HARM_FILTERS.lookup(v)
        return v
