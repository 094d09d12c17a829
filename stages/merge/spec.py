"""Contract of the merge stage: its slots and config. Light to import: the body
(stages/merge/stage.py) is loaded only when the stage really runs.

``dev`` (optional, prompts): the dev suite a sweep scores its candidates on: prompts the
SFT never saw and distinct from the held-out evaluation suites (the pipeline feeds it
data_filter's ``rl_prompts``). ``sweep`` (merge_sweep): one row per (candidate or parent,
dev domain), plus home and mean rows; empty when the config has no sweep."""
from __future__ import annotations

from compass.runtime.runner import StageSpec, execute
from stages.merge.config import MergeConfig

SPEC = StageSpec(name="merge", config=MergeConfig,
                 inputs={"base": "checkpoint", "thinking": "checkpoint", "domain": "checkpoint", "dev": "prompts"},
                 outputs={"checkpoint": "checkpoint", "sweep": "merge_sweep"}, body="stages.merge.stage:_body", optional_inputs=frozenset({"dev"}))


def run(config: MergeConfig, inputs: dict, store, **kw):
    """Run the stage (or reuse its stored outputs); see compass.runtime.runner.execute."""
    return execute(SPEC, config, inputs, store, **kw)
