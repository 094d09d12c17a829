"""Keep scikit-learn out of every process that loads a transformers model.

transformers' generation utilities import ``sklearn.metrics`` whenever scikit-learn is installed (lm-eval
installs it), for one thing only: assisted decoding's adaptive confidence threshold, which compass never uses.
That import (scikit-learn and SciPy) costs 1.5-2 s of CPU in every process that builds a model: each stage,
each Ray rollout worker and trainer rank, each benchmark run. A hook tells transformers, just before that module
loads, that scikit-learn is absent; scikit-learn itself still imports as usual (lm-eval's metrics use it).
``COMPASS_TRANSFORMERS_SKLEARN=1`` leaves transformers as it is.
"""
from __future__ import annotations

import os
import sys

TARGET = "transformers.generation.candidate_generator"


class _HideSklearnFromTransformers:
    """A meta-path finder that finds nothing: it only acts, once, when ``TARGET`` is about to be imported."""

    def find_spec(self, name, path=None, target=None):
        if name == TARGET:
            utils = sys.modules.get("transformers.utils")     # always loaded before TARGET
            if utils is not None and TARGET not in sys.modules:
                utils.is_sklearn_available = lambda: False
        return None     # (not removed from sys.meta_path here: importlib is iterating over it)


def install() -> None:
    """Add the hook (idempotent); a no-op if transformers' generation utilities are already loaded."""
    if os.environ.get("COMPASS_TRANSFORMERS_SKLEARN") == "1" or TARGET in sys.modules:
        return
    if not any(isinstance(f, _HideSklearnFromTransformers) for f in sys.meta_path):
        sys.meta_path.insert(0, _HideSklearnFromTransformers())
