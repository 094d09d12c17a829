"""Settings of the near-duplicate and decontamination rules, shared by the data filter (which
applies them) and the world (which generates data those rules pass at their defaults).

The near-duplicate defaults are tuned on ``compass bench dedup-quality`` (docs/data_filter.md).
"""
from __future__ import annotations

from pydantic import Field, model_validator

from compass.config import StrictModel


class DedupSettings(StrictModel):
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

    @model_validator(mode="after")
    def _bands_fit(self):
        if self.minhash_bands > self.minhash_num_perm:
            raise ValueError(f"minhash_bands ({self.minhash_bands}) cannot exceed minhash_num_perm "
                             f"({self.minhash_num_perm})")
        return self
