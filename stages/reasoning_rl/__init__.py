"""The reasoning_rl stage (RL phase 1): the RL engine on the math and code prompts; writes per-prompt
pass rates for phase 2. See stage.py and docs/rl.md."""

