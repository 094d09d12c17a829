"""GenRM stage: a generative judge of preference pairs with ternary verdicts, beside a Bradley–Terry baseline.

1. **Screen** the pairs: a label outside {A, B, TIE} or an empty prompt/response goes to the
   ``quarantine`` output with its reason (``stages.genrm.pairs``); pairs too long are counted.
2. **Split** by a hash of the id: ``holdout_fraction`` of the pairs are never trained on.
3. **Warm start** (``stages.genrm.warm_start``): SFT on programmatic judgements
   ``<type>…</type><rubric>…</rubric><eval>…</eval><answer>X</answer>``.
4. **GRPO** (``stages.genrm.grpo``) with the RL engine: reward 1[verdict == label] (paper §2.5.2).
5. **Bradley–Terry** baseline (``stages.genrm.bradley_terry``) from the same base on the same pairs.
6. **Held-out evaluation** (``stages.genrm.evaluate``): both orders of every pair → accuracy, tie
   accuracy, swap consistency (``judgements`` output), and advantage flips (``compass.rl.algos.advantage_flips``).

Steps 3-5 are resumable after SIGKILL (``compass.runtime.stage_state``); ``summary.md`` goes in the checkpoint.
"""
from __future__ import annotations

import collections
import json
import logging

import pyarrow as pa
import torch

from compass.lm.model_factory import load_checkpoint, save_checkpoint
from compass.runtime.runner import StageInputError
from compass.runtime.stage_state import load_state, save_state, state_dir_for
from compass.store.store import Artifact, ArtifactWriter
from stages.genrm import evaluate as ev
from stages.genrm.bradley_terry import ScalarRM, choose_tie_threshold, train_bt
from stages.genrm.config import GenRMConfig
from stages.genrm.grpo import run_grpo
from stages.genrm.pairs import screen_pairs, split_pairs
from stages.genrm.summary import render
from stages.genrm.warm_start import warm_start
from artifacts_schema.tables import TABLE_SCHEMAS

log = logging.getLogger("compass.genrm")
BT_FILE = "bradley_terry.pt"     # the baseline: in the state dir while training, then in the checkpoint folder


def bradley_terry(base_dir, train: list[dict], config: GenRMConfig, state_dir) -> tuple[ScalarRM, dict]:
    """The BT baseline from ``base_dir`` trained on the non-tie ``train`` pairs, τ chosen on all of ``train``."""
    lm, tok = load_checkpoint(base_dir)
    torch.manual_seed(config.seed)
    rm = ScalarRM(lm)
    saved = load_state(state_dir, BT_FILE)
    if saved is not None:
        rm.load_state_dict(saved["model"])
        return rm, saved["metrics"]
    encoded = ev.bt_encode(tok, train)      # tokenized once: the training pairs here, the τ scores below
    enc = []
    for r, (a, b) in zip(train, encoded):
        if r["label"] == "TIE":
            continue
        w, lo = (a, b) if r["label"] == "A" else (b, a)
        if len(w) <= config.max_len and len(lo) <= config.max_len:     # as encode_response(..., max_len)
            enc.append((w, lo))
    losses = train_bt(rm, tok, enc, steps=config.bt.steps, batch_size=config.bt.batch_size, lr=config.bt.lr,
                      seed=config.seed, log=log) if enc and config.bt.steps else []
    scores = ev.bt_scores(rm, tok, train, config.max_len, encoded)
    tau, acc = choose_tie_threshold([a - b for a, b in scores], [r["label"] for r in train])
    k = min(5, len(losses)) or 1
    metrics = {"bt_steps": len(losses), "bt_train_pairs": len(enc), "bt_tau": tau, "bt_train_accuracy": acc,
               "bt_loss_first5_mean": sum(losses[:k]) / k if losses else None,
               "bt_loss_last5_mean": sum(losses[-k:]) / k if losses else None}
    save_state(state_dir, BT_FILE, {"model": rm.state_dict(), "metrics": metrics})
    return rm, metrics


def _body(config: GenRMConfig, inputs: dict[str, Artifact], outputs: dict[str, ArtifactWriter]) -> None:
    torch.manual_seed(config.seed)
    src = inputs["pairs"]
    table = src.read_table()
    usable, bad = screen_pairs(table.to_pylist(), src.uri)
    quarantine = TABLE_SCHEMAS["quarantine"]
    outputs["quarantine"].write_table(pa.Table.from_pylist(bad, schema=quarantine) if bad
                                      else quarantine.empty_table())
    reasons = collections.Counter(q["field"] for q in bad)
    if bad:
        log.warning("genrm: quarantined %d of %d row(s) of %s: %s", len(bad), table.num_rows, src.uri,
                    [q["reason"] for q in bad[:5]])
    base_dir = inputs["base"].local_dir()
    model, tok = load_checkpoint(base_dir)
    limit = min(config.max_len, model.config.max_position_embeddings) - max(config.max_new_tokens,
                                                                             config.grpo.rollout.max_new_tokens)
    fits = [r for r in usable if ev.fits_context(tok, r, limit)]
    too_long = len(usable) - len(fits)
    train, held = split_pairs(fits, config.holdout_fraction, config.seed)
    if not train:
        raise StageInputError(f"genrm: no usable training pair in {src.uri}: {table.num_rows} row(s), "
                              f"{len(bad)} quarantined ({dict(reasons)}), {too_long} too long for max_len="
                              f"{config.max_len}, {len(held)} held out")
    ckpt = outputs["checkpoint"]
    state = state_dir_for(ckpt)
    m = {"rows": table.num_rows, "quarantined": len(bad), "quarantine_reasons": dict(reasons),
         "skipped_too_long": too_long, "train_pairs": len(train), "holdout_pairs": len(held),
         "label_counts_train": dict(collections.Counter(r["label"] for r in train)),
         "format_reward": config.format_reward}
    m.update(warm_start(model, tok, train, config, state, log))
    res = run_grpo(model, tok, train, config, state / "grpo", ckpt.dir, log)
    s = res.summary()
    m.update({"grpo_steps": s["steps"], "grpo_reward_first": s["reward_mean_first"],
              "grpo_reward_last": s["reward_mean_last"], "grpo_tokens": s["tokens"],
              "grpo_reward_curve": [round(x["reward_mean"], 4) for x in res.metrics]})
    rm, bt_m = bradley_terry(base_dir, train, config, state) if config.bt.steps else (None, {})
    m.update(bt_m)

    eval_rows = held if not config.eval_pairs else held[:config.eval_pairs]
    g_rows, n_fmt = ev.genrm_judgements(model, tok, eval_rows, max_new_tokens=config.max_new_tokens)
    g = ev.judge_metrics(g_rows)
    m["genrm_format_rate"] = n_fmt / (2 * len(eval_rows)) if eval_rows else None
    bt_rows, bt, flips = [], None, None
    if rm is not None:
        scores = ev.bt_scores(rm, tok, eval_rows, config.max_len)
        bt_rows = ev.bt_judgements(scores, eval_rows, m["bt_tau"])
        bt = ev.judge_metrics(bt_rows)
        with_ref = [i for i, r in enumerate(eval_rows) if r.get("reference")]
        if with_ref:
            rows_ref = [eval_rows[i] for i in with_ref]
            flips = ev.count_flips(rows_ref, [scores[i] for i in with_ref],
                                   ev.genrm_reference_rewards(model, tok, rows_ref,
                                                              max_new_tokens=config.max_new_tokens),
                                   config.flip_examples)
    outputs["judgements"].write_table(pa.Table.from_pylist(g_rows + bt_rows, schema=TABLE_SCHEMAS["judgements"])
                                      if g_rows or bt_rows else TABLE_SCHEMAS["judgements"].empty_table())
    head = {"genrm_accuracy": g["accuracy"], "genrm_tie_accuracy": g["tie_accuracy"],
            "genrm_non_tie_accuracy": g["non_tie_accuracy"], "genrm_swap_consistency": g["swap_consistency"],
            "genrm_format_rate": m["genrm_format_rate"], "eval_pairs": g["pairs"], "eval_ties": g["ties"],
            "genrm_consistent_accuracy": g["consistent_accuracy"],
            "genrm_consistent_tie_accuracy": g["consistent_tie_accuracy"],
            "genrm_consistent_non_tie_accuracy": g["consistent_non_tie_accuracy"],
            "genrm_accuracy_se": g["accuracy_se"], "genrm_tie_accuracy_se": g["tie_accuracy_se"],
            "bt_accuracy_se": bt and bt["accuracy_se"], "bt_tie_accuracy_se": bt and bt["tie_accuracy_se"],
            "bt_accuracy": bt and bt["accuracy"], "bt_tie_accuracy": bt and bt["tie_accuracy"],
            "bt_non_tie_accuracy": bt and bt["non_tie_accuracy"],
            "bt_flips": flips and flips["bradley_terry"]["flips"], "genrm_flips": flips and flips["genrm"]["flips"],
            "flips_avoided": flips and flips["flips_avoided"]}
    m.update(head)
    log.info("genrm: held-out accuracy %s (tie %s) vs Bradley-Terry %s (tie %s); flips BT %s, GenRM %s",
             g["accuracy"], g["tie_accuracy"], head["bt_accuracy"], head["bt_tie_accuracy"], head["bt_flips"],
             head["genrm_flips"])
    save_checkpoint(model, tok, ckpt.dir, meta={"stage": "genrm", "judge_format": "compass.gym.genrm_verdict", **m})
    if rm is not None:      # the baseline beside the judge, for benchmarks: ScalarRM(base).load_state_dict
        torch.save({"head": rm.head.state_dict(), "lm": rm.lm.state_dict(), "tau": m["bt_tau"]},
                   ckpt.dir / BT_FILE)
    (ckpt.dir / "summary.md").write_text(render(m, g, bt, flips))
    if flips:
        (ckpt.dir / "flip_examples.json").write_text(json.dumps(flips["examples"], indent=1, ensure_ascii=False))
    for w in outputs.values():
        w.extra.update(head)
    ckpt.extra.update({k: v for k, v in m.items() if k not in head})


from stages.genrm.spec import SPEC, run  # noqa: E402,F401  (the stage's public contract)
