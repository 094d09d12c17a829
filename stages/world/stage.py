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
dense Qwen3: ``world.model.arch``), pretrained on plain documents of every suite when
``world.pretrain`` asks (a share of the training items, never an eval item), are saved as the
``base`` checkpoint: the one model both SFT parents start from. The same config gives
the same outputs. Real data replaces these tables through ``compass import`` (docs/import.md).
"""
from __future__ import annotations

import logging

import torch

from compass.lm.chat import encode_document
from compass.lm.model_factory import build_model, build_tokenizer, save_checkpoint
from compass.lm.sft.train import train_sft
from compass.runtime.stage_state import state_dir_for
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
    pretrained = _pretrain(config, world, model, tok, outputs["base"])
    save_checkpoint(model, tok, outputs["base"].dir,
                    meta={"seed": config.seed, "model": config.model.model_dump(mode="json"), "params": n_params,
                          **pretrained})
    outputs["base"].extra.update({"params": n_params, "vocab_size": len(tok), "arch": config.model.arch,
                                  **pretrained})
    log.info("base: %s with %d parameters, vocabulary %d%s", config.model.arch, n_params, len(tok),
             f", pretrained {config.pretrain.steps} steps on {len(world.documents)} documents"
             if pretrained else " (random init)")


def _pretrain(config: WorldConfig, world, model, tok, out: ArtifactWriter) -> dict:
    """Train the random init on the world's documents (``world.pretrain``); the figures for the manifest.

    Nothing when there is no corpus or no step: the base is then the random init, as it always was.
    """
    cfg = config.pretrain
    if not cfg.steps or not world.documents:
        return {}
    encoded, skipped = [], 0
    for doc in world.documents:
        e = encode_document(tok, doc, cfg.max_len)
        if e is None:
            skipped += 1
        else:
            encoded.append(e)
    if not encoded:
        raise ValueError(f"world.pretrain: every one of {len(world.documents)} document(s) is longer than "
                         f"max_len={cfg.max_len} tokens")
    torch.manual_seed(config.seed)
    m = train_sft(model, tok, encoded, steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr,
                  warmup_steps=cfg.warmup_steps, weight_decay=0.0, grad_clip=cfg.grad_clip, seed=config.seed,
                  log_every=cfg.log_every, logger=log, desc="pretrain", min_lr_ratio=cfg.min_lr_ratio,
                  packing=True, pack_len=cfg.max_len, state_dir=state_dir_for(out) if cfg.checkpoint_every else None,
                  checkpoint_every=cfg.checkpoint_every)
    losses = m["losses"]
    k = min(5, len(losses))
    return {"pretrain_documents": len(encoded), "pretrain_documents_by_suite": world.documents_by_suite,
            "pretrain_skipped_too_long": skipped, "pretrain_steps": cfg.steps, "pretrain_tokens": m["tokens"],
            "pretrain_loss_first5_mean": sum(losses[:k]) / k, "pretrain_loss_last5_mean": sum(losses[-k:]) / k,
            "pretrain_train_s": m["train_s"], "pretrain_resumed_from_step": m["resumed_from_step"]}


from stages.world.spec import SPEC, run  # noqa: E402,F401  (the stage's public contract)
