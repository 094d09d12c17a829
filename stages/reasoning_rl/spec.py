"""Contract of the reasoning_rl stage: its slots and config. Light to import: the body
(stages/reasoning_rl/stage.py) is loaded only when the stage really runs."""
from __future__ import annotations

from compass.runtime.runner import StageSpec, execute
from stages.reasoning_rl.config import ReasoningRLConfig

SPEC = StageSpec(name="reasoning_rl", config=ReasoningRLConfig,
                 inputs={"policy": "checkpoint", "prompts": "prompts"},
                 outputs={"checkpoint": "checkpoint", "prompt_stats": "prompt_stats", "rollouts": "rollouts"},
                 body="stages.reasoning_rl.stage:_body")


def run(config: ReasoningRLConfig, inputs: dict, store, **kw):
    """Run the stage (or reuse its stored outputs); see compass.runtime.runner.execute."""
    return execute(SPEC, config, inputs, store, **kw)
