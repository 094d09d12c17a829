"""The `compass` command: the pipeline, single stages, artifacts, the gym, imports and benchmarks."""
from compass.cli.main import main

__all__ = ["main"]
