from pydantic import Field, model_validator

from compass.rl.config import RLConfig


class DomainRLConfig(RLConfig):
    """Phase 2 of RL: the engine's settings on the domain prompts plus the phase-1 carryover.

    Carryover keeps the phase-1 prompts of medium-to-high measured difficulty
    (difficulty = 1 - pass rate, as measured by reasoning RL's prompt_stats):
    those whose pass rate p satisfies
    ``carryover_min_pass_rate <= p <= carryover_max_pass_rate``.
    The upper bound drops what the policy already solves; the lower bound
    (default 0: keep even the never-solved, i.e. hardest) can be raised to
    drop all-fail prompts too.
    """
    carryover_max_pass_rate: float = Field(
        0.8, ge=0, le=1, description="carry phase-1 prompts solved at most this often "
                                     "(difficulty >= 1 - this): drops the easy ones")
    carryover_min_pass_rate: float = Field(
        0.0, ge=0, le=1, description="...and at least this often; 0 keeps the never-solved ones")
    carryover_min_samples: int = Field(
        1, ge=1, description="trust a measured pass rate only when it rests on this many samples")
    carryover_ratio: float | None = Field(
        None, ge=0, lt=1, description="share of the phase's prompts that are carryover: when more phase-1 "
                                      "prompts are in the band, a seeded sample of them; None: all of them")
    genrm_reward: bool = Field(
        True, description="judge open-ended prompts (verifier title_rules) with the GenRM checkpoint: A or TIE "
                          "against the reference -> 1, B -> 0 (paper §2.5.3); false: their rules verifier")
    genrm_max_new_tokens: int = Field(192, ge=8, description="the judge's tokens per verdict")
    genrm_swap_check: bool = Field(False, description="ask the judge in both orders; reward 1 only if both agree")

    @model_validator(mode="after")
    def _band(self):
        if self.carryover_min_pass_rate > self.carryover_max_pass_rate:
            raise ValueError(f"carryover_min_pass_rate ({self.carryover_min_pass_rate}) is above "
                             f"carryover_max_pass_rate ({self.carryover_max_pass_rate}): no prompt could be kept")
        return self
