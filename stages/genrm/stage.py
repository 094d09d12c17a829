"""GenRM stage (provisional): teach a checkpoint to judge preference pairs with a ternary verdict.

The minimal version builds a judge prompt from each (prompt, response_a,
response_b) row (``stages.genrm.verdict.judge_prompt``) and runs real
supervised AdamW steps towards the completion ``<answer>A</answer>``,
``<answer>B</answer>`` or ``<answer>TIE</answer>`` (optionally also on the
A/B-swapped pair, against position bias). Rows whose label is not A, B or TIE,
and rows too long for ``max_len``, are skipped and counted, never fatal. The
greedy verdict accuracy and format rate on the training pairs, before and
after training, go in the manifest. The full version trains the judge with
GRPO on ternary verdicts (reward 1 for the right verdict, with a thinking
trace before it) and reports a Bradley-Terry reward-model baseline beside it.
"""
from __future__ import annotations

import collections
import logging
import random

import torch

from stages.common.lm import encode_sft_pair, sample
from stages.common.model_factory import load_checkpoint, save_checkpoint
from stages.common.runner import StageInputError
from stages.common.store import Artifact, ArtifactWriter
from stages.genrm.config import GenRMConfig
from stages.genrm.verdict import SWAP, judge_prompt, normalize_label, parse_verdict, verdict_text
from stages.sft.train import train_sft

PROVISIONAL = True
log = logging.getLogger("compass.genrm")


def judge(model, tok, rows: list[dict], *, max_new_tokens: int, batch_size: int = 16) -> list[str | None]:
    """Greedy verdicts (None when the output has no ``<answer>A|B|TIE</answer>``)."""
    out = []
    for i in range(0, len(rows), batch_size):
        chunk = rows[i:i + batch_size]
        gens = sample(model, tok, [judge_prompt(r["prompt"], r["response_a"], r["response_b"]) for r in chunk],
                      n=1, max_new_tokens=max_new_tokens, temperature=0.0)
        out.extend(parse_verdict(g[0]["text"]) for g in gens)
    return out


def _encode(tok, row: dict, max_len: int):
    return encode_sft_pair(tok, judge_prompt(row["prompt"], row["response_a"], row["response_b"]),
                           verdict_text(row["label"]), max_len)


def _score(verdicts: list[str | None], rows: list[dict]) -> dict:
    n = len(rows)
    if not n:
        return {"accuracy": None, "format_rate": None}
    return {"accuracy": sum(v == r["label"] for v, r in zip(verdicts, rows)) / n,
            "format_rate": sum(v is not None for v in verdicts) / n}


def _body(config: GenRMConfig, inputs: dict[str, Artifact], outputs: dict[str, ArtifactWriter]) -> None:
    torch.manual_seed(config.seed)
    model, tok = load_checkpoint(inputs["base"].local_dir())
    table = inputs["pairs"].read_table()
    rows, bad = [], collections.Counter()
    for r in table.select(["prompt", "response_a", "response_b", "label"]).to_pylist():
        label = normalize_label(r["label"])
        if label is None:
            bad[repr(r["label"])] += 1
            continue
        rows.append({**r, "label": label})
    if bad:
        log.warning("genrm: skipped %d row(s) of %s with a label other than A/B/TIE: %s", sum(bad.values()),
                    inputs["pairs"].uri, dict(bad.most_common(5)))
    usable, encoded, too_long = [], [], 0
    for r in rows:
        e = _encode(tok, r, config.max_len)
        if e is None:
            too_long += 1
            continue
        usable.append(r)
        encoded.append(e)
        if config.swap_augment:
            swapped = _encode(tok, {"prompt": r["prompt"], "response_a": r["response_b"],
                                    "response_b": r["response_a"], "label": SWAP[r["label"]]}, config.max_len)
            if swapped is not None:
                encoded.append(swapped)
    if not encoded:
        raise StageInputError(f"genrm: no usable preference pair in {inputs['pairs'].uri}: {table.num_rows} row(s), "
                              f"{sum(bad.values())} with a bad label, {too_long} judge input(s) longer than "
                              f"max_len={config.max_len}")
    if too_long:
        log.warning("genrm: skipped %d pair(s) whose judge input is longer than max_len=%d", too_long, config.max_len)
    # Judge pairs it trained on, in a seeded order.
    eval_rows = random.Random(config.seed).sample(usable, min(config.eval_pairs, len(usable)))
    before = _score(judge(model, tok, eval_rows, max_new_tokens=config.max_new_tokens), eval_rows)
    m = train_sft(model, tok, encoded, steps=config.steps, batch_size=config.batch_size, lr=config.lr,
                  warmup_steps=config.warmup_steps, weight_decay=0.0, grad_clip=config.grad_clip, seed=config.seed,
                  log_every=config.log_every, logger=log, desc="genrm")
    verdicts = judge(model, tok, eval_rows, max_new_tokens=config.max_new_tokens)
    after = _score(verdicts, eval_rows)
    labels = collections.Counter(r["label"] for r in usable)
    losses = m["losses"]
    k = min(5, len(losses))
    metrics = {
        "rows": table.num_rows,
        "rows_used": len(usable),
        "skipped_bad_label": sum(bad.values()),
        "bad_label_values": dict(bad.most_common(10)),
        "skipped_too_long": too_long,
        "train_examples": len(encoded),
        "label_counts": {v: labels.get(v, 0) for v in ("A", "B", "TIE")},
        "majority_share": max(labels.values()) / len(usable),
        "steps": config.steps,
        "loss_first": losses[0], "loss_last": losses[-1],
        "loss_first5_mean": sum(losses[:k]) / k, "loss_last5_mean": sum(losses[-k:]) / k,
        "tokens": m["tokens"],
        "eval_pairs": len(eval_rows),
        "verdict_accuracy": after["accuracy"], "verdict_format_rate": after["format_rate"],
        "verdict_accuracy_before": before["accuracy"], "verdict_format_rate_before": before["format_rate"],
        "verdict_counts": dict(collections.Counter(str(v) for v in verdicts)),
    }
    log.info("genrm: %d pairs (%d bad label, %d too long), loss %.3f -> %.3f, greedy verdict accuracy %s "
             "(format %s) on %d training pairs; before: %s (format %s)", len(usable), sum(bad.values()), too_long,
             metrics["loss_first5_mean"], metrics["loss_last5_mean"], after["accuracy"], after["format_rate"],
             len(eval_rows), before["accuracy"], before["format_rate"])
    out = outputs["checkpoint"]
    save_checkpoint(model, tok, out.dir, meta={"stage": "genrm", "provisional": PROVISIONAL,
                                                "judge_format": "stages.genrm.verdict", **metrics})
    out.extra.update(metrics)


from stages.genrm.spec import SPEC, run  # noqa: E402,F401  (the stage's public contract)
