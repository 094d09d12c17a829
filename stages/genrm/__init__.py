"""The genrm stage: a generative A/B/TIE judge (warm start, then GRPO) beside a Bradley–Terry baseline.
See stage.py and docs/genrm.md."""

