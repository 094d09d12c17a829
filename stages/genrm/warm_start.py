"""Cold start: a short SFT on programmatic judgements, so that GRPO starts from a model that writes the format.

GRPO from a random or weakly trained base never samples a well-formed
``<type>…<answer>X</answer>`` chain, so every reward is 0 and nothing is learnt.
The targets are ``stages.genrm.rationale.rationale`` of each training pair (and of
its A/B swap, against position bias). Resumable: the trained weights are saved
once to the stage's state directory and loaded by a re-run.
"""
from __future__ import annotations

import logging

from compass.lm.chat import encode_sft_pair
from compass.runtime.stage_state import load_state, save_state
from stages.genrm.pairs import swapped
from stages.genrm.rationale import final_answer, rationale
from compass.gym.genrm_verdict import judge_prompt

STATE = "warm_start.pt"


def reference_pair(row: dict, index: int) -> dict | None:
    """A teacher-made pair: one of ``row``'s responses against the bare reference answer (None without a
    reference). Response A of the pair for even ``index``, else B; the reference goes in position B for
    ``index % 4 < 2``, else A. Label: TIE when the response's final answer is the reference's, else the
    reference wins.

    Why: the world's pairs are 20% ties, too few for a tiny judge to learn the comparison step of
    the rationale (it copies both final answers right, then writes ``differ`` under two equal ones).
    These pairs are half ties and half not, with the same texts on one side, so only comparing the
    two copied answers predicts the label. Training data only: the judge's prompt at evaluation is
    (question, A, B), never the reference."""
    ref = str(row.get("reference") or "").strip()
    if not ref:
        return None
    resp = row["response_a"] if index % 2 == 0 else row["response_b"]
    label = "TIE" if final_answer(resp) == final_answer(ref) else "B"
    pair = {**row, "response_a": resp, "response_b": ref, "label": label}
    return pair if index % 4 < 2 else swapped(pair)


def warm_rows(rows: list[dict], swap_augment: bool, reference_pairs: bool) -> list[dict]:
    """The warm start's training pairs: each pair, its A/B swap, and one reference pair (each optional)."""
    out = []
    for i, r in enumerate(rows):
        out.extend([r, swapped(r)] if swap_augment else [r])
        extra = reference_pair(r, i) if reference_pairs else None
        if extra is not None:
            out.append(extra)
    return out


def encode_pairs(tok, rows: list[dict], max_len: int, swap_augment: bool,
                 reference_pairs: bool = False) -> list[tuple[list[int], list[int]]]:
    out = []
    for x in warm_rows(rows, swap_augment, reference_pairs):
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
    from compass.lm.sft.train import train_sft
    encoded = encode_pairs(tok, rows, config.max_len, config.swap_augment, config.reference_pairs)
    m = train_sft(model, tok, encoded, steps=config.steps, batch_size=config.batch_size, lr=config.lr,
                  warmup_steps=config.warmup_steps, weight_decay=0.0, grad_clip=config.grad_clip, seed=config.seed,
                  log_every=config.log_every, logger=log, desc="genrm warm start", packing=config.packing,
                  min_lr_ratio=config.min_lr_ratio, device=config.device, precision=config.precision,
                  ranks=config)
    losses = m["losses"]
    k = min(5, len(losses))
    metrics = {"warm_start_steps": config.steps, "warm_start_examples": len(encoded),
               "warm_start_loss_first5_mean": sum(losses[:k]) / k, "warm_start_loss_last5_mean": sum(losses[-k:]) / k}
    save_state(state_dir, STATE, {"model": model.state_dict(), "metrics": metrics})
    return metrics
