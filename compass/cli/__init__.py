"""The `compass` command: the pipeline, single stages, artifacts, the gym, imports and benchmarks
(entry point ``compass.cli.main:main``)."""
