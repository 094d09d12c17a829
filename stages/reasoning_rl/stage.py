"""Reasoning RL (phase 1): the RL engine on the reasoning prompts, measuring every prompt as it goes.

Reads the merged policy (``policy``; ``thinking_base`` in the pipeline) and the graded
``rl_prompts``, keeps the reasoning rows (domain ``math`` or ``code``, or verifier ``math_exact``
or ``code``: ``compass.rl.sampling.prompt_data.is_reasoning_prompt``) and trains on them with the RL engine
through ``compass.rl.stage_io.run_rl`` (docs/rl.md). The engine does what the config asks:
zero-variance elimination before RL (``sampling.pool``: a draw of the prompts graded by this policy, those it
always or never solves dropped; ``sampling.pass_rate_filter``: by a pass rate the table carries),
rollouts with the ``native``, ``hf`` or ``vllm`` backend, Compass-Gym rewards (in process or
through the reward service), GRPO / Dr. GRPO / RL-ZVP advantages, PPO-clip (with clip-higher) /
GSPO / ESPO losses, DAPO dynamic sampling, Router Replay, a ``torch`` or ``megatron`` trainer,
optionally as Ray actors, and the whole RL state saved every ``checkpoint_every`` steps so a
killed run resumes exactly. Outputs: the trained checkpoint (with ``metrics.jsonl``, TensorBoard
events and PNG plots), the per-prompt ``prompt_stats`` that phase 2's carryover reads, and
every rollout (``rollouts``); the run summary goes in each manifest's ``extra``.
"""
from __future__ import annotations

import logging

from stages.reasoning_rl.config import ReasoningRLConfig
from compass.rl.sampling.prompt_data import is_reasoning_prompt, prompts_from_table
from compass.rl.stage_io import run_rl

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
