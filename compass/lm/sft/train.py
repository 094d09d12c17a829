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

import torch
import torch.nn.functional as F

from compass.lm.chat import collate, encode_sft_pair
from compass.lm.device import activation_checkpointing as ckpt
from compass.lm.device import autocast, compute_dtype, model_device, resolve_device, to_device
from compass.progress import progress, step_level
from compass.runtime.stage_state import load_state, save_state
from compass.lm.policy_forward import split_head
from compass.lm.sft.packing import IGNORE, pack_samples, segment_mask, to_tensors
from compass.lm.sft.schedule import lr_at

STATE_FILE = "sft_state.pt"
Sample = tuple[list[int], list[int]]


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


def split_by_tokens(samples: list[Sample], max_tokens: int | None) -> list[list[Sample]]:
    """Consecutive pieces of a micro-batch whose padded size (samples x the piece's longest sample) is at most
    ``max_tokens`` (a longer sample goes alone); None: the micro-batch whole. The loss is a sum over supervised
    tokens, so the pieces' sums add up to the whole's."""
    if max_tokens is None:
        return [samples]
    pieces: list[list[Sample]] = []
    cur: list[Sample] = []
    width = 0
    for s in samples:
        if cur and max(width, len(s[0])) * (len(cur) + 1) > max_tokens:
            pieces.append(cur)
            cur, width = [], 0
        cur.append(s)
        width = max(width, len(s[0]))
    if cur:
        pieces.append(cur)
    return pieces


def supervised_count(samples: list[Sample]) -> int:
    """Tokens with a loss: positions whose *next* token has a label."""
    return sum(sum(1 for y in labels[1:] if y != IGNORE) for _, labels in samples)


def packed_unsupported(model) -> str | None:
    """Why the packed forward cannot run this model (None: it can)."""
    from compass.lm.qwen3_native import unsupported
    return unsupported(model.config)


def packed_loss_sum(model, samples: list[Sample], pad_id: int, pack_len: int) -> tuple[torch.Tensor, dict]:
    """Summed cross-entropy over the supervised tokens of ``samples``, packed into rows of at most
    ``pack_len`` tokens; each sample attends only to itself (causal AND same-segment mask, positions
    restarting at 0), and the LM head runs only at supervised positions. -> (loss sum, counts)."""
    from compass.lm.qwen3_native import forward_layers, pack
    rows = pack_samples(samples, pack_len)
    t = to_tensors(rows, pad_id)
    w = pack(model)
    dev = w.embed.device
    ids, targets = t["input_ids"].to(dev), t["targets"].to(dev)
    h = forward_layers(w, w.embed[ids], t["positions"].to(dev), segment_mask(t["segments"].to(dev)))
    sel = targets != IGNORE
    logits = h[sel] @ w.lm_head
    loss = F.cross_entropy(logits.float(), targets[sel], reduction="sum")
    return loss, {"tokens": sum(len(r) for r in rows), "padded_tokens": int(ids.numel()), "rows": len(rows)}


def padded_loss_sum(model, samples: list[Sample], pad_id: int) -> tuple[torch.Tensor, dict]:
    """The same sum through transformers' own forward on right-padded rows (one sample per row)."""
    batch = to_device(collate(samples, pad_id), model_device(model))
    labels = batch["labels"][:, 1:]
    sel = labels != IGNORE
    parts = split_head(model)
    if parts is not None:      # the LM head only at supervised positions
        body, head = parts
        hidden = body(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        logits = head(hidden[:, :-1][sel])
    else:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1][sel]
    loss = F.cross_entropy(logits.float(), labels[sel], reduction="sum")
    return loss, {"tokens": int(batch["attention_mask"].sum()), "padded_tokens": int(batch["input_ids"].numel()),
                  "rows": len(samples)}


class SFTBackend:
    """What the training loop needs of a backend besides ``self(samples) -> (loss sum, counts)``:
    ``module`` (the ``nn.Module`` whose parameters the optimizer steps), ``state_dict`` /
    ``load_state_dict`` (the weights, for resume) and ``write_back`` (the result into the HF model)."""

    module: torch.nn.Module

    def parameters(self):
        return self.module.parameters()

    def train(self) -> None:
        self.module.train()

    def eval(self) -> None:
        self.module.eval()

    def state_dict(self) -> dict:
        return self.module.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state)

    def write_back(self) -> None:
        """Nothing to do when ``module`` is the HF model."""


class TorchSFT(SFTBackend):
    """The ``torch`` backend: the HF model itself, through the packed native forward where it applies,
    else transformers' padded one (saying why). ``self(samples)`` -> (loss sum, counts)."""

    def __init__(self, model, pad_id: int, *, packing: bool, pack_len: int | None, logger: logging.Logger | None = None):
        self.model = self.module = model
        self.pad_id, self.pack_len = pad_id, pack_len
        self.fallback_reason = None
        if packing:
            why = packed_unsupported(model)
            if why is not None:
                self.fallback_reason = f"packing off: the native forward does not support this model ({why})"
                if logger:
                    logger.warning("sft: %s; training on padded batches through transformers", self.fallback_reason)
        self.packed = packing and self.fallback_reason is None

    @property
    def mode(self) -> str:
        return "packed" if self.packed else "padded"

    def __call__(self, samples: list[Sample]) -> tuple[torch.Tensor, dict]:
        if self.packed:
            pack_len = self.pack_len or max(len(ids) for ids, _ in samples)
            return packed_loss_sum(self.model, samples, self.pad_id, pack_len)
        return padded_loss_sum(self.model, samples, self.pad_id)


def make_sft_backend(name: str, model, pad_id: int, *, packing: bool, pack_len: int | None,
                     logger: logging.Logger | None = None, seed: int = 0):
    """The trainable for backend ``name``: ``torch`` (the HF model) or ``megatron`` (a megatron-core
    ``GPTModel`` converted from it, :mod:`compass.lm.sft.megatron_backend`)."""
    if name == "torch":
        return TorchSFT(model, pad_id, packing=packing, pack_len=pack_len, logger=logger)
    if name == "megatron":
        from compass.lm.sft.megatron_backend import MegatronSFT
        return MegatronSFT(model, pad_id, packing=packing, pack_len=pack_len, seed=seed)
    raise ValueError(f"unknown sft backend {name!r}; known: torch, megatron")


@torch.no_grad()
def mean_loss(loss_fn: SFTBackend, samples: list[Sample], chunk: int = 64) -> float:
    """Token-mean loss over every supervised token of ``samples`` (no gradient)."""
    total, n = 0.0, 0
    for i in range(0, len(samples), chunk):
        part = samples[i:i + chunk]
        s, _ = loss_fn(part)
        total += float(s)
        n += supervised_count(part)
    return total / max(n, 1)


def train_sft(model, tok, encoded: list[Sample], *, steps: int, batch_size: int,
              lr: float, warmup_steps: int, weight_decay: float, grad_clip: float, seed: int,
              log_every: int, logger: logging.Logger, desc: str = "sft",
              grad_accum_steps: int = 1, min_lr_ratio: float = 1.0, packing: bool = False,
              pack_len: int | None = None, heldout: list[Sample] | None = None, eval_every: int = 0,
              state_dir=None, checkpoint_every: int = 0, backend: str = "torch",
              device: str = "auto", precision: str = "auto", micro_batch_tokens: int | None = None,
              activation_checkpointing: bool = False,
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
    ``on_step(n)`` is
    called after each step (``n`` steps done, state saved), e.g. to inject a fault in tests.

    Returns metrics: per-step ``losses`` and ``lrs``, ``tokens`` (real tokens seen),
    ``padded_tokens`` (token slots computed, padding included), ``supervised_tokens``,
    ``train_s`` (seconds in training steps), ``train_cpu_s`` (this process's CPU seconds in them), ``heldout`` (list of {step, loss}),
    ``resumed_from_step`` (None on a fresh start), ``mode`` (packed/padded), ``fallback_reason``, ``backend``.
    """
    if backend == "torch":
        dev = resolve_device(device)
        model.to(dev)
    else:                                       # megatron places its own model
        dev = model_device(model)
    amp = compute_dtype(dev, precision)
    net = make_sft_backend(backend, model, tok.pad_token_id, packing=packing, pack_len=pack_len, logger=logger,
                           seed=seed)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay)
    order: list[int] = []
    losses: list[float] = []
    lrs: list[float] = []
    heldout_hist: list[dict] = []
    counts = {"tokens": 0, "padded_tokens": 0, "supervised_tokens": 0, "train_s": 0.0, "train_cpu_s": 0.0}
    signature = {"n": len(encoded), "lengths": sum(len(x) for x, _ in encoded), "steps": steps,
                 "batch_size": batch_size, "grad_accum_steps": grad_accum_steps, "seed": seed, "lr": lr,
                 "backend": backend}
    start, resumed_from = 0, None
    state = load_state(state_dir, STATE_FILE) if checkpoint_every else None
    if state is not None and state["signature"] != signature:
        logger.warning("%s: ignoring saved state in %s: it belongs to another run", desc, state_dir)
        state = None
    if state is not None:
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        rng.setstate(state["rng"])
        torch.set_rng_state(state["torch_rng"])
        order, losses, lrs = list(state["order"]), list(state["losses"]), list(state["lrs"])
        heldout_hist, counts = list(state["heldout"]), {**counts, **state["counts"]}
        start = resumed_from = state["step"]
        logger.info("%s: resumed from step %d of %d (state in %s)", desc, start, steps, state_dir)

    def eval_heldout(done: int) -> None:
        if heldout and not any(h["step"] == done for h in heldout_hist):
            net.eval()
            with autocast(dev, amp):
                heldout_hist.append({"step": done, "loss": mean_loss(net, heldout)})
            net.train()
            logger.log(step_level(), "%s step %d/%d held-out loss %.4f", desc, done, steps,
                       heldout_hist[-1]["loss"])

    micro = min(batch_size, len(encoded))
    if start == 0:
        eval_heldout(0)
    net.train()
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
        for g in opt.param_groups:
            g["lr"] = lr_now
        step_loss = 0.0
        for mb in micro_batches:
            for piece in split_by_tokens(mb, micro_batch_tokens):
                with autocast(dev, amp), ckpt(model, activation_checkpointing and backend == "torch"):
                    loss_sum, c = net(piece)
                (loss_sum / n_sup).backward()
                step_loss += float(loss_sum.detach())
                counts["tokens"] += c["tokens"]
                counts["padded_tokens"] += c["padded_tokens"]
                window_tok += c["tokens"]
        counts["supervised_tokens"] += n_sup
        torch.nn.utils.clip_grad_norm_(net.parameters(), grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(step_loss / n_sup)
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
                "signature": signature, "step": done, "model": net.state_dict(), "optimizer": opt.state_dict(),
                "rng": rng.getstate(), "torch_rng": torch.get_rng_state(), "order": list(order),
                "losses": losses, "lrs": lrs, "heldout": heldout_hist, "counts": counts})
        if on_step is not None:
            on_step(done)
    eval_heldout(steps)
    net.eval()
    net.write_back()
    model.eval()
    return {"losses": losses, "lrs": lrs, "tokens": counts["tokens"], "padded_tokens": counts["padded_tokens"],
            "supervised_tokens": counts["supervised_tokens"], "train_s": counts["train_s"],
            "train_cpu_s": counts["train_cpu_s"], "heldout": heldout_hist,
            "resumed_from_step": resumed_from, "mode": net.mode, "fallback_reason": net.fallback_reason,
            "backend": backend}
