"""``compass bench genrm``: the GenRM stage against its Bradley–Terry baseline on held-out world pairs.

A world with more preference pairs than the tiny pipeline (``--pairs``, tie share
``--tie-fraction``; the suites with a second correct wording: arithmetic and e-commerce
multiple choice) goes into a temporary store with a base checkpoint, and the real
``genrm`` stage runs on it: warm start on programmatic judgements, GRPO on verdict
correctness, the BT baseline from the same base on the same training pairs, both judged
on the held-out pairs (by a hash of the id) in both orders, and advantage flips counted
on the held-out pairs as GRPO groups (``compass.rl.algos.advantage_flips``).

``--base random`` starts from the world's random init (what the tiny pipeline gives the
stage); ``--base sft`` first runs ``--sft-steps`` of SFT on the world's SFT rows (a
"reasoning-capable" base, as the paper's distilled model; cached under ``--cache``).
``--pandalm`` also judges the PandaLM test pairs (``../shared/data/pref_pandalm``,
majority of 3 annotators, ties included) with both trained judges: with the tiny
world tokenizer and model this only checks the plumbing (real English is mostly
byte tokens to it, and most pairs are longer than its context, so they are skipped).
The last line is one JSON object.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import logging
import math
import tempfile
import time
from pathlib import Path

import torch

PANDALM = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "pref_pandalm" / "testset-v1.json"


def _world(args):
    from stages.world.build import build_world
    from stages.world.config import WorldConfig
    cfg = WorldConfig(seed=args.seed, suites={"arithmetic": {"n": args.n_sft, "n_eval": 8},
                                              "ecommerce_category": {"n": args.n_sft, "n_eval": 8}},
                      n_planted=0, n_preference_pairs=args.pairs, tie_fraction=args.tie_fraction)
    return cfg, build_world(cfg)


def _base(args, wcfg, world, out: Path, log):
    from compass.lm.model_factory import build_model, build_tokenizer, load_checkpoint, save_checkpoint
    tok = build_tokenizer(world.texts(), wcfg.tokenizer)
    model = build_model(wcfg.model, tok, wcfg.seed)
    if args.base == "random":
        save_checkpoint(model, tok, out)
        return out
    key = hashlib.sha256(json.dumps([wcfg.model_dump(mode="json"), args.sft_steps, "packed-cosine"]).encode()).hexdigest()[:12]
    cache = Path(args.cache) / f"genrm-sft-{key}"
    if not (cache / "config.json").exists():
        from compass.lm.sft.train import encode_table, train_sft
        t = world.raw_sft
        enc, _ = encode_table(tok, t.column("prompt").to_pylist(), t.column("response").to_pylist(), 256)
        t0 = time.perf_counter()
        train_sft(model, tok, enc, steps=args.sft_steps, batch_size=16, lr=1e-3, warmup_steps=10, weight_decay=0.0,
                  grad_clip=1.0, seed=0, log_every=100, logger=log, desc="sft", packing=True, min_lr_ratio=0.1)
        print(f"base SFT: {args.sft_steps} steps in {time.perf_counter() - t0:.0f}s", flush=True)
        save_checkpoint(model, tok, cache)
    model, tok = load_checkpoint(cache)
    save_checkpoint(model, tok, out)
    return out


def _genrm_config(args):
    from stages.genrm.config import BradleyTerryConfig, GenRMConfig
    from compass.rl.config import RLConfig
    return GenRMConfig(seed=args.seed, holdout_fraction=args.holdout, steps=args.warm_steps, batch_size=16,
                       lr=args.warm_lr, warmup_steps=10, min_lr_ratio=0.1, reference_pairs=not args.no_reference_pairs,
                       packing=True, eval_pairs=0, max_new_tokens=args.max_new_tokens, log_every=50,
                       grpo=RLConfig(seed=args.seed, steps=args.grpo_steps, checkpoint_every=0,
                                     sampling={"prompts_per_step": args.grpo_prompts, "group_size": args.grpo_group},
                                     rollout={"temperature": args.grpo_temperature,
                                              "max_new_tokens": args.max_new_tokens},
                                     trainer={"lr": args.grpo_lr}),
                       bt=BradleyTerryConfig(steps=args.bt_steps, batch_size=16, lr=args.bt_lr), flip_examples=3)


def _pandalm_rows(path: Path) -> list[dict]:
    rows = []
    for d in json.loads(path.read_text()):
        votes = [d.get(f"annotator{i}") for i in (1, 2, 3)]
        best = max(set(votes), key=votes.count)
        if votes.count(best) < 2:
            continue
        prompt = str(d["instruction"]) + (("\n" + str(d["input"])) if d.get("input") else "")
        rows.append({"id": f"pandalm-{d['idx']}", "prompt": prompt, "response_a": str(d["response1"] or ""),
                     "response_b": str(d["response2"] or ""), "label": {1: "A", 2: "B", 0: "TIE"}[best], "row_index": d["idx"]})
    return rows


def _pandalm(ckpt: Path, args) -> dict:
    """Both judges on the PandaLM pairs that fit the judge's context."""
    from compass.lm.model_factory import load_checkpoint
    from stages.genrm import evaluate as ev
    from stages.genrm.bradley_terry import ScalarRM
    from stages.genrm.stage import BT_FILE
    model, tok = load_checkpoint(ckpt)
    rows = _pandalm_rows(PANDALM)
    limit = model.config.max_position_embeddings - args.max_new_tokens
    fit = [r for r in rows if ev.fits_context(tok, r, limit)][:args.pandalm_max]
    g_rows, n_fmt = ev.genrm_judgements(model, tok, fit, max_new_tokens=args.max_new_tokens)
    out = {"pandalm_pairs": len(rows), "pandalm_fit": len(fit), "pandalm_ties": sum(r["label"] == "TIE" for r in fit),
           "pandalm_genrm_format_rate": n_fmt / (2 * len(fit)) if fit else None,
           **{f"pandalm_genrm_{k}": v for k, v in ev.judge_metrics(g_rows).items() if "accuracy" in k}}
    saved = torch.load(ckpt / BT_FILE, weights_only=False)
    rm = ScalarRM(copy.deepcopy(model))        # the same architecture; its weights come from the file
    rm.lm.load_state_dict(saved["lm"])
    rm.head.load_state_dict(saved["head"])
    b_rows = ev.bt_judgements(ev.bt_scores(rm, tok, fit, model.config.max_position_embeddings), fit, saved["tau"])
    out.update({f"pandalm_bt_{k}": v for k, v in ev.judge_metrics(b_rows).items() if "accuracy" in k})
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench genrm", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=1200, help="preference pairs in the world")
    ap.add_argument("--tie-fraction", type=float, default=0.2)
    ap.add_argument("--holdout", type=float, default=0.2, help="share of pairs held out")
    ap.add_argument("--base", choices=("random", "sft"), default="sft")
    ap.add_argument("--sft-steps", type=int, default=600, help="--base sft: SFT steps on the world's SFT rows")
    ap.add_argument("--n-sft", type=int, default=2000, help="SFT rows per suite in the world")
    ap.add_argument("--warm-steps", type=int, default=1500)
    ap.add_argument("--no-reference-pairs", action="store_true", help="warm start on the world's pairs only")
    ap.add_argument("--warm-lr", type=float, default=1e-3)
    ap.add_argument("--grpo-steps", type=int, default=60)
    ap.add_argument("--grpo-lr", type=float, default=1e-4)
    ap.add_argument("--grpo-prompts", type=int, default=8, help="GRPO prompts (groups) per step")
    ap.add_argument("--grpo-group", type=int, default=8, help="GRPO samples per prompt")
    ap.add_argument("--grpo-temperature", type=float, default=1.0)
    ap.add_argument("--bt-steps", type=int, default=300)
    ap.add_argument("--bt-lr", type=float, default=3e-4)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--pandalm", action="store_true", help="also judge the PandaLM pairs (plumbing only)")
    ap.add_argument("--pandalm-max", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "compass-bench"))
    ap.add_argument("--out", default=None, help="keep the store here (default: a temporary directory)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    log = logging.getLogger("compass.bench.genrm")
    t0 = time.perf_counter()
    import os
    os.environ.setdefault("COMPASS_PROGRESS", "0")
    from compass.store.store import ArtifactStore
    from stages.genrm import stage as genrm
    tmp = tempfile.TemporaryDirectory(prefix="bench-genrm-")
    root = Path(args.out or tmp.name)
    os.environ.setdefault("COMPASS_STATE_DIR", str(root / "state"))
    store = ArtifactStore(str(root / "store"))
    meta = dict(producer="bench", stage="bench", config_fingerprint="bench", code_version="bench")
    wcfg, world = _world(args)
    print(f"world: {world.preferences.num_rows} preference pairs ({time.perf_counter() - t0:.0f}s)", flush=True)

    def commit(kind, name, version, fill):
        w = store.begin(kind, name, version, **meta)
        fill(w)
        return w.commit()
    vkey = hashlib.sha256(json.dumps([vars(args)], default=str).encode()).hexdigest()[:12]
    base = commit("checkpoint", "base_ckpt", vkey, lambda w: _base(args, wcfg, world, w.dir, log))
    pairs = commit("preference_pairs", "preference_pairs", vkey, lambda w: w.write_table(world.preferences))
    t1 = time.perf_counter()
    res = genrm.run(_genrm_config(args), {"base": base, "pairs": pairs}, store)
    train_s = time.perf_counter() - t1
    ck = store.open(res.outputs["checkpoint"])
    ex = ck.manifest.extra
    summary = (ck.local_dir() / "summary.md").read_text()
    print(summary)
    rows = [
        ("judge", "overall", "tie", "non-tie", "swap-consistent"),
        ("GenRM", ex["genrm_accuracy"], ex["genrm_tie_accuracy"], ex["genrm_non_tie_accuracy"],
         ex["genrm_swap_consistency"]),
        ("GenRM (swap-cons.)", ex["genrm_consistent_accuracy"], ex["genrm_consistent_tie_accuracy"],
         ex["genrm_consistent_non_tie_accuracy"], 1.0),
        ("Bradley-Terry", ex["bt_accuracy"], ex["bt_tie_accuracy"], ex["bt_non_tie_accuracy"], 1.0),
    ]
    for r in rows:
        print("  ".join(f"{x:>14}" if isinstance(x, str) else f"{100 * x:>13.1f}%" for x in r))
    result = {k: ex.get(k) for k in (
        "genrm_accuracy", "genrm_tie_accuracy", "bt_accuracy", "bt_tie_accuracy", "flips_avoided",
        "genrm_accuracy_se", "genrm_tie_accuracy_se", "bt_accuracy_se", "bt_tie_accuracy_se",
        "genrm_non_tie_accuracy", "bt_non_tie_accuracy", "genrm_swap_consistency", "genrm_format_rate",
        "genrm_consistent_accuracy", "genrm_consistent_tie_accuracy", "genrm_consistent_non_tie_accuracy",
        "bt_flips", "genrm_flips", "eval_pairs", "eval_ties", "train_pairs", "grpo_reward_first",
        "grpo_reward_last", "bt_tau")}
    result.update(base=args.base, warm_steps=args.warm_steps, reference_pairs=not args.no_reference_pairs, pairs=args.pairs, tie_fraction=args.tie_fraction, train_s=round(train_s, 1))
    if args.pandalm:
        if PANDALM.exists():
            result.update(_pandalm(ck.local_dir(), args))
            print("PandaLM (plumbing only with the tiny model):",
                  {k: v for k, v in result.items() if k.startswith("pandalm")})
        else:
            print(f"PandaLM pairs not found at {PANDALM}: skipped")
            result["pandalm_pairs"] = None
    wall = time.perf_counter() - t0
    result["wall_s"] = round(wall, 1)
    print(f"wall time {wall:.0f}s", flush=True)
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else v)
                      for k, v in result.items()}))
    return 0
