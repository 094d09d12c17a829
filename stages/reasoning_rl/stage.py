"""Reasoning RL (phase 1): GRPO on the reasoning prompts, measuring every prompt as it goes.

PROVISIONAL minimal version: reads the thinking-base policy and the graded
``rl_prompts``, keeps the reasoning rows (domain ``math`` or verifier
``math_exact``), runs the single-process GRPO loop of ``stages.rl.engine``
(transformers ``generate`` rollouts, Compass-Gym rewards, group-normalised
advantages, one token-mean PPO-clip AdamW step per batch) and writes the
trained checkpoint (with ``metrics.jsonl``), the per-prompt ``prompt_stats``
that phase 2's carryover filter reads, and every rollout. The full version
adds code and instruction-following suites, pre-rollout zero-variance
filtering by measured pass rate, group-size selection, RL-ZVP, ESPO, Router
Replay and the Ray/vLLM/Megatron engine with trainer state for resume.
"""
from __future__ import annotations

import logging

from stages.reasoning_rl.config import ReasoningRLConfig
from stages.rl.data import is_reasoning_prompt, prompts_from_table
from stages.rl.stage_io import run_rl

PROVISIONAL = True
log = logging.getLogger("compass.reasoning_rl")


def _body(config: ReasoningRLConfig, inputs, outputs) -> None:
    table = inputs["prompts"].read_table()
    prompts = [p for p in prompts_from_table(table) if is_reasoning_prompt(p)]
    if not prompts:
        raise ValueError(f"reasoning_rl: {inputs['prompts'].uri} has no reasoning prompts "
                         f"(domain math or code, or verifier math_exact or code) among {table.num_rows} rows")
    run_rl(config, inputs["policy"], prompts, outputs, log=log, desc="reasoning_rl",
           extra={"prompts_available": len(prompts), "prompts_table_rows": table.num_rows})


from stages.reasoning_rl.spec import SPEC, run  # noqa: E402,F401  (the stage's public contract)
