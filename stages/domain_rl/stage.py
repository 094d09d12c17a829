"""Domain RL (phase 2): GRPO on the domain prompts plus the hard phase-1 carryover.

PROVISIONAL minimal version: reads the phase-1 policy, the graded
``rl_prompts``, phase 1's ``prompt_stats`` (carryover) and the GenRM
checkpoint. It trains on every non-reasoning prompt (see
``stages.rl.data.is_reasoning_prompt``) plus the phase-1 prompts whose
measured pass rate lies in the configured band (medium-to-high difficulty,
``stages.domain_rl.carryover``), with the same single-process GRPO loop as
phase 1, and writes the final checkpoint (with ``metrics.jsonl``), the
per-prompt ``prompt_stats`` and every rollout; how many prompts were carried
over is recorded in each manifest's ``extra`` (counts) and in the
checkpoint's ``carryover.json`` (ids). The GenRM checkpoint is
accepted and recorded (its URI goes into ``extra`` and ``compass.json``) but
not used yet: the full version uses it to judge open-ended prompts (A/B/TIE
against a reference), and adds tool-use/QA/extraction rewards and everything
the full RL engine brings (RL-ZVP, ESPO, Router Replay, Ray/vLLM/Megatron).
"""
from __future__ import annotations

import json
import logging

from stages.domain_rl.carryover import select_carryover
from stages.domain_rl.config import DomainRLConfig
from stages.rl.data import is_reasoning_prompt, prompts_from_table
from stages.rl.stage_io import run_rl

PROVISIONAL = True
log = logging.getLogger("compass.domain_rl")


def _body(config: DomainRLConfig, inputs, outputs) -> None:
    table = inputs["prompts"].read_table()
    all_prompts = prompts_from_table(table)
    by_id = {p.id: p for p in all_prompts}
    domain = [p for p in all_prompts if not is_reasoning_prompt(p)]

    stats = inputs["carryover"].read_table()
    carry_ids = select_carryover(stats, min_pass_rate=config.carryover_min_pass_rate,
                                 max_pass_rate=config.carryover_max_pass_rate,
                                 min_samples=config.carryover_min_samples)
    domain_ids = {p.id for p in domain}
    missing = [i for i in carry_ids if i not in by_id]
    if missing:
        log.warning("domain_rl: %d carryover prompt(s) are not in %s and are skipped (e.g. %s)",
                    len(missing), inputs["prompts"].uri, missing[:3])
    carried = [by_id[i] for i in carry_ids if i in by_id and i not in domain_ids]
    log.info("domain_rl: %d domain prompts + %d carryover (of %d measured in phase 1, pass rate in [%.2f, %.2f])",
             len(domain), len(carried), stats.num_rows, config.carryover_min_pass_rate,
             config.carryover_max_pass_rate)
    prompts = domain + carried
    if not prompts:
        raise ValueError(f"domain_rl: no domain prompts in {inputs['prompts'].uri} and no carryover kept")
    genrm = inputs["genrm"]
    extra = {"domain_prompts": len(domain), "carryover_measured": stats.num_rows,
             "carryover_kept": len(carried), "carryover_missing": len(missing),
             "genrm": genrm.uri, "genrm_used": False}
    with open(outputs["checkpoint"].path("carryover.json"), "w") as f:
        json.dump({"kept": [p.id for p in carried], "missing": missing,
                   "min_pass_rate": config.carryover_min_pass_rate,
                   "max_pass_rate": config.carryover_max_pass_rate,
                   "min_samples": config.carryover_min_samples}, f, indent=2)
    run_rl(config, inputs["policy"], prompts, outputs, log=log, desc="domain_rl", extra=extra)


from stages.domain_rl.spec import SPEC, run  # noqa: E402,F401  (the stage's public contract)
