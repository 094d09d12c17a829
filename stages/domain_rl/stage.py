"""Domain RL (phase 2): the RL engine on the domain prompts plus the phase-1 carryover.

Reads the phase-1 policy (``ckpt_r1``), the graded ``rl_prompts``, phase 1's ``prompt_stats``
and the GenRM checkpoint. Trains on every non-reasoning prompt (instruction following, tool use,
QA, e-commerce: ``compass.rl.sampling.prompt_data.is_reasoning_prompt`` is false) plus the phase-1 prompts whose
measured pass rate lies in the configured band and rests on enough samples (medium-to-high
difficulty, ``stages/domain_rl/carryover.py``), at most ``carryover_ratio`` of the mix (a seeded
sample of the band when it holds more), with the same engine and options as reasoning RL
(``compass.rl.stage_io.run_rl``).

Rewards: open-ended prompts (verifier ``title_rules``: product-title rewriting) are judged by the
GenRM checkpoint against the reference (A or TIE → 1, B → 0; ``compass.rl.genrm_reward``), every
other prompt by the gym verifier named in its ``verifier`` column. The judge's audit (malformed
verdicts, agreement with the rules verifier, GRPO advantage sign flips against it) goes in each
manifest's ``extra`` beside ``genrm`` (its URI) and ``genrm_used``. Writes the final checkpoint
(with ``metrics.jsonl`` and ``carryover.json``: the ids kept and missing, the band and the ratio),
the per-prompt ``prompt_stats`` and every rollout; the carryover counts go in ``extra`` too.
"""
from __future__ import annotations

import json
import logging

from compass.gym.genrm_judge import GenRMJudge
from compass.rl.sampling.prompt_data import is_reasoning_prompt, prompts_from_table, verifier_type
from compass.rl.genrm_reward import DEFAULT_JUDGED, GenRMReward
from compass.rl.stage_io import run_rl
from stages.domain_rl.carryover import mix_carryover, select_carryover
from stages.domain_rl.config import DomainRLConfig

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
    in_band = [by_id[i] for i in carry_ids if i in by_id and i not in domain_ids]
    carried = mix_carryover(in_band, len(domain), config.carryover_ratio, config.seed)
    log.info("domain_rl: %d domain prompts + %d carryover (%d in the band of %d measured in phase 1, pass rate "
             "in [%.2f, %.2f]; ratio %s)", len(domain), len(carried), len(in_band), stats.num_rows,
             config.carryover_min_pass_rate, config.carryover_max_pass_rate, config.carryover_ratio)
    prompts = domain + carried
    if not prompts:
        raise ValueError(f"domain_rl: no domain prompts in {inputs['prompts'].uri} and no carryover kept")
    genrm = inputs["genrm"]
    score = None
    if config.genrm_reward and any(verifier_type(p.verifier) in DEFAULT_JUDGED for p in prompts):
        judge = GenRMJudge.from_checkpoint(str(genrm.local_dir()), max_new_tokens=config.genrm_max_new_tokens,
                                           swap_check=config.genrm_swap_check)
        score = GenRMReward(judge, pass_threshold=config.reward.pass_threshold)
        log.info("domain_rl: %d prompt(s) judged by the GenRM %s", sum(map(score.judges, prompts)), genrm.uri)
    extra = {"domain_prompts": len(domain), "carryover_measured": stats.num_rows, "carryover_in_band": len(in_band),
             "carryover_kept": len(carried), "carryover_missing": len(missing),
             "carryover_share": len(carried) / len(prompts), "genrm": genrm.uri, "genrm_used": score is not None}
    with open(outputs["checkpoint"].path("carryover.json"), "w") as f:
        json.dump({"kept": [p.id for p in carried], "in_band": len(in_band), "missing": missing,
                   "min_pass_rate": config.carryover_min_pass_rate,
                   "max_pass_rate": config.carryover_max_pass_rate,
                   "min_samples": config.carryover_min_samples, "ratio": config.carryover_ratio}, f, indent=2)
    run_rl(config, inputs["policy"], prompts, outputs, log=log, desc="domain_rl", extra=extra, score_fn=score)


from stages.domain_rl.spec import SPEC, run  # noqa: E402,F401  (the stage's public contract)
