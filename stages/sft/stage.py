"""SFT stage (provisional): fine-tune a checkpoint on an ``sft_samples`` table.

The minimal version loads the base checkpoint, encodes every (prompt,
response) with the chat template (loss on the response only; pairs longer
than ``max_len`` are skipped and counted, never truncated), and runs
``steps`` real AdamW steps on seeded random batches with a short linear
warmup and gradient clipping. It saves a Hugging Face checkpoint and records
first/last loss, steps, tokens and skipped pairs in the manifest. The full
version adds sequence packing, a cosine schedule, periodic checkpoints with
trainer state (optimizer, RNG, step, data cursor) and resume from them.
"""
from __future__ import annotations

import logging

import torch

from stages.common.model_factory import load_checkpoint, save_checkpoint
from stages.common.runner import StageInputError
from stages.common.store import Artifact, ArtifactWriter
from stages.sft.config import SFTConfig
from stages.sft.train import encode_table, train_sft

PROVISIONAL = True
log = logging.getLogger("compass.sft")


def _body(config: SFTConfig, inputs: dict[str, Artifact], outputs: dict[str, ArtifactWriter]) -> None:
    torch.manual_seed(config.seed)
    model, tok = load_checkpoint(inputs["base"].local_dir())
    table = inputs["data"].read_table()
    encoded, skipped = encode_table(tok, table.column("prompt").to_pylist(),
                                    table.column("response").to_pylist(), config.max_len)
    if not encoded:
        raise StageInputError(f"sft: no usable sample in {inputs['data'].uri}: {table.num_rows} row(s), "
                              f"{skipped} longer than max_len={config.max_len} tokens")
    if skipped:
        log.warning("sft: skipped %d of %d pair(s) longer than max_len=%d", skipped, table.num_rows, config.max_len)
    m = train_sft(model, tok, encoded, steps=config.steps, batch_size=config.batch_size, lr=config.lr,
                  warmup_steps=config.warmup_steps, weight_decay=config.weight_decay, grad_clip=config.grad_clip,
                  seed=config.seed, log_every=config.log_every, logger=log)
    losses = m["losses"]
    k = min(5, len(losses))
    metrics = {
        "steps": config.steps,
        "samples": table.num_rows,
        "samples_used": len(encoded),
        "skipped_too_long": skipped,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "loss_first5_mean": sum(losses[:k]) / k,
        "loss_last5_mean": sum(losses[-k:]) / k,
        "tokens": m["tokens"],
        "supervised_tokens": m["supervised_tokens"],
        "tokens_per_s": m["tokens"] / max(m["train_s"], 1e-9),
        "train_s": m["train_s"],
    }
    log.info("sft: %d steps, loss %.3f -> %.3f, %d tokens (%.0f tok/s), %d skipped", config.steps,
             metrics["loss_first5_mean"], metrics["loss_last5_mean"], m["tokens"], metrics["tokens_per_s"], skipped)
    out = outputs["checkpoint"]
    save_checkpoint(model, tok, out.dir, meta={"stage": "sft", "provisional": PROVISIONAL, **metrics,
                                                "loss_curve": [round(x, 5) for x in losses]})
    out.extra.update(metrics)


from stages.sft.spec import SPEC, run  # noqa: E402,F401  (the stage's public contract)
