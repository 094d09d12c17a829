from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from compass.config import ComputeSettings, StrictModel

# the checkpoints a run made, in recipe order, and what each stage started from (the change it made);
# ``model`` is the one being evaluated (the final one in the pipeline); the others are optional
CHECKPOINTS = {"base": None, "sft_longcot": "base", "sft_domain": "base", "merged": "sft_longcot",
               "phase1": "merged", "model": "phase1"}


def check_checkpoints(key: str, names) -> None:
    """A config error naming ``key`` and the names that are not checkpoints a run makes."""
    unknown = sorted(set(names or ()) - set(CHECKPOINTS))
    if unknown:
        raise ValueError(f"{key}: unknown {unknown}; known {list(CHECKPOINTS)}")


class LmEvalConfig(StrictModel):
    """lm-evaluation-harness tasks run on the checkpoints, their numbers stored beside the gym's
    (``compass.lm.lm_eval_adapter``)."""
    tasks: list[str] = Field(min_length=1, description="lm-eval task names, or those of the YAMLs in include_path")
    include_path: str | None = Field(None, description="a folder of lm-eval task YAMLs (e.g. a local "
                                                       "dataset_path: json with data_files: runs offline)")
    include_digest: str | None = Field(None, description="set from include_path's files on every validation: a "
                                                         "changed task YAML is a new stage version")
    checkpoints: list[str] = Field(["model"], min_length=1,
                                   description="which inputs to run them on: model (the evaluated one), base, "
                                               "sft_longcot, sft_domain, merged, phase1; absent ones are skipped")
    limit: int | None = Field(None, ge=1, description="documents per task (lm-eval's --limit)")
    num_fewshot: int | None = Field(None, ge=0)
    batch_size: int = Field(8, ge=1)

    @model_validator(mode="after")
    def _digest(self):
        from compass.lm.lm_eval_adapter import include_digest
        check_checkpoints("lm_eval.checkpoints", self.checkpoints)
        object.__setattr__(self, "include_digest", include_digest(self.include_path))
        return self


class SampledPass(StrictModel):
    """A second decoding in the same evaluation run: ``k`` samples per prompt at ``temperature``, reported as
    mean@k (and the mean score) beside the main decoding, greedy by default: RL raises the sampled pass rate,
    which greedy accuracy can miss."""
    k: int = Field(4, ge=1, description="samples per prompt")
    temperature: float = Field(1.0, gt=0)
    checkpoints: list[str] | None = Field(None, description="the checkpoints decoded this way (None: every one); "
                                                            "k samples cost about k greedy passes, so a run can "
                                                            "spend them where RL acts (merged, phase1, model)")

    @model_validator(mode="after")
    def _known(self):
        check_checkpoints("sampled.checkpoints", self.checkpoints)
        return self

    def covers(self, slot: str) -> bool:
        return self.checkpoints is None or slot in self.checkpoints


class EvalConfig(ComputeSettings):
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
                                              "(compass.rl.rollout.ray_pool), as rollout does")

    sampled: SampledPass | None = Field(None, description="also k samples per prompt at a temperature, reported as "
                                                          "mean@k beside the main decoding (e.g. {k: 4})")
    lm_eval: LmEvalConfig | None = Field(None, description="also run lm-evaluation-harness tasks (docs/evaluation.md)")
    genrm_judge: bool = Field(True, description="with a genrm input: judge the samples of open-ended prompts "
                                                "(title_rules) and of genrm ones with it, in both orders "
                                                "(stages/evaluation/judged.py)")
    genrm_max_new_tokens: int = Field(96, ge=8, description="the judge's tokens per verdict")
    genrm_batch_size: int = Field(16, ge=1, description="judge prompts per generate call")

    @model_validator(mode="after")
    def _greedy_is_one_sample(self):
        if self.temperature == 0 and self.samples_per_prompt > 1:
            raise ValueError("samples_per_prompt > 1 needs temperature > 0 (greedy samples are all the same)")
        return self
