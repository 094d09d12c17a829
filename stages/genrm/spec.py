"""Contract of the genrm stage: its slots and config. Light to import: the body
(stages/genrm/stage.py) is loaded only when the stage really runs."""
from __future__ import annotations

from compass.runtime.runner import StageSpec, execute
from stages.genrm.config import GenRMConfig

SPEC = StageSpec(name="genrm", config=GenRMConfig, inputs={"base": "checkpoint", "pairs": "preference_pairs"},
                 outputs={"checkpoint": "checkpoint", "judgements": "judgements", "quarantine": "quarantine"},
                 body="stages.genrm.stage:_body")


def run(config: GenRMConfig, inputs: dict, store, **kw):
    """Run the stage (or reuse its stored outputs); see compass.runtime.runner.execute."""
    return execute(SPEC, config, inputs, store, **kw)
