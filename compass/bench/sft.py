"""SFT throughput: packed vs padded rows, torch vs megatron backend, and TRL's SFTTrainer, side by side.

Setup: the world of ``configs/tiny.yaml`` (its tokenizer and tiny Qwen3-MoE), its SFT rows
(planted bad rows left out; Long-CoT and domain answers, so lengths vary), encoded with the
chat template (loss on the answer only). A fixed share is held out by id hash. Every run starts
from the same weights and takes the same number of optimizer steps with AdamW, warmup + cosine
to 0.1 × lr and gradient clipping:

- ``ours torch packed``, ``ours torch padded`` and ``ours megatron packed`` / ``padded``:
  ``compass.lm.sft.train.train_sft`` with ``batch_size`` samples per step.
- ``TRL padded``: TRL's ``SFTTrainer`` on the same encoded samples (``input_ids`` +
  ``completion_mask``, so the same loss: token mean over answer tokens), ``batch_size`` samples
  per step, right-padded batches; fp32, no load-balancing loss and no gradient checkpointing
  (TRL's default is on), as ours.
- ``TRL packed``: ``packing=True`` (TRL's default BFD strategy: samples packed into sequences of
  at most ``max_length`` = our ``pack_len``; padding-free, so a batch is one flattened row with
  a packed-sequence mask). Its batch counts packed sequences, so it is set to give about as many
  tokens per step as the other runs.

Speed is real (unpadded) tokens per second of training (held-out scoring excluded), also per
CPU second of this process, which load from other processes disturbs less. Every run's model
is then scored on the same held-out rows with one forward (transformers, one sample per row),
so a faster run that learned less shows. Ratios only: absolute CPU times say little.
"""
from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import tempfile
import time

import torch

PACK_LEN = 256


def build_data(quick: bool, seed: int):
    """(model, tok, train samples, held-out samples, world config) from the default world."""
    from compass.cli.main import default_config
    from compass.config import read_yaml, validate
    from compass.lm.holdout import split_holdout
    from compass.lm.model_factory import build_model, build_tokenizer
    from compass.lm.sft.train import encode_split
    from stages.world.build import build_world
    from stages.world.config import WorldConfig

    raw = read_yaml(default_config(), "world")
    if quick:
        raw = {**raw, "suites": {"arithmetic": {"n": 60, "n_eval": 0}}, "n_preference_pairs": 0, "n_planted": 0}
    cfg = validate(WorldConfig, raw)
    world = build_world(cfg)
    tok = build_tokenizer(world.texts(), cfg.tokenizer)
    model = build_model(cfg.model, tok, cfg.seed + seed)
    bad = {i for rows in world.planted.get("raw_sft", {}).values() for i in rows}
    rows = [r for i, r in enumerate(world.raw_sft.to_pylist()) if i not in bad]
    held = split_holdout([r["id"] for r in rows], 0.05, 8)        # the SFT stage's split and encoding
    train, heldout, _ = encode_split(tok, [r["prompt"] for r in rows], [r["response"] for r in rows], held, PACK_LEN)
    return model, tok, train, heldout, cfg


def heldout_loss(model, tok, heldout) -> float:
    from compass.lm.sft.train import TorchSFT, mean_loss
    model.eval()
    return mean_loss(TorchSFT(model, tok.pad_token_id, packing=False, pack_len=None), heldout)


def run_ours(model, tok, train, args, backend: str, packing: bool) -> dict:
    from compass.lm.sft.train import train_sft
    log = logging.getLogger("compass.bench.sft")
    m = train_sft(model, tok, train, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                  warmup_steps=args.warmup_steps, weight_decay=0.0, grad_clip=1.0, seed=args.seed,
                  log_every=10 ** 9, logger=log, desc=f"{backend} {'packed' if packing else 'padded'}",
                  min_lr_ratio=0.1, packing=packing, pack_len=PACK_LEN, backend=backend)
    return {"train_s": m["train_s"], "cpu_s": m["train_cpu_s"], "tokens": m["tokens"], "padded_tokens": m["padded_tokens"],
            "mode": m["mode"]}


class _Counter:
    """Wraps TRL's collator to count real and computed tokens."""

    def __init__(self, collator):
        self.collator, self.tokens, self.padded = collator, 0, 0

    def __call__(self, examples):
        batch = self.collator(examples)
        self.tokens += sum(len(e["input_ids"]) for e in examples)
        self.padded += int(batch["input_ids"].numel())
        return batch


def run_trl(model, tok, train, args, packing: bool) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    ds = Dataset.from_list([{"input_ids": ids, "completion_mask": [int(y != -100) for y in labels]}
                            for ids, labels in train])
    mean_len = sum(len(ids) for ids, _ in train) / len(train)
    # packed: a batch counts rows of PACK_LEN tokens; match the samples-per-step runs' tokens per step
    batch = max(1, round(args.batch_size * mean_len / PACK_LEN)) if packing else args.batch_size
    step_s: list[float] = []
    step_cpu: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0, self.c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, *a, **k):
            step_s.append(time.perf_counter() - self.t0)
            step_cpu.append(time.process_time() - self.c0)

    with tempfile.TemporaryDirectory() as out:
        cfg = SFTConfig(output_dir=out, max_steps=args.steps, per_device_train_batch_size=batch,
                        gradient_accumulation_steps=1, learning_rate=args.lr, weight_decay=0.0, max_grad_norm=1.0,
                        lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs={"min_lr_rate": 0.1},
                        warmup_steps=args.warmup_steps, use_cpu=True, bf16=False, fp16=False,
                        logging_strategy="no", save_strategy="no", report_to="none", disable_tqdm=True,
                        dataloader_num_workers=0, seed=args.seed, completion_only_loss=True,
                        packing=packing, max_length=PACK_LEN, pad_token=tok.pad_token,
                        router_aux_loss_coef=0.0,        # no load-balancing loss, as ours
                        gradient_checkpointing=False)    # TRL's default is on; ours never recomputes
        trainer = SFTTrainer(model=model, args=cfg, train_dataset=ds, processing_class=tok, callbacks=[Timer()])
        counter = _Counter(trainer.data_collator)
        trainer.data_collator = counter
        trainer.train()
    # Step time from on_step_begin to on_step_end: forward, backward, clip, AdamW and the scheduler.
    # TRL's dataloader collates the batch before on_step_begin, so its collation is outside; ours
    # packs inside the step, so this leans, if anything, towards TRL.
    return {"train_s": sum(step_s), "cpu_s": sum(step_cpu), "tokens": counter.tokens, "padded_tokens": counter.padded,
            "mode": f"packed (bfd, {batch} rows/step)" if packing else "padded"}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench sft", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="optimizer steps per run")
    ap.add_argument("--batch-size", type=int, default=16, help="samples per step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup-steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (all runs)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-trl", action="store_true", help="leave TRL's SFTTrainer out")
    ap.add_argument("--quick", action="store_true", help="a seconds-long run for tests (small world, 3 steps)")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.batch_size, args.warmup_steps = 3, 8, 1
    if args.steps < 1 or args.batch_size < 1:
        ap.error("need --steps >= 1 and --batch-size >= 1")
    os.environ.setdefault("COMPASS_PROGRESS", "0")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.set_num_threads(args.threads)
    import warnings
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)

    base, tok, train, heldout, wcfg = build_data(args.quick, args.seed)
    runs = [("ours torch packed", "torch", True), ("ours torch padded", "torch", False),
            ("ours megatron packed", "megatron", True), ("ours megatron padded", "megatron", False)]
    if not args.no_trl:
        runs += [("TRL padded", "trl", False), ("TRL packed", "trl", True)]
    results: dict[str, dict] = {}
    for name, backend, packing in runs:
        model = copy.deepcopy(base)
        r = run_trl(model, tok, train, args, packing) if backend == "trl" else \
            run_ours(model, tok, train, args, backend, packing)
        r["heldout_loss"] = heldout_loss(model, tok, heldout)
        r["tokens_per_s"] = r["tokens"] / max(r["train_s"], 1e-9)
        r["tokens_per_cpu_s"] = r["tokens"] / max(r["cpu_s"], 1e-9)
        results[name] = r
        print(f"  {name}: {r['tokens_per_s']:.0f} tok/s, held-out loss {r['heldout_loss']:.4f}", flush=True)

    import trl
    m = wcfg.model
    lens = [len(ids) for ids, _ in train]
    print(f"\n# SFT throughput: tiny {m.arch} (hidden {m.hidden_size}, {m.num_layers} layers, {m.num_experts} experts "
          f"top-{m.experts_per_token}), {args.threads} torch thread(s); TRL {trl.__version__}\n")
    print(f"{len(train)} training samples ({min(lens)}-{max(lens)} tokens, mean {sum(lens) / len(lens):.0f}), "
          f"{len(heldout)} held out; {args.steps} steps x {args.batch_size} samples, lr {args.lr}, pack_len {PACK_LEN}\n")
    print("| run | forward | real tokens | computed tokens | efficiency | train s | tokens/s | tokens/CPU s | "
          "held-out loss |\n|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['mode']} | {r['tokens']} | {r['padded_tokens']} | "
              f"{r['tokens'] / max(r['padded_tokens'], 1):.2f} | {r['train_s']:.1f} | {r['tokens_per_s']:.0f} | "
              f"{r['tokens_per_cpu_s']:.0f} | {r['heldout_loss']:.4f} |")
    before = heldout_loss(base, tok, heldout)          # base is never trained: each run got a copy
    print(f"\nHeld-out loss before training: {before:.4f}")

    def ratio(a: str, b: str, key: str = "tokens_per_s") -> float | None:
        if a in results and b in results:
            return round(results[a][key] / results[b][key], 3)
        return None

    trl_best = max((n for n in results if n.startswith("TRL")), key=lambda n: results[n]["tokens_per_s"], default=None)
    head = {"bench": "sft", "steps": args.steps, "batch_size": args.batch_size, "threads": args.threads,
            "tokens_per_s": {n: round(r["tokens_per_s"], 1) for n, r in results.items()},
            "heldout_loss": {n: round(r["heldout_loss"], 4) for n, r in results.items()},
            "heldout_loss_before": round(before, 4),
            "packed_vs_padded": ratio("ours torch packed", "ours torch padded"),
            "megatron_vs_torch_packed": ratio("ours megatron packed", "ours torch packed"),
            "ours_vs_trl_padded": ratio("ours torch padded", "TRL padded"),
            "ours_vs_trl_best": ratio("ours torch packed", trl_best) if trl_best else None,
            "ours_vs_trl_best_cpu": ratio("ours torch packed", trl_best, "tokens_per_cpu_s") if trl_best else None,
            "trl_best": trl_best}
    print(f"\npacked vs padded (ours, torch): {head['packed_vs_padded']}x tokens/s; megatron vs torch (packed): "
          f"{head['megatron_vs_torch_packed']}x; ours packed vs {trl_best}: {head['ours_vs_trl_best']}x "
          f"(per CPU s: {head['ours_vs_trl_best_cpu']}x); padded vs padded: {head['ours_vs_trl_padded']}x")
    print(json.dumps(head))
    return 0
