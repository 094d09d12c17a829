from pydantic import Field

from compass.config import ComputeSettings, RankSettings, StrictModel
from compass.rl.config import RLConfig


def _grpo_default() -> RLConfig:
    return RLConfig(steps=4, checkpoint_every=1, sampling={"prompts_per_step": 8, "group_size": 4},
                    rollout={"max_new_tokens": 96}, trainer={"lr": 1e-4})


class BradleyTerryConfig(StrictModel):
    """The scalar-reward baseline trained on the same training pairs (stages/genrm/bradley_terry.py)."""
    steps: int = Field(60, ge=0, description="AdamW steps of the BT loss on non-tie pairs (0: no baseline)")
    batch_size: int = Field(8, ge=1, description="pairs per step")
    lr: float = Field(1e-3, gt=0)


class GenRMConfig(ComputeSettings, RankSettings):
    """Generative reward model: a warm start on programmatic rationales, then GRPO on verdict correctness
    (paper §2.5.2), judged on held-out pairs beside a Bradley–Terry baseline. ``ranks`` > 1: the warm start on
    that many data-parallel ranks on Ray (FSDP2, compass.lm.sft.worker); the GRPO step's ranks are
    ``grpo.trainer.backend`` (kind fsdp or megatron)."""
    seed: int = 0
    holdout_fraction: float = Field(0.2, ge=0, lt=1, description="share of pairs held out (by a hash of the id)")
    # warm start (SFT on structured judgements)
    steps: int = Field(60, ge=0, description="warm-start SFT optimizer steps (0: no warm start)")
    batch_size: int = Field(8, ge=1, description="warm-start batch size")
    lr: float = Field(1e-3, gt=0, description="warm-start learning rate")
    warmup_steps: int = Field(3, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    max_len: int = Field(512, ge=16, description="pairs whose judge input + max_new_tokens is longer are skipped "
                                                 "and counted")
    swap_augment: bool = Field(True, description="also train on each pair with A and B swapped (label swapped)")
    reference_pairs: bool = Field(True, description="also train on one teacher-made pair per training pair: a "
                                                    "response against the bare reference answer (TIE when their "
                                                    "final answers agree; stages/genrm/warm_start.reference_pair)")
    packing: bool = Field(True, description="pack the warm start's sequences (compass.lm.sft.packing)")
    min_lr_ratio: float = Field(1.0, gt=0, le=1, description="warm start: cosine decay to lr x this (1: constant)")
    log_every: int = Field(20, ge=1)
    # GRPO (the RL engine; reward = 1[verdict == label])
    grpo: RLConfig = Field(default_factory=_grpo_default, description="the RL engine's settings for the GRPO "
                                                                       "step (steps 0 is not allowed; see docs)")
    format_reward: float = Field(0.0, ge=0, le=1, description="weight w of the format term: reward = (1-w) "
                                                              "1[verdict == label] + w 1[format ok]")
    bt: BradleyTerryConfig = BradleyTerryConfig()
    # evaluation
    eval_pairs: int = Field(64, ge=0, description="held-out pairs judged (both orders); 0: all")
    max_new_tokens: int = Field(96, ge=3, description="generation budget of a judgement at evaluation")
    flip_examples: int = Field(3, ge=0, description="advantage-flipping cases written to summary.md")
