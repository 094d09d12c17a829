"""Contract of the evaluation stage: its slots and config. Light to import: the body
(stages/evaluation/stage.py) is loaded only when the stage really runs."""
from __future__ import annotations

from compass.runtime.runner import StageSpec, execute
from stages.evaluation.config import CHECKPOINTS, EvalConfig

SPEC = StageSpec(
    name="evaluation", config=EvalConfig,
    # genrm: the run's learned judge, for the open-ended suites (stages/evaluation/judged.py)
    inputs={**dict.fromkeys(CHECKPOINTS, "checkpoint"), "suites": "prompts", "genrm": "checkpoint"},
    outputs={"results": "eval_results", "report": "report"}, body="stages.evaluation.stage:_body",
    optional_inputs=frozenset(set(CHECKPOINTS) - {"model"} | {"genrm"}),
    # more held-out suites beside the run's own: ``suites:gsm8k`` = an imported prompts table (docs/evaluation.md)
    variadic_inputs=frozenset({"suites"}))


def run(config: EvalConfig, inputs: dict, store, **kw):
    """Run the stage (or reuse its stored outputs); see compass.runtime.runner.execute."""
    return execute(SPEC, config, inputs, store, **kw)
