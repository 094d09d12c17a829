from __future__ import annotations

from pydantic import Field

from stages.common.config import StrictModel


class DataFilterConfig(StrictModel):
    """Dedup, decontamination against the eval suites, quality filters, routing."""
    decontam_ngram: int = Field(13, ge=1, description="word n-gram length for decontamination; an eval prompt "
                                                       "shorter than this is matched as a whole")
    decontam_max_hits: int = Field(10, ge=1, description="an eval n-gram found in more candidate rows than this "
                                                         "is template text, not a leak, and is ignored")
    check_answers: bool = Field(True, description="quarantine teacher responses whose final answer does not "
                                                  "verify against the reference, when one is known")
    require_reference: bool = Field(True, description="quarantine RL prompts without a reference (unverifiable)")
