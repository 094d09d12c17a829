"""configs/cluster/paper.yaml: the paper's RL setup (Each Prompt Matters, Fig. 5 and §2.4) validates through the
real PipelineConfig and says what the paper says."""
from __future__ import annotations

from compass.dag.pipeline_yaml import load_pipeline_config
from tests.deploy.deploy_files import PAPER_CONFIG


def _config():
    """Loaded as `compass run --config` and `compass stage --config` load it, validated by PipelineConfig."""
    return load_pipeline_config(PAPER_CONFIG)[0]


def test_validates_through_the_pipeline_config():
    cfg, base = load_pipeline_config(PAPER_CONFIG)
    assert type(cfg).__name__ == "PipelineConfig" and cfg.store.startswith("s3://")
    assert "no base file" in base         # not laid on the tiny world's sizes


def test_both_rl_phases_have_the_papers_setup():
    cfg = _config()
    for phase in (cfg.reasoning_rl, cfg.domain_rl):
        assert phase.sampling.prompts_per_step == 512          # Fig. 5: batch size 512
        assert phase.sampling.group_size == 8                  # Fig. 5: n = 8
        assert phase.sampling.auto_group_size is None          # ...fixed, not re-chosen
        assert phase.rollout.max_new_tokens == 32 * 1024       # Fig. 5: output length 32k
        assert phase.rollout.backend.kind == "vllm" and phase.trainer.backend.kind == "megatron"   # §2.4.4
        assert phase.trainer.router_replay                     # §2.4.4
        assert phase.advantage.kind == "rl_zvp"                # §2.4.1
        assert phase.loss.kind == "espo"                       # §2.4.2
        assert phase.sampling.prefilter is not None            # §2.4.1, zero-variance elimination before rollout
    assert cfg.domain_rl.genrm_reward                          # §2.5.3
    assert cfg.merge.method == "ties"                          # §2.3
