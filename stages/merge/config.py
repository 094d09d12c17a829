import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from compass.config import DEVICE_PATTERN, StrictModel

Method = Literal["ties", "task_arithmetic", "dare_ties"]


class SweepConfig(StrictModel):
    """Merge several candidates, score each (and both parents) on a dev suite, keep the best.

    Candidates: every method x thinking weight x domain weight (x density for ties /
    dare_ties); without ``domain_weights`` the domain weight of a candidate is 1 - its
    thinking weight (one candidate per thinking weight). The kept candidate maximises the
    smallest margin to a parent (its mean dev score on a parent's home domains minus that
    parent's own there); ties go to the higher mean of the two home scores, then to the
    earlier candidate.
    """
    methods: list[Method] = Field(default_factory=lambda: ["ties", "task_arithmetic", "dare_ties"], min_length=1)
    thinking_weights: list[float] = Field(default_factory=lambda: [0.3, 0.5, 0.7, 0.9], min_length=1,
                                          description="Long-CoT model weights tried: each in (0, 1) when "
                                                      "domain_weights is None (the domain model gets 1 - w), "
                                                      "else each > 0")
    domain_weights: list[float] | None = Field(None, description="domain model weights tried with every thinking "
                                                                 "weight (each > 0; the weights need not sum to 1: "
                                                                 "task arithmetic (1, 1) adds both task vectors); "
                                                                 "None = 1 - w")
    densities: list[float] | None = Field(None, description="densities tried for ties / dare_ties; "
                                                            "None = [merge.density]")
    dev_per_suite: int = Field(16, ge=1, description="dev prompts drawn per task (seeded) from the dev table")
    max_new_tokens: int = Field(64, ge=1, description="greedy tokens per dev answer")
    batch_size: int = Field(64, ge=1, description="prompts per generate call")
    thinking_domains: list[str] = Field(default_factory=lambda: ["math", "code", "tool"], min_length=1,
                                        description="the Long-CoT parent's home domains (prompt table 'domain')")
    domain_domains: list[str] = Field(default_factory=lambda: ["ecommerce", "general", "instruction"],
                                      min_length=1, description="the domain parent's home domains")
    seed: int = Field(0, description="seed of the dev draw")

    @field_validator("thinking_weights", "domain_weights")
    @classmethod
    def _weights(cls, v, info):
        if v is None:
            return v
        what = info.field_name.replace("_", " ")
        if not v:
            raise ValueError(f"{what} must be a non-empty list (or null for 1 - w)")
        bad = [w for w in v if not (0 < w <= 10 and math.isfinite(w))]
        if bad:
            raise ValueError(f"{what} must be > 0 (and at most 10): {bad}")
        if len(set(v)) != len(v):
            raise ValueError(f"{what} repeat: {v}")
        return v

    @model_validator(mode="after")
    def _complement(self):
        if self.domain_weights is None:
            bad = [w for w in self.thinking_weights if not 0 < w < 1]
            if bad:
                raise ValueError(f"thinking weights must lie strictly between 0 and 1 when domain_weights is null "
                                 f"(the domain model gets 1 - w): {bad}")
        return self

    @field_validator("densities")
    @classmethod
    def _densities(cls, v):
        if v is not None:
            if not v or any(not 0 < d <= 1 for d in v):
                raise ValueError(f"densities must be a non-empty list of values in (0, 1]: {v}")
            if len(set(v)) != len(v):
                raise ValueError(f"densities repeat: {v}")
        return v

    @field_validator("methods")
    @classmethod
    def _methods(cls, v):
        if len(set(v)) != len(v):
            raise ValueError(f"methods repeat: {v}")
        return v

    @model_validator(mode="after")
    def _homes_disjoint(self):
        both = sorted(set(self.thinking_domains) & set(self.domain_domains))
        if both:
            raise ValueError(f"a domain cannot be home to both parents: {both}")
        return self


class MergeConfig(StrictModel):
    """mergekit merge of the thinking and domain SFT checkpoints onto their common base.

    Without ``sweep``: one merge with the fields below. With ``sweep``: the candidates it
    lists are merged and scored on the ``dev`` input, and the best is kept (``method``,
    ``thinking_weight`` and ``domain_weight`` are then unused; ``density`` is the density
    when ``sweep.densities`` is None; ``normalize``, ``dtype`` and ``seed`` apply to all).
    """
    method: Method = "ties"
    device: str = Field("auto", pattern=DEVICE_PATTERN, description="where mergekit merges and the sweep scores: "
                                                                    "auto (the GPU when torch sees one), cpu, "
                                                                    "cuda or cuda:N")
    density: float = Field(0.7, gt=0, le=1, description="share of each task vector kept (ties, dare_ties)")
    thinking_weight: float = Field(0.7, ge=0)
    domain_weight: float = Field(0.3, ge=0)
    normalize: bool | None = Field(None, description="divide by the sum of weights; None = mergekit's default "
                                                     "for the method (ties: yes, task_arithmetic/dare_ties: no)")
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    seed: int = Field(0, description="random seed (dare_ties drops at random)")
    sweep: SweepConfig | None = Field(None, description="merge several candidates, score them on the dev input "
                                                        "and keep the best; None = one merge, no scoring")

    @model_validator(mode="after")
    def _some_weight(self):
        if self.thinking_weight + self.domain_weight <= 0:
            raise ValueError("thinking_weight + domain_weight must be > 0 (both 0 would return the base)")
        return self
