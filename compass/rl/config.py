"""Settings of the RL engine that both RL stages configure (kept light: no torch here).

The defaults are the tiny values that run each RL stage in a few seconds on
2 CPU cores with the embedded tiny model; cluster settings are larger.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from compass.config import StrictModel


class RLConfig(StrictModel):
    """Settings of the RL engine shared by both RL stages."""
    seed: int = 0
    steps: int = Field(4, ge=1, description="policy updates (one rollout batch each)")
    prompts_per_step: int = Field(8, ge=1, description="GRPO groups per step")
    group_size: int = Field(4, ge=2, description="completions sampled per prompt (N)")
    max_new_tokens: int = Field(48, ge=1)
    temperature: float = Field(1.0, gt=0, description="sampling temperature; log-probs use the same")
    lr: float = Field(5e-5, gt=0, description="AdamW learning rate (docs/architecture.md §5: above ~1e-4 collapsed)")
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0, description="clip the global gradient norm to this")
    advantage: str = Field("grpo", description="advantage estimator, a name in compass.rl.advantages.ADVANTAGES")
    advantage_eps: float = Field(1e-6, gt=0, description="added to the group std before dividing")
    policy_loss: str = Field("ppo_clip_token_mean",
                             description="policy loss, a name in compass.rl.losses.POLICY_LOSSES")
    clip_eps: float = Field(0.2, gt=0, lt=1, description="PPO clip range: ratio kept in [1-eps, 1+eps]")
    pass_threshold: float = Field(0.5, ge=0, lt=1,
                                  description="a sample passes when its reward is above this (binary rewards: ==1)")
    espo_alpha: float = Field(2.0, gt=0, description="ESPO eq. (3): clip ε_τ = alpha · mean entropy of the group / "
                                                     "log|V|")
    espo_groups: int = Field(2, ge=1, description="ESPO: entropy groups per sequence (equal-count bins by entropy)")
    reward_workers: int = Field(0, ge=0, description="0: score in the trainer's process; N: stream samples to "
                                                     "the gym's reward service with N worker processes")
    reward_timeout_s: float = Field(30.0, gt=0, description="reward service: a sample scoring longer gets 0")
    mini_batches: int = Field(1, ge=1, description="optimizer steps per rollout batch: the batch is split into this "
                                                   "many mini-batches, updated one after another (PPO style). With 1 "
                                                   "the ratio is 1 and no clip acts; >1 lets PPO/DAPO/ESPO clipping "
                                                   "bound the later steps")
    clip_eps_high: float | None = Field(None, gt=0, lt=1, description="DAPO clip-higher: upper clip range "
                                                                       "(default: clip_eps)")
    zvp_alpha: float = Field(0.1, gt=0, description="RL-ZVP eq. 5: scale of the entropy-shaped advantage on "
                                                    "zero-variance groups")
    rollout_backend: Literal["auto", "native", "hf", "vllm"] = Field(
        "auto", description="rollout backend: native (our KV-cache decoder for Qwen3/Qwen3-MoE), hf (transformers "
                            "generate), vllm; auto = native where the model is supported, else hf")
    rollout_dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="rollout precision: float32 shares the trainer's weights; "
                                                      "bfloat16 is a synced copy (the train-inference split)")
    rollout_workers: int = Field(0, ge=0, description="0: the rollout runs in the controller's process; N: N Ray "
                                                      "actors each run the rollout backend on a share of the prompts "
                                                      "(compass.rl.rollout_ray)")
    trainer_actor: bool = Field(False, description="run the trainer backend in a Ray actor (compass.rl.trainer_ray)")
    trainer_backend: Literal["torch", "megatron"] = Field("torch", description="trainer backend: torch or megatron")
    router_replay: bool = Field(False, description="record MoE routes at rollout and replay them in the "
                                                   "old-log-prob recompute and the update")
    drop_zero_variance: bool = Field(False, description="leave zero-variance groups (all advantages 0) out of "
                                                        "the update batch: no compute on no signal")
    dynamic_sampling: bool = Field(False, description="DAPO dynamic sampling: re-sample prompts until the batch "
                                                      "holds prompts_per_step groups with reward spread")
    dynamic_sampling_max_rounds: int = Field(4, ge=1, description="DAPO: most generation rounds per step")
    retire_solved: bool = Field(False, description="stop sampling a prompt once every sample of a group of it got "
                                                    "full marks (reward 1)")
    pass_rate_filter: tuple[float, float] | None = Field(
        None, description="before RL, drop prompts whose graded pass rate is <= lo or >= hi (ungraded stay)")
    rollout_token_budget: int = Field(0, ge=0, description="stop once this many tokens were generated "
                                                           "(0: run all steps); equal-budget comparisons")
    checkpoint_every: int = Field(5, ge=0, description="save the RL state for resume every K steps (0: never); "
                                                      "an RL stage re-run after a kill resumes from it")

    @field_validator("advantage")
    @classmethod
    def _known_advantage(cls, v: str) -> str:
        from compass.rl.advantages import ADVANTAGES
        ADVANTAGES.lookup(v)
        return v

    @field_validator("policy_loss")
    @classmethod
    def _known_loss(cls, v: str) -> str:
        from compass.rl.losses import POLICY_LOSSES
        POLICY_LOSSES.lookup(v)
        return v

    def advantage_options(self) -> dict:
        """The configured estimator's own settings, as keywords of its function (compass.rl.advantages)."""
        return {"grpo": {"eps": self.advantage_eps}, "dr_grpo": {},
                "rl_zvp": {"eps": self.advantage_eps, "alpha": self.zvp_alpha}}.get(self.advantage, {})

    def loss_options(self) -> dict:
        """The configured loss's own settings, as keywords of its function (compass.rl.losses)."""
        if self.policy_loss == "espo":
            return {"alpha": self.espo_alpha, "groups": self.espo_groups}
        return {"clip_eps": self.clip_eps, "clip_eps_high": self.clip_eps_high}
