"""World stage (provisional): the embedded default world, built from a seed.

The minimal version writes two synthetic suites with programmatic teachers:
integer arithmetic with step-by-step ``<think>`` traces (difficulty 1-5 by
number of operations and operand size) and e-commerce category multiple
choice in English and Indonesian (plain-letter answers, the domain SFT role).
It splits items into teacher-written SFT samples and prompt-only RL prompts,
plants a few bad rows (duplicates, truncated traces, empty and wrong answers,
eval leaks, prompts without a reference) for ``data_filter`` to quarantine,
builds A/B/TIE preference pairs from correct and wrong answers (ties are two
correct answers), holds out ``n_eval`` unseen prompts per eval suite, and
saves a randomly initialised tiny Qwen3-MoE with a character tokenizer over
the corpus. Everything is deterministic in the config. The full version adds
the other suites of ARCHITECTURE §5 (code, instruction following, attribute
extraction, title rewriting, tool calls, QA; more languages) and lets real
data plug in through the same tables.
"""
from __future__ import annotations

import logging

from stages.common.model_factory import build_model, build_tokenizer, save_checkpoint
from stages.common.store import Artifact, ArtifactWriter
from stages.world.build import build_world
from stages.world.config import WorldConfig

PROVISIONAL = True
log = logging.getLogger("compass.world")


def _body(config: WorldConfig, inputs: dict[str, Artifact], outputs: dict[str, ArtifactWriter]) -> None:
    world = build_world(config)
    for slot, table in (("raw_sft", world.raw_sft), ("raw_prompts", world.raw_prompts),
                        ("preferences", world.preferences), ("eval_prompts", world.eval_prompts)):
        w = outputs[slot]
        w.write_table(table)
        for col in ("domain", "label"):
            if col in table.column_names:
                counts: dict[str, int] = {}
                for v in table.column(col).to_pylist():
                    counts[v] = counts.get(v, 0) + 1
                w.extra[f"rows_by_{col}"] = dict(sorted(counts.items()))
        if slot in world.planted:
            w.extra["planted"] = world.planted[slot]
        log.info("%s: %d rows", slot, table.num_rows)

    tok = build_tokenizer(world.texts(), config.tokenizer)
    model = build_model(config.model, tok, config.seed)
    n_params = sum(p.numel() for p in model.parameters())
    save_checkpoint(model, tok, outputs["base"].dir,
                    meta={"seed": config.seed, "model": config.model.model_dump(mode="json"), "params": n_params})
    outputs["base"].extra.update({"params": n_params, "vocab_size": len(tok), "arch": config.model.arch})
    log.info("base: %s with %d parameters, vocabulary %d", config.model.arch, n_params, len(tok))


from stages.world.spec import SPEC, run  # noqa: E402,F401  (the stage's public contract)
