from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from stages.common.config import StrictModel
from stages.data_filter.grading import GradingConfig


class DataFilterConfig(StrictModel):
    """Dedup, decontamination against the eval suites, harmful-content and quality filters, routing.

    The near-duplicate defaults are tuned on ``compass bench dedup-quality`` (docs/data_filter.md).
    """
    # -- decontamination ---------------------------------------------------------------
    decontam_ngram: int = Field(13, ge=1, description="token n-gram length for decontamination; an eval prompt "
                                                       "shorter than this is matched as a whole")
    decontam_max_hits: int = Field(10, ge=1, description="an n-gram found in more eval prompts than this is "
                                                         "template text, not a leak, and is ignored")
    decontam_template_share: float = Field(0.2, gt=0, le=1,
                                           description="an n-gram found in at least this share of one eval "
                                                       "suite's prompts (and in two or more) is that suite's "
                                                       "template text and is ignored")
    decontam_min_tokens: int = Field(5, ge=1, description="eval prompts with fewer tokens are too generic to "
                                                          "match ('Hi', '2 + 2') and are skipped")
    # -- duplicates ----------------------------------------------------------------------
    near_dedup: bool = Field(True, description="remove near-duplicates (MinHash LSH); exact ones always go")
    near_dup_threshold: float = Field(0.42, gt=0, le=1,
                                      description="Jaccard similarity of token shingles at or above which a row "
                                                  "is a near-duplicate of an earlier kept row")
    shingle_size: int = Field(3, ge=1, description="tokens per shingle")
    minhash_num_perm: int = Field(256, ge=8, description="MinHash permutations (signature length)")
    minhash_bands: int = Field(64, ge=1, description="LSH bands; rows per band = num_perm // bands")
    near_dup_min_tokens: int = Field(32, ge=1, description="shorter texts are checked for exact duplicates only "
                                                           "(few shingles: one changed number moves Jaccard a lot)")
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

    @field_validator("harm_filter")
    @classmethod
    def _known_filter(cls, v: str) -> str:
        from stages.data_filter.harm import HARM_FILTERS
        HARM_FILTERS.lookup(v)
        return v

    @model_validator(mode="after")
    def _bands_fit(self):
        if self.minhash_bands > self.minhash_num_perm:
            raise ValueError(f"minhash_bands ({self.minhash_bands}) cannot exceed minhash_num_perm "
                             f"({self.minhash_num_perm})")
        return self
