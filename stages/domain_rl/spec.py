"""Contract of the domain_rl stage: its slots and config. Light to import: the body
(stages/domain_rl/stage.py) is loaded only when the stage really runs."""
from __future__ import annotations

from compass.runtime.runner import StageSpec, execute
from stages.domain_rl.config import DomainRLConfig

SPEC = StageSpec(name="domain_rl", config=DomainRLConfig,
                 inputs={"policy": "checkpoint", "prompts": "prompts", "carryover": "prompt_stats",
                         "genrm": "checkpoint"},
                 outputs={"checkpoint": "checkpoint", "prompt_stats": "prompt_stats", "rollouts": "rollouts"},
                 body="stages.domain_rl.stage:_body")


def run(config: DomainRLConfig, inputs: dict, store, **kw):
    """Run the stage (or reuse its stored outputs); see compass.runtime.runner.execute."""
    return execute(SPEC, config, inputs, store, **kw)
