from typing import Literal

from pydantic import Field, model_validator

from compass.config import ComputeSettings, MegatronParallelSettings, RankSettings


class SFTConfig(ComputeSettings, MegatronParallelSettings, RankSettings):
    """Supervised fine-tuning on (prompt, response) pairs; defaults are small, fast values for tests. ``ranks`` > 1:
    that many ranks on Ray: the torch backend data-parallel, sharded with FSDP2 (compass.lm.sft.worker); the
    megatron backend with megatron's tensor, pipeline, expert and data parallelism (compass.lm.sft.megatron_ranks)."""
    seed: int = 0
    backend: Literal["torch", "megatron"] = Field("torch", description="trainer: torch (the HF model) or megatron "
                                                  "(a megatron-core GPTModel converted from it, as the RL engine's "
                                                  "megatron trainer; Qwen3-MoE only)")
    steps: int = Field(150, ge=1, description="optimizer steps (~5 s on 2 cores with the tiny model)")
    batch_size: int = Field(16, ge=1, description="samples per micro-batch (with packing: packed into rows "
                                                  "of at most pack_len tokens)")
    micro_batch_tokens: int | None = Field(None, ge=8, description="run each micro-batch through the model in "
                                                                   "pieces of at most this many (padded) tokens, "
                                                                   "gradients accumulated: the same step, less "
                                                                   "activation memory (None: whole)")
    activation_checkpointing: bool = Field(False, description="torch backend: keep each layer's input only and "
                                                              "recompute the layer in the backward (less "
                                                              "activation memory, one more forward)")
    grad_accum_steps: int = Field(1, ge=1, description="micro-batches per optimizer step: a step sees "
                                                       "grad_accum_steps x batch_size samples, loss = token mean "
                                                       "over all of their supervised tokens")
    lr: float = Field(1e-3, gt=0, description="peak AdamW learning rate")
    warmup_steps: int = Field(4, ge=0, description="linear warmup to lr over this many steps")
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="cosine decay after warmup, to min_lr_ratio x lr "
                                                             "at the last step (1 = constant)")
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0, description="max global gradient norm")
    max_len: int = Field(256, ge=8, description="pairs longer than this (tokens) are skipped, never truncated")
    packing: bool = Field(True, description="pack each micro-batch's samples into rows (no cross-attention "
                                            "between samples); falls back to padded rows for models the "
                                            "native Qwen3 forward does not support")
    pack_len: int | None = Field(None, ge=8, description="tokens per packed row (default: max_len)")
    replay_fraction: float = Field(0.0, ge=0, le=1, description="with a `replay` input (the other parent's SFT "
                                                                "table): a seeded draw of its rows, this share of "
                                                                "the data rows (at most all of them), trained on "
                                                                "with them, so the parent keeps the other home's "
                                                                "skill and the two merge (docs/sft.md)")
    holdout_fraction: float = Field(0.05, ge=0, lt=1, description="share of rows held out by a hash of their "
                                                                  "id (never trained on) for the held-out loss")
    holdout_min_rows: int = Field(4, ge=0, description="hold out at least this many rows (when fraction > 0)")
    eval_every: int = Field(0, ge=0, description="held-out loss every N steps (0: before and after training only)")
    checkpoint_every: int = Field(50, ge=0, description="save trainer state every N steps for resume after a "
                                                        "kill (0: never)")
    log_every: int = Field(25, ge=1, description="log loss, lr and tokens/s every N steps")
    eval_domains: list[str] | None = Field(None, description="with an `eval` input: the `domain` values "
                                                             "scored (None: all)")
    eval_max_new_tokens: int = Field(128, ge=1, description="greedy tokens per eval prompt")
    eval_max_prompts_per_suite: int | None = Field(32, ge=1, description="cap on eval prompts per suite "
                                                                         "(None: all)")
    eval_base: bool = Field(False, description="also score the base checkpoint before training")

    @model_validator(mode="after")
    def _model_parallel_is_megatron(self):
        sizes = {k: getattr(self, k) for k in ("tensor_parallel", "pipeline_parallel", "expert_parallel")}
        set_ = [f"{k}: {v}" for k, v in sizes.items() if v > 1]
        if self.distributed_optimizer:
            set_.append("distributed_optimizer: true")
        if self.backend != "megatron" and set_:
            raise ValueError(f"{', '.join(set_)} needs backend: megatron (the torch backend's ranks are data-parallel, "
                             f"FSDP2, which shards AdamW's state already)")
        return self

    @model_validator(mode="after")
    def _pack_len_fits(self):
        if self.pack_len is not None and self.pack_len < self.max_len:
            raise ValueError(f"pack_len ({self.pack_len}) must be >= max_len ({self.max_len}): every sample "
                             f"that fits max_len must fit a row")
        return self
