"""The supervised training loop of the SFT stage (also used by the GenRM stage).

``train_sft`` runs AdamW steps on seeded batches of (ids, labels) samples: loss only where a label
is set (the assistant's tokens), token-mean over every supervised token of the optimizer step
(so ``grad_accum_steps`` micro-batches of ``batch_size`` samples make the same update as one batch
of ``grad_accum_steps * batch_size``), linear warmup then cosine decay, gradient clipping,
optional sequence packing (``compass.lm.sft.packing`` with the native Qwen3 forward), held-out loss,
and trainer state saved every ``checkpoint_every`` steps for an exact resume after a kill.
Two backends compute the loss and own the weights being trained: ``torch`` (the HF model) and
``megatron`` (``compass.lm.sft.megatron_backend``: the RL engine's megatron-core model).
"""
from __future__ import annotations

import logging
import random
import time
from typing import Callable

from compass.config import RankSettings
from compass.lm.chat import encode_sft_pair
from compass.lm.sft.losses import (Sample, SFTBackend, TorchSFT, make_sft_backend, mean_loss,  # noqa: F401
                                   packed_loss_sum, padded_loss_sum, split_by_tokens, supervised_count)
from compass.lm.sft.schedule import lr_at
from compass.lm.sft.worker import SFTRanks, SFTWorker
from compass.progress import progress, step_level
from compass.runtime.stage_state import load_state, save_state

STATE_FILE = "sft_state.pt"


def encode_table(tok, prompts: list[str], responses: list[str], max_len: int):
    """(encoded pairs, number skipped because they do not fit ``max_len``)."""
    encoded, skipped = [], 0
    for p, r in zip(prompts, responses):
        e = encode_sft_pair(tok, p, r, max_len)
        if e is None:
            skipped += 1
        else:
            encoded.append(e)
    return encoded, skipped


def encode_split(tok, prompts: list[str], responses: list[str], held: list[bool],
                 max_len: int) -> tuple[list[Sample], list[Sample], int]:
    """``encode_table`` of the rows ``held`` marks False and of those it marks True:
    (training samples, held-out samples, pairs skipped in both because longer than ``max_len``)."""
    train, skipped_train = encode_table(tok, [p for p, h in zip(prompts, held) if not h],
                                        [r for r, h in zip(responses, held) if not h], max_len)
    heldout, skipped_held = encode_table(tok, [p for p, h in zip(prompts, held) if h],
                                         [r for r, h in zip(responses, held) if h], max_len)
    return train, heldout, skipped_train + skipped_held


def train_sft(model, tok, encoded: list[Sample], *, steps: int, batch_size: int,
              lr: float, warmup_steps: int, weight_decay: float, grad_clip: float, seed: int,
              log_every: int, logger: logging.Logger, desc: str = "sft",
              grad_accum_steps: int = 1, min_lr_ratio: float = 1.0, packing: bool = False,
              pack_len: int | None = None, heldout: list[Sample] | None = None, eval_every: int = 0,
              state_dir=None, checkpoint_every: int = 0, backend: str = "torch",
              device: str = "auto", precision: str = "auto", micro_batch_tokens: int | None = None,
              activation_checkpointing: bool = False, ranks: RankSettings | None = None,
              on_step: Callable[[int], None] | None = None) -> dict:
    """AdamW steps on seeded batches (each epoch a fresh shuffle of ``encoded``).

    A step draws ``grad_accum_steps`` micro-batches of ``batch_size`` samples; its loss is the mean
    over all their supervised tokens. ``lr`` follows :func:`compass.lm.sft.schedule.lr_at`
    (``min_lr_ratio=1``: warmup then constant). ``packing``: pack each micro-batch into rows of at
    most ``pack_len`` tokens (default: its longest sample) through the native forward, falling back
    to padded rows for a model it does not support. ``heldout``: samples scored (never trained on)
    before training, every ``eval_every`` steps and at the end. ``state_dir`` + ``checkpoint_every``:
    save the trainer state every K steps and resume from it when one is there. ``backend``: ``torch``
    trains ``model`` itself; ``megatron`` trains a megatron-core copy and writes the result back into
    ``model`` at the end (:func:`make_sft_backend`). ``device`` / ``precision``: where the torch backend
    trains and in what precision (:mod:`compass.lm.device`; the model is moved there and stays there).
    ``micro_batch_tokens``: each micro-batch goes through the model in pieces of at most that many (padded)
    tokens, gradients accumulated (:func:`split_by_tokens`): the same step, less activation memory.
    ``activation_checkpointing``: the torch backend's forwards keep each layer's input only and recompute
    the layer in the backward (:func:`compass.lm.device.activation_checkpointing`).
    ``ranks`` with ``ranks.ranks > 1``: the steps run on that many ranks on Ray — the torch backend
    data-parallel, sharded with FSDP2 (:mod:`compass.lm.sft.worker`); the megatron backend with ``ranks``'
    ``tensor_parallel``, ``pipeline_parallel`` and ``expert_parallel`` (:mod:`compass.lm.sft.megatron_ranks`);
    ``model`` receives the trained weights at the end and stays where it is. A state saved at one rank count
    (or set of parallel sizes) resumes at another.
    ``on_step(n)`` is called after each step (``n`` steps done, state saved), e.g. to inject a fault in tests.

    Returns metrics: per-step ``losses`` and ``lrs``, ``tokens`` (real tokens seen),
    ``padded_tokens`` (token slots computed, padding included), ``supervised_tokens``,
    ``train_s`` (seconds in training steps), ``train_cpu_s`` (this process's CPU seconds in them), ``heldout`` (list of {step, loss}),
    ``resumed_from_step`` (None on a fresh start), ``mode`` (packed/padded), ``fallback_reason``, ``backend``,
    ``ranks``.
    """
    options = {"backend": backend, "packing": packing, "pack_len": pack_len, "device": device,
               "precision": precision, "lr": lr, "weight_decay": weight_decay, "grad_clip": grad_clip,
               "micro_batch_tokens": micro_batch_tokens, "activation_checkpointing": activation_checkpointing,
               "seed": seed}
    n_ranks = ranks.ranks if ranks is not None else 1
    if n_ranks > 1:
        megatron = {k: getattr(ranks, k, 1) for k in ("tensor_parallel", "pipeline_parallel", "expert_parallel")}
        megatron["distributed_optimizer"] = getattr(ranks, "distributed_optimizer", False)
        if backend == "megatron" and micro_batch_tokens:
            logger.warning("%s: micro_batch_tokens does not apply on megatron ranks: megatron's schedule splits each "
                           "data-parallel rank's rows into grad_accum_steps (%d) micro-batches", desc,
                           grad_accum_steps)
        megatron["micro_batches"] = grad_accum_steps
        net = SFTRanks(model, tok.pad_token_id, ranks, options, megatron=megatron)
    else:
        net = SFTWorker(model, tok.pad_token_id, logger=logger, **options)
    try:
        return _loop(net, encoded, steps=steps, batch_size=batch_size, lr=lr, warmup_steps=warmup_steps, seed=seed,
                     log_every=log_every, logger=logger, desc=desc, grad_accum_steps=grad_accum_steps,
                     min_lr_ratio=min_lr_ratio, heldout=heldout, eval_every=eval_every, state_dir=state_dir,
                     checkpoint_every=checkpoint_every, backend=backend, on_step=on_step) | {"ranks": n_ranks}
    finally:
        if n_ranks > 1:
            net.close()


def _loop(net, encoded: list[Sample], *, steps, batch_size, lr, warmup_steps, seed, log_every, logger, desc,
          grad_accum_steps, min_lr_ratio, heldout, eval_every, state_dir, checkpoint_every, backend, on_step) -> dict:
    """The loop of :func:`train_sft` on ``net`` (an :class:`SFTWorker` or :class:`SFTRanks`): sampling, schedule,
    held-out scoring, logging and state files happen here, once; the weights' side in ``net``."""
    rng = random.Random(seed)
    order: list[int] = []
    losses: list[float] = []
    lrs: list[float] = []
    heldout_hist: list[dict] = []
    counts = {"tokens": 0, "padded_tokens": 0, "supervised_tokens": 0, "train_s": 0.0, "train_cpu_s": 0.0}
    signature = {"n": len(encoded), "lengths": sum(len(x) for x, _ in encoded), "steps": steps,
                 "batch_size": batch_size, "grad_accum_steps": grad_accum_steps, "seed": seed, "lr": lr,
                 "backend": backend}
    if backend == "megatron":       # AdamW's state keyed by parameter name (earlier megatron states: by position)
        signature["state_layout"] = "by_name"
    start, resumed_from = 0, None
    state = load_state(state_dir, STATE_FILE) if checkpoint_every else None
    if state is not None and state["signature"] != signature:
        logger.warning("%s: ignoring saved state in %s: it belongs to another run", desc, state_dir)
        state = None
    if state is not None:
        net.load({k: state[k] for k in ("model", "optimizer", "torch_rng")})
        rng.setstate(state["rng"])
        order, losses, lrs = list(state["order"]), list(state["losses"]), list(state["lrs"])
        heldout_hist, counts = list(state["heldout"]), {**counts, **state["counts"]}
        start = resumed_from = state["step"]
        logger.info("%s: resumed from step %d of %d (state in %s)", desc, start, steps, state_dir)

    def eval_heldout(done: int) -> None:
        if heldout and not any(h["step"] == done for h in heldout_hist):
            heldout_hist.append({"step": done, "loss": net.heldout_loss(heldout)})
            logger.log(step_level(), "%s step %d/%d held-out loss %.4f", desc, done, steps,
                       heldout_hist[-1]["loss"])

    micro = min(batch_size, len(encoded))
    if start == 0:
        eval_heldout(0)
    net.train()
    info = net.info()
    window_t, window_tok = 0.0, 0
    bar = progress(range(start, steps), total=steps - start, desc=desc, unit="step")
    for step in bar:
        t0, c0 = time.perf_counter(), time.process_time()
        micro_batches = []
        for _ in range(grad_accum_steps):
            idx = []
            while len(idx) < micro:
                if not order:
                    order = list(range(len(encoded)))
                    rng.shuffle(order)
                idx.append(order.pop())
            micro_batches.append([encoded[i] for i in idx])
        n_sup = max(1, sum(supervised_count(mb) for mb in micro_batches))
        lr_now = lr_at(step, lr=lr, warmup_steps=warmup_steps, total_steps=steps, min_lr_ratio=min_lr_ratio)
        out = net.step(micro_batches, lr_now, n_sup)
        counts["tokens"] += out["tokens"]
        counts["padded_tokens"] += out["padded_tokens"]
        counts["supervised_tokens"] += n_sup
        window_tok += out["tokens"]
        losses.append(out["loss_sum"] / n_sup)
        lrs.append(lr_now)
        dt = time.perf_counter() - t0
        counts["train_s"] += dt
        counts["train_cpu_s"] += time.process_time() - c0
        window_t += dt
        done = step + 1
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
        if done % log_every == 0 or step == start or done == steps:
            k = min(log_every, len(losses))
            logger.log(step_level(), "%s step %d/%d loss %.4f (mean of last %d %.4f) lr %.2e %.0f tok/s", desc,
                       done, steps, losses[-1], k, sum(losses[-k:]) / k, lr_now, window_tok / max(window_t, 1e-9))
            window_t, window_tok = 0.0, 0
        if eval_every and done % eval_every == 0 and done < steps:
            eval_heldout(done)
        if state_dir is not None and checkpoint_every and done % checkpoint_every == 0 and done < steps:
            save_state(state_dir, STATE_FILE, {
                "signature": signature, "step": done, **net.state(), "rng": rng.getstate(), "order": list(order),
                "losses": losses, "lrs": lrs, "heldout": heldout_hist, "counts": counts})
        if on_step is not None:
            on_step(done)
    eval_heldout(steps)
    net.finish()
    return {"losses": losses, "lrs": lrs, "tokens": counts["tokens"], "padded_tokens": counts["padded_tokens"],
            "supervised_tokens": counts["supervised_tokens"], "train_s": counts["train_s"],
            "train_cpu_s": counts["train_cpu_s"], "heldout": heldout_hist,
            "resumed_from_step": resumed_from, "mode": info["mode"], "fallback_reason": info["fallback_reason"],
            "backend": backend}
