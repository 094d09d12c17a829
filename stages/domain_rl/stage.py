"""Domain RL (phase 2): the RL engine on the domain prompts plus the phase-1 carryover.

Reads the phase-1 policy (``ckpt_r1``), the graded ``rl_prompts``, phase 1's ``prompt_stats``
and the GenRM checkpoint. Trains on every non-reasoning prompt (instruction following, tool use,
QA, e-commerce: ``compass.rl.data.is_reasoning_prompt`` is false) plus the phase-1 prompts whose
measured pass rate lies in the configured band and rests on enough samples (medium-to-high
difficulty, ``stages/domain_rl/carryover.py``), with the same engine and options as reasoning RL
(``compass.rl.stage_io.run_rl``). Rewards come from the gym verifier named in each prompt's
``verifier`` column. Writes the final checkpoint (with ``metrics.jsonl`` and ``carryover.json``:
the ids kept and missing, and the band), the per-prompt ``prompt_stats`` and every rollout; the
carryover counts go in each manifest's ``extra``.

The GenRM judge is not used yet. The ``genrm`` input is there so that the DAG runs domain_rl
after genrm and the manifests record which judge was available (``extra``: ``genrm``, its URI,
and ``genrm_used: false``); no reward of this stage asks it. Not done: GenRM-judged rewards for
open-ended prompts (the gym's judge adapter, ``compass.gym.genrm_judge``, exists; this stage does
not wire it in).
"""
from __future__ import annotations

import json
import logging

from stages.domain_rl.carryover import select_carryover
from stages.domain_rl.config import DomainRLConfig
from compass.rl.data import is_reasoning_prompt, prompts_from_table
from compass.rl.stage_io import run_rl

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
