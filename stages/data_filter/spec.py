"""Contract of the data_filter stage: its slots and config. Light to import: the body
(stages/data_filter/stage.py) is loaded only when the stage really runs."""
from __future__ import annotations

from compass.runtime.runner import StageSpec, execute
from stages.data_filter.config import DataFilterConfig

SPEC = StageSpec(
    name="data_filter", config=DataFilterConfig,
    inputs={"sft": "sft_samples", "prompts": "prompts", "eval": "prompts", "base": "checkpoint"},
    optional_inputs=frozenset({"base"}),   # the grader's starting point; without it, prompts stay ungraded
    outputs={"sft_longcot": "sft_samples", "sft_domain": "sft_samples", "rl_prompts": "prompts",
             "quarantine": "quarantine"},
    body="stages.data_filter.stage:_body")  # sft's trainer uses compass.rl's forwards


def run(config: DataFilterConfig, inputs: dict, store, **kw):
    """Run the stage (or reuse its stored outputs); see compass.runtime.runner.execute."""
    return execute(SPEC, config, inputs, store, **kw)
