"""World stage: the embedded default world, built from a seed.

Builds every table the pipeline starts from (``stages/world/build.py``, docs/world.md): eleven
task suites with programmatic teachers, one module each in ``stages/world/suites/`` (arithmetic
and math word problems with ``<think>`` traces, code with unit tests, IFEval-style constraints,
tool calls, QA, and e-commerce category / relevance / brand multiple choice, attribute JSON
extraction and title rewriting), in up to seven languages, every item with a reference answer, a
verifier spec and a difficulty 1-5. Items split into teacher-written SFT samples (``raw_sft``)
and prompt-only RL prompts (``raw_prompts``); ``n_eval`` unseen prompts per suite are held out
(``eval_prompts``); A/B/TIE preference pairs (``preferences``) set a correct answer against the
teacher's typical mistake, or two correct answers in other words (true ties). Bad rows are
planted on purpose (duplicates, truncated traces, empty and wrong answers, eval leaks, prompts
without a reference) and their row indices recorded in the manifests' ``extra`` (``planted``),
while ``stages/world/filter_guard.py`` keeps the clean items clean in data_filter's eyes. Last, a
byte-level BPE tokenizer trained on the world's text and a randomly initialised tiny Qwen3-MoE (or
dense Qwen3: ``world.model.arch``) are saved as the ``base`` checkpoint. The same config gives
the same outputs. Real data replaces these tables through ``compass import`` (docs/import.md).
"""
from __future__ import annotations

import logging

from compass.lm.model_factory import build_model, build_tokenizer, save_checkpoint
from compass.store.store import Artifact, ArtifactWriter
from stages.world.build import build_world
from stages.world.config import WorldConfig

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
