"""Contract of the merge stage: its slots and config. Light to import: the body
(stages/merge/stage.py) is loaded only when the stage really runs."""
from __future__ import annotations

from stages.common.runner import StageSpec, execute
from stages.merge.config import MergeConfig

SPEC = StageSpec(name="merge", config=MergeConfig,
                 inputs={"base": "checkpoint", "thinking": "checkpoint", "domain": "checkpoint"},
                 outputs={"checkpoint": "checkpoint"}, body="stages.merge.stage:_body", libraries=("common",))


def run(config: MergeConfig, inputs: dict, store, **kw):
    """Run the stage (or reuse its stored outputs); see stages.common.runner.execute."""
    return execute(SPEC, config, inputs, store, **kw)
