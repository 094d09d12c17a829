"""Cold start: a short SFT on programmatic judgements, so that GRPO starts from a model that writes the format.

GRPO from a random or weakly trained base never samples a well-formed
``<type>…<answer>X</answer>`` chain, so every reward is 0 and nothing is learnt.
The targets are ``stages.genrm.rationale.rationale`` of each training pair (and of
its A/B swap, against position bias). Resumable: the trained weights are saved
once to the stage's state directory and loaded by a re-run.
"""
from __future__ import annotations

import logging

from stages.common.lm import encode_sft_pair
from stages.common.stage_state import load_state, save_state
from stages.genrm.pairs import swapped
from stages.genrm.rationale import rationale
from stages.genrm.verdict import judge_prompt

STATE = "warm_start.pt"


def encode_pairs(tok, rows: list[dict], max_len: int, swap_augment: bool) -> list[tuple[list[int], list[int]]]:
    out = []
    for r in rows:
        for x in ([r, swapped(r)] if swap_augment else [r]):
            e = encode_sft_pair(tok, judge_prompt(x["prompt"], x["response_a"], x["response_b"]),
                                rationale(x, x["label"]), max_len)
            if e is not None:
                out.append(e)
    return out


def warm_start(model, tok, rows: list[dict], config, state_dir, log: logging.Logger) -> dict:
    """SFT ``model`` in place on the rationales of ``rows`` (or load the weights a killed run saved)."""
    saved = load_state(state_dir, STATE)
    if saved is not None:
        model.load_state_dict(saved["model"])
        log.info("genrm: warm start loaded from %s", state_dir)
        return saved["metrics"]
    if config.steps == 0:
        return {"warm_start_steps": 0}
    from stages.sft.train import train_sft
    encoded = encode_pairs(tok, rows, config.max_len, config.swap_augment)
    m = train_sft(model, tok, encoded, steps=config.steps, batch_size=config.batch_size, lr=config.lr,
                  warmup_steps=config.warmup_steps, weight_decay=0.0, grad_clip=config.grad_clip, seed=config.seed,
                  log_every=config.log_every, logger=log, desc="genrm warm start")
    losses = m["losses"]
    k = min(5, len(losses))
    metrics = {"warm_start_steps": config.steps, "warm_start_examples": len(encoded),
               "warm_start_loss_first5_mean": sum(losses[:k]) / k, "warm_start_loss_last5_mean": sum(losses[-k:]) / k}
    save_state(state_dir, STATE, {"model": model.state_dict(), "metrics": metrics})
    return metrics
