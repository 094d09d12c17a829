"""SFT stage: fine-tune a checkpoint on an ``sft_samples`` table, measured on held-out suites.

Loads the base checkpoint and encodes every (prompt, response) with the chat template (loss on the
response only; pairs longer than ``max_len`` are skipped and counted, never truncated). A
deterministic share of the rows (by a hash of their ``id``, ``compass.lm.holdout``) is held out
and only scored. ``compass.lm.sft.train.train_sft`` then runs AdamW steps with sequence packing,
gradient accumulation, warmup + cosine, and trainer state saved every ``checkpoint_every`` steps
under ``$COMPASS_STATE_DIR`` (a re-run of the same stage run resumes from it exactly, even after
SIGKILL). With the optional ``eval`` input (``prompts``), the trained model answers held-out
suites greedily and the gym's verifiers score them. Output: a Hugging Face checkpoint with
``summary.md``; the numbers also go to the manifest's ``extra``. See docs/sft.md.
"""
from __future__ import annotations

import logging
import random

import torch

from compass.lm.model_factory import load_checkpoint, save_checkpoint
from compass.runtime.runner import StageInputError
from compass.runtime.stage_state import load_state, save_state, state_dir_for
from compass.store.store import Artifact, ArtifactWriter
from stages.sft.config import SFTConfig
from compass.lm.holdout import split_holdout
from stages.sft.report import render_summary
from stages.sft.suites import accuracy_table, score_suites, select_eval_rows
from compass.lm.sft.train import encode_split, encode_table, train_sft

log = logging.getLogger("compass.sft")
BASE_EVAL_FILE = "base_eval.pt"


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _body(config: SFTConfig, inputs: dict[str, Artifact], outputs: dict[str, ArtifactWriter]) -> None:
    out = outputs["checkpoint"]
    state_dir = state_dir_for(out) if config.checkpoint_every else None
    torch.manual_seed(config.seed)
    model, tok = load_checkpoint(inputs["base"].local_dir())
    if config.backend == "megatron":  # before any scoring: say now what would fail later
        from compass.lm.megatron_convert import unsupported
        why = unsupported(model.config)
        if why is not None:
            raise StageInputError(f"sft: backend 'megatron' cannot train {inputs['base'].uri}: {why}; "
                                  f"use backend: torch")
        from compass.lm.megatron_parallel import ParallelSizes
        try:
            ParallelSizes(config.tensor_parallel, config.pipeline_parallel,
                          config.expert_parallel).check(config.ranks, model.config)
        except ValueError as e:
            raise StageInputError(f"sft: {inputs['base'].uri}: {e}") from None
    table = inputs["data"].read_table()
    prompts, responses = table.column("prompt").to_pylist(), table.column("response").to_pylist()
    ids = table.column("id").to_pylist() if "id" in table.column_names else [str(i) for i in range(table.num_rows)]
    held = split_holdout([str(i) for i in ids], config.holdout_fraction, config.holdout_min_rows)
    train_enc, held_enc, skipped = encode_split(tok, prompts, responses, held, config.max_len)
    replay_rows = 0
    if "replay" in inputs and config.replay_fraction > 0:
        other = inputs["replay"].read_table()
        replay_rows = min(round(config.replay_fraction * table.num_rows), other.num_rows)
        pick = sorted(random.Random(f"{config.seed}:replay").sample(range(other.num_rows), replay_rows))
        other = other.take(pick)
        replay_enc, replay_skipped = encode_table(tok, other.column("prompt").to_pylist(),
                                                  other.column("response").to_pylist(), config.max_len)
        train_enc, skipped = train_enc + replay_enc, skipped + replay_skipped
        log.info("sft: %d replay row(s) of %s trained on with the data", replay_rows, inputs["replay"].uri)
    if not train_enc:
        raise StageInputError(f"sft: no usable sample in {inputs['data'].uri}: {table.num_rows} row(s), "
                              f"{skipped} longer than max_len={config.max_len} tokens, {sum(held)} held out")
    if skipped:
        log.warning("sft: skipped %d of %d pair(s) longer than max_len=%d", skipped, table.num_rows, config.max_len)
    log.info("sft: %d training sample(s), %d held out", len(train_enc), len(held_enc))

    eval_rows = None
    if "eval" in inputs:
        eval_rows = select_eval_rows(inputs["eval"].read_table().to_pylist(), config.eval_domains,
                                     config.eval_max_prompts_per_suite)
        if not eval_rows:
            log.warning("sft: no eval prompt with domain in %s in %s: nothing to score", config.eval_domains,
                        inputs["eval"].uri)
            eval_rows = None
    base_summary = None
    if eval_rows and config.eval_base:
        base_summary = load_state(state_dir, BASE_EVAL_FILE)
        if base_summary is None:
            base_summary = score_suites(model, tok, eval_rows, max_new_tokens=config.eval_max_new_tokens,
                                        seed=config.seed, model_uri=inputs["base"].uri)
            if state_dir is not None:
                save_state(state_dir, BASE_EVAL_FILE, base_summary)
        log.info("sft: base accuracy %s", {k: round(v, 3) for k, v in accuracy_table(base_summary).items()})

    m = train_sft(model, tok, train_enc, steps=config.steps, batch_size=config.batch_size, lr=config.lr,
                  warmup_steps=config.warmup_steps, weight_decay=config.weight_decay, grad_clip=config.grad_clip,
                  seed=config.seed, log_every=config.log_every, logger=log, desc=out.name,
                  grad_accum_steps=config.grad_accum_steps, min_lr_ratio=config.min_lr_ratio,
                  packing=config.packing, pack_len=config.pack_len or config.max_len, heldout=held_enc,
                  eval_every=config.eval_every, state_dir=state_dir, checkpoint_every=config.checkpoint_every,
                  backend=config.backend, device=config.device, precision=config.precision,
                  micro_batch_tokens=config.micro_batch_tokens,
                  activation_checkpointing=config.activation_checkpointing, ranks=config)
    losses, heldout = m["losses"], m["heldout"]
    k = min(5, len(losses))
    metrics = {
        "steps": config.steps,
        "samples": table.num_rows,
        "samples_used": len(train_enc) + len(held_enc),
        "train_samples": len(train_enc),
        "replay_rows": replay_rows,
        "heldout_samples": len(held_enc),
        "skipped_too_long": skipped,
        "samples_per_step": config.grad_accum_steps * min(config.batch_size, len(train_enc)),
        "grad_accum_steps": config.grad_accum_steps,
        "backend": m["backend"],
        "ranks": m["ranks"],
        **({"parallel": {k: getattr(config, k) for k in ("tensor_parallel", "pipeline_parallel", "expert_parallel")}}
           if config.backend == "megatron" else {}),
        "mode": m["mode"],
        "fallback_reason": m["fallback_reason"],
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "loss_first5_mean": _mean(losses[:k]),
        "loss_last5_mean": _mean(losses[-k:]),
        "heldout_loss_first": heldout[0]["loss"] if heldout else None,
        "heldout_loss_last": heldout[-1]["loss"] if heldout else None,
        "heldout_curve": [{"step": h["step"], "loss": round(h["loss"], 5)} for h in heldout],
        "lr_peak": max(m["lrs"]),
        "lr_last": m["lrs"][-1],
        "tokens": m["tokens"],
        "padded_tokens": m["padded_tokens"],
        "packing_efficiency": m["tokens"] / max(m["padded_tokens"], 1),
        "supervised_tokens": m["supervised_tokens"],
        "tokens_per_s": m["tokens"] / max(m["train_s"], 1e-9),
        "train_s": m["train_s"],
        "resumed_from_step": m["resumed_from_step"],
    }
    log.info("sft: %d steps, loss %.3f -> %.3f, held-out %s -> %s, %d tokens (%.0f tok/s, %s, efficiency %.2f)",
             config.steps, metrics["loss_first5_mean"], metrics["loss_last5_mean"], metrics["heldout_loss_first"],
             metrics["heldout_loss_last"], m["tokens"], metrics["tokens_per_s"], m["mode"],
             metrics["packing_efficiency"])
    eval_summary = None
    if eval_rows:
        eval_summary = score_suites(model, tok, eval_rows, max_new_tokens=config.eval_max_new_tokens,
                                    seed=config.seed, model_uri=out.uri)
        metrics["eval_accuracy"] = accuracy_table(eval_summary)
        metrics["eval_overall_accuracy"] = eval_summary["overall_accuracy"]
        metrics["eval_prompts"] = {n: s["prompts"] for n, s in eval_summary["suites"].items()}
        for name, s in eval_summary["suites"].items():
            log.info("sft: %s accuracy %.3f over %d prompt(s)", name, s["accuracy"], s["prompts"])
    if base_summary is not None:
        metrics["eval_base_accuracy"] = accuracy_table(base_summary)
    save_checkpoint(model, tok, out.dir, meta={"stage": "sft", **metrics,
                                                "loss_curve": [round(x, 5) for x in losses]})
    out.path("summary.md").write_text(render_summary(out.name, metrics, eval_summary, base_summary))
    out.extra.update(metrics)


from stages.sft.spec import SPEC, run  # noqa: E402,F401  (the stage's public contract)
