"""A process that imports compass and then builds a transformers model never imports scikit-learn (1.5-2 s of CPU
saved per stage, Ray worker and rank), scikit-learn itself still imports, and the opt-out leaves transformers as
it is."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, sys
import compass
from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
tok = build_tokenizer("")
model = build_model(ModelConfig(), tok, seed=0)
from transformers.generation import candidate_generator
before = "sklearn" in sys.modules
import sklearn.metrics                      # lm-eval's metrics still have it
print(json.dumps({"sklearn_before": before, "flag": candidate_generator.is_sklearn_available(),
                  "roc_curve": callable(sklearn.metrics.roc_curve)}))
"""


def _probe(**env) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("opt_out", [False, True])
def test_building_a_model_does_not_import_sklearn_unless_opted_out(opt_out):
    env = {"COMPASS_TRANSFORMERS_SKLEARN": "1"} if opt_out else {"COMPASS_TRANSFORMERS_SKLEARN": "0"}
    got = _probe(**env)
    assert got == {"sklearn_before": opt_out, "flag": opt_out, "roc_curve": True}
