"""Contract of the world stage: its slots and config. Light to import: the body
(stages/world/stage.py) is loaded only when the stage really runs."""
from __future__ import annotations

from compass.runtime.runner import StageSpec, execute
from stages.world.config import WorldConfig

SPEC = StageSpec(
    name="world", config=WorldConfig, inputs={},
    outputs={"raw_sft": "sft_samples", "raw_prompts": "prompts", "preferences": "preference_pairs",
             "eval_prompts": "prompts", "base": "checkpoint"},
    body="stages.world.stage:_body")


def run(config: WorldConfig, inputs: dict, store, **kw):
    """Run the stage (or reuse its stored outputs); see compass.runtime.runner.execute."""
    return execute(SPEC, config, inputs, store, **kw)
