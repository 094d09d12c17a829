"""configs/examples/one-gpu-qwen3.yaml: the one-GPU run from an imported Qwen3 validates through the real
PipelineConfig, laid over the embedded default, and keeps the settings docs/gpu.md promises."""
from __future__ import annotations

from pathlib import Path

from compass.dag.pipeline_yaml import load_pipeline_config

EXAMPLE = Path(__file__).resolve().parents[2] / "configs" / "examples" / "one-gpu-qwen3.yaml"


def test_one_gpu_example_validates_and_puts_every_stage_on_the_gpu():
    cfg, base = load_pipeline_config(EXAMPLE)
    assert "tiny.yaml" in base                                   # laid over the embedded default
    assert cfg.eval_suites == ["math500"]
    for sft in (cfg.sft_longcot, cfg.sft_domain):
        assert (sft.device, sft.precision, sft.activation_checkpointing) == ("auto", "auto", True)
        assert sft.lr <= 1e-5                                    # a pretrained model, not the random init
    assert cfg.data_filter.grading.enabled and cfg.data_filter.grading.train_steps == 0    # the base grades as it is
    for phase in (cfg.reasoning_rl, cfg.domain_rl):                # every GSM8K prompt graded by the policy
        assert phase.sampling.pool.candidates >= 7473 and not phase.sampling.pool.drop_never_solved
    for phase in (cfg.reasoning_rl, cfg.domain_rl, cfg.genrm.grpo):
        backend = phase.rollout.backend
        assert backend.kind == "vllm" and backend.device == "auto" and backend.gpu_memory_utilization <= 0.5
        assert backend.sleep is None and backend.weight_sync == "auto"     # colocated: sleeps, CUDA IPC
        assert phase.rollout.dtype == "auto"                               # bf16 on the GPU
        assert phase.trainer.backend.kind == "torch" and phase.trainer.backend.activation_checkpointing
    assert cfg.reasoning_rl.rollout.backend.max_model_len >= cfg.reasoning_rl.rollout.max_new_tokens
