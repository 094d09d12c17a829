"""The pipeline's stage packages, one per DAG stage, in DAG order (derived from the DAG in
``compass.dag.pipeline``, not kept by hand). A stage imports libraries from ``compass`` and never
another stage: stages talk only through artifacts (tests/test_layering.py enforces it)."""
from compass.dag.stages import STAGES

__all__ = list(STAGES)
