"""The supervised training loop shared by the SFT stage and the provisional GenRM stage."""
from __future__ import annotations

import logging
import random
import time

import torch

from stages.common.lm import collate, encode_sft_pair, token_mean_loss
from stages.common.progress import progress


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


def train_sft(model, tok, encoded: list[tuple[list[int], list[int]]], *, steps: int, batch_size: int,
              lr: float, warmup_steps: int, weight_decay: float, grad_clip: float, seed: int,
              log_every: int, logger: logging.Logger, desc: str = "sft") -> dict:
    """Real AdamW steps on seeded random batches (each epoch a fresh shuffle).

    Returns metrics: per-step ``losses``, ``tokens`` (non-pad tokens seen) and
    ``supervised_tokens`` (tokens with a loss).
    """
    torch.manual_seed(seed)
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / (warmup_steps + 1)) if warmup_steps else 1.0)
    order: list[int] = []
    losses: list[float] = []
    tokens = supervised = 0
    model.train()
    t0 = time.perf_counter()
    bar = progress(range(steps), desc=desc, unit="step")
    for step in bar:
        batch_idx = []
        while len(batch_idx) < min(batch_size, len(encoded)):
            if not order:
                order = list(range(len(encoded)))
                rng.shuffle(order)
            batch_idx.append(order.pop())
        batch = collate([encoded[i] for i in batch_idx], tok.pad_token_id)
        loss = token_mean_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        lr_now = sched.get_last_lr()[0]
        opt.step()
        sched.step()
        losses.append(float(loss.item()))
        tokens += int(batch["attention_mask"].sum())
        supervised += int((batch["labels"][:, 1:] != -100).sum())
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
        if (step + 1) % log_every == 0 or step == 0 or step + 1 == steps:
            logger.info("%s step %d/%d loss %.4f lr %.2e", desc, step + 1, steps, losses[-1], lr_now)
    model.eval()
    wall = time.perf_counter() - t0
    return {"losses": losses, "tokens": tokens, "supervised_tokens": supervised, "train_s": wall}
