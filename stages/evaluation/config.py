from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from compass.config import StrictModel


class EvalConfig(StrictModel):
    """Sample each eval prompt, score it with the gym, report accuracy per suite."""
    seed: int = 0
    samples_per_prompt: int = Field(1, ge=1)
    max_new_tokens: int = Field(64, ge=1)
    temperature: float = Field(0.0, ge=0, description="0 = greedy")
    batch_size: int = Field(128, ge=1, description="prompts per generate call (on CPU the per-step "
                                                   "overhead dominates: big batches pay)")
    report_examples: int = Field(2, ge=0, description="example responses per suite shown in report.md")
    backend: Literal["auto", "native", "hf", "vllm"] = Field(
        "auto", description="generation: the RL engine's rollout backend (native: its KV-cache decoder; hf: "
                            "transformers generate; vllm: the vLLM worker); auto: native where it supports the model")
    workers: int = Field(0, ge=0, description="0: generate in the stage's process; N: N Ray actors each run the "
                                              "backend on a copy of the checkpoint and a share of the prompts "
                                              "(compass.rl.rollout_ray), as rollout does")

    @model_validator(mode="after")
    def _greedy_is_one_sample(self):
        if self.temperature == 0 and self.samples_per_prompt > 1:
            raise ValueError("samples_per_prompt > 1 needs temperature > 0 (greedy samples are all the same)")
        return self
