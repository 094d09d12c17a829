"""Contract of the sft stage: its slots and config. Light to import: the body
(stages/sft/stage.py) is loaded only when the stage really runs."""
from __future__ import annotations

from compass.runtime.runner import StageSpec, execute
from stages.sft.config import SFTConfig

SPEC = StageSpec(name="sft", config=SFTConfig,
                 inputs={"base": "checkpoint", "data": "sft_samples", "eval": "prompts", "replay": "sft_samples"},
                 optional_inputs=frozenset({"eval", "replay"}),
                 outputs={"checkpoint": "checkpoint"}, body="stages.sft.stage:_body")


def run(config: SFTConfig, inputs: dict, store, **kw):
    """Run the stage (or reuse its stored outputs); see compass.runtime.runner.execute."""
    return execute(SPEC, config, inputs, store, **kw)
