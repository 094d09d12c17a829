"""The world stage: the embedded default world (synthetic suites, preference pairs, eval prompts, tiny
base model) from a seed. See stage.py and docs/world.md."""

