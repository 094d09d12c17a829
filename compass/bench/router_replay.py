"""Router Replay benchmark: the train–inference log-prob gap of a tiny MoE policy with and without replay.

Setup (paper §2.4.4 at toy scale): the policy is the world's tiny Qwen3-MoE (hidden 128,
4 layers, 8 experts top-2, head_dim 32). Without ``--checkpoint`` it is built here: a
character-level arithmetic corpus from the world's ``arithmetic`` suite, a BPE tokenizer
trained on it, and ``--sft-steps`` of SFT from random init, so that its next-token
distributions are peaked rather than uniform. The *rollout* model is a bfloat16 copy of
the policy sampling with transformers ``generate`` (temperature 1, KV cache) while every
MoE router's top-k experts are recorded; its log-probs are read from generate's own
scores (the distribution it sampled from). The *trainer* is the float32 policy
recomputing the completions' log-probs by teacher forcing, (a) routing freely and
(b) with the rollout's routes replayed (gate weights from the trainer's own router).

Reported: mean / p99 / max |Δ log p| over completion tokens for both, routing agreement
(rollout routes vs the trainer's free routes) overall and per layer, the share of positions
where any layer routed differently, and ``gap_reduction`` = mean gap without ÷ with
replay. With ``vllm`` registered as a rollout backend and startable, the same rows with
vLLM as the rollout side; otherwise that row is skipped with the reason.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import random
import time
from pathlib import Path

import numpy as np
import torch

# The world's tiny model (configs/tiny.yaml, docs/architecture.md §5).
TINY = dict(arch="qwen3_moe", hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=32,
            intermediate_size=256, num_experts=8, experts_per_token=2, expert_size=128, max_positions=512)


# -- the policy ---------------------------------------------------------------------

def _arithmetic_items(n: int, seed: int, max_level: int = 3):
    from stages.world.suites import get_suite
    suite = get_suite("arithmetic")
    rng = random.Random(f"router-replay:{seed}")
    return [suite.make(rng, f"rr-{seed}-{i}", rng.randint(1, max_level), "en") for i in range(n)]


def build_policy(sft_steps: int, seed: int, log) -> tuple[object, object, dict]:
    """A tiny Qwen3-MoE trained by SFT on arithmetic traces for ``sft_steps`` (batch 16, lr 1e-3)."""
    import logging

    from compass.lm.model_config import ModelConfig, TokenizerConfig
    from compass.lm.model_factory import build_model, build_tokenizer
    from compass.lm.sft.train import encode_table, train_sft
    items = _arithmetic_items(2000, seed)
    texts = [t for it in items for t in (it.prompt, it.response)]
    tok = build_tokenizer(texts, TokenizerConfig(vocab_size=512))
    model = build_model(ModelConfig(**TINY), tok, seed)
    encoded, _ = encode_table(tok, [it.prompt for it in items], [it.response for it in items], 256)
    t0 = time.perf_counter()
    m = {"losses": [float("nan")]}
    if sft_steps:
        m = train_sft(model, tok, encoded, steps=sft_steps, batch_size=16, lr=1e-3, warmup_steps=4,
                      weight_decay=0.0, grad_clip=1.0, seed=seed, log_every=max(sft_steps, 1),
                      logger=logging.getLogger("compass.bench.router_replay"), desc="sft")
    model.eval()
    tail = m["losses"][-10:]
    info = {"policy": f"built here: {sft_steps} SFT steps on arithmetic", "sft_steps": sft_steps,
            "sft_final_loss": round(float(np.mean(tail)), 4), "sft_s": round(time.perf_counter() - t0, 1)}
    log(f"policy: {info['policy']} (final loss {info['sft_final_loss']}, {info['sft_s']} s)")
    return model, tok, info


def load_policy(path: str) -> tuple[object, object, dict]:
    """An HF checkpoint folder, or a store artifact version folder holding one (``data-*/config.json``)."""
    from compass.lm.model_factory import load_checkpoint
    p = Path(path)
    if not (p / "config.json").exists():
        hits = sorted(p.glob("*/config.json")) or sorted(p.glob("*/*/config.json"))
        if not hits:
            raise SystemExit(f"--checkpoint {path}: no config.json in it or one or two levels below")
        p = hits[-1].parent
    model, tok = load_checkpoint(p, dtype=torch.float32)
    model.eval()
    return model, tok, {"policy": f"checkpoint {p}"}


# -- rollouts -----------------------------------------------------------------------

def hf_rollout(policy, tok, prompts: list[str], n: int, max_new_tokens: int, seed: int,
               dtype=torch.bfloat16) -> list[dict]:
    """Sample ``n`` completions per prompt from a ``dtype`` copy of ``policy`` with routes recorded.

    Returns one dict per completion: ``prompt_ids`` (real prompt tokens), ``ids`` (completion,
    eos included), ``logprobs`` (from generate's scores, temperature 1), ``routes``
    (``[len(prompt_ids) + len(ids), layers, top_k]`` int16, ``-1`` = not recorded).
    """
    from compass.lm.chat import chat_prefix
    from compass.rl.router_replay import completion_routes, record_routes
    roll = copy.deepcopy(policy).to(dtype).eval()
    enc = tok([chat_prefix(tok, p) for p in prompts], return_tensors="pt", padding=True, add_special_tokens=False)
    width = enc["input_ids"].shape[1]
    torch.manual_seed(seed)
    with torch.no_grad(), record_routes(roll) as rec:
        out = roll.generate(**enc, max_new_tokens=max_new_tokens, do_sample=True, temperature=1.0, top_p=None,
                            top_k=None, num_return_sequences=n, pad_token_id=tok.pad_token_id,
                            eos_token_id=tok.eos_token_id, return_dict_in_generate=True, output_scores=True)
    seqs = out.sequences
    routes = rec.routes(seq_len=seqs.shape[1])
    gen = seqs[:, width:]
    logp = torch.log_softmax(torch.stack(out.scores, 1).float(), -1).gather(-1, gen[..., None]).squeeze(-1)
    rows = []
    for r in range(seqs.shape[0]):
        ids = gen[r].tolist()
        if tok.eos_token_id in ids:
            ids = ids[:ids.index(tok.eos_token_id) + 1]
        pad = int((enc["attention_mask"][r // n] == 0).sum())
        rows.append({"prompt_ids": enc["input_ids"][r // n, pad:].tolist(), "ids": ids,
                     "logprobs": logp[r, :len(ids)].numpy().astype(np.float32),
                     "routes": completion_routes(routes[r], pad, width, len(ids))})
    return rows


def vllm_rollout(policy, tok, prompts: list[str], n: int, max_new_tokens: int, seed: int) -> tuple[list | None, str]:
    """The same through the ``vllm`` rollout backend, or ``(None, reason)`` when it cannot run here."""
    try:
        import importlib

        from compass.rl.rollout.base import ROLLOUT_BACKENDS, SamplingParams
        if "vllm" not in ROLLOUT_BACKENDS:
            importlib.import_module("compass.rl.rollout.vllm_client")
        factory = ROLLOUT_BACKENDS["vllm"]
    except Exception as e:  # noqa: BLE001 - any failure means: no vLLM row
        return None, f"no vllm rollout backend ({type(e).__name__}: {e})"
    try:
        import inspect

        from compass.lm.chat import chat_prefix
        params = inspect.signature(factory).parameters
        if "cfg" in params or len([p for p in params.values() if p.kind is p.POSITIONAL_OR_KEYWORD]) >= 3:
            from compass.rl.config import RLConfig          # factory(model, tok, cfg), as rollout.py describes
            cfg = RLConfig(rollout={"backend": {"kind": "vllm"}, "dtype": "bfloat16", "temperature": 1.0,
                                    "max_new_tokens": max_new_tokens},
                           trainer={"router_replay": True}, seed=seed)
            backend = factory(policy, tok, cfg)
        else:                                              # factory(model, tok, **options)
            backend = factory(policy, tok, dtype="bfloat16", seed=seed, record_routes=True)
    except Exception as e:  # noqa: BLE001
        return None, f"vllm backend did not start ({type(e).__name__}: {str(e)[:200]})"
    try:
        prompt_ids = [tok(chat_prefix(tok, p), add_special_tokens=False)["input_ids"] for p in prompts]
        groups = backend.generate(prompt_ids, n, SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0,
                                                                seed=seed))
        rows = [{"prompt_ids": list(p), "ids": list(c.ids), "logprobs": np.asarray(c.logprobs, np.float32),
                 "routes": None if c.routes is None else np.asarray(c.routes)}
                for p, g in zip(prompt_ids, groups) for c in g]
    except Exception as e:  # noqa: BLE001
        return None, f"vllm generate failed ({type(e).__name__}: {str(e)[:200]})"
    finally:
        try:
            backend.close()
        except Exception:  # noqa: BLE001
            pass
    if any(r["routes"] is None for r in rows):
        return None, "vllm backend returned no routes"
    return rows, ""


# -- the trainer side -----------------------------------------------------------------

def _stats(x: np.ndarray) -> dict:
    return {"mean": float(x.mean()), "p99": float(np.quantile(x, 0.99)), "max": float(x.max())}


def measure(policy, rows: list[dict], pad_id: int, chunk: int = 32) -> dict:
    """Trainer log-probs of the rollout completions with and without replay; gaps and routing agreement."""
    from compass.lm.policy_forward import token_logprobs
    from compass.rl.trainer.batch import build_batch
    from compass.rl.router_replay import (record_routes, replay_routes, route_mismatch_rate, routing_agreement,
                                         stack_routes)
    gaps_free, gaps_rep, gap_clean, gap_flip_rep = [], [], [], []
    roll_routes, free_routes, masks, comp_masks = [], [], [], []
    for s in range(0, len(rows), chunk):
        part = rows[s:s + chunk]
        b = build_batch([r["prompt_ids"] for r in part], [r["ids"] for r in part], pad_id)
        length = b["input_ids"].shape[1]
        routes = stack_routes([r["routes"] for r in part], length)
        with torch.no_grad():
            with record_routes(policy) as rec:
                lp_free, _ = token_logprobs(policy, b["input_ids"], b["attention_mask"])
            free = rec.routes()
            with replay_routes(policy, routes):
                lp_rep, _ = token_logprobs(policy, b["input_ids"], b["attention_mask"])
        # a position's route differs anywhere in this layer stack
        recorded = (routes >= 0).all(-1)                                          # [B, L, layers]
        differs = ((routes.sort(-1).values != free.long().sort(-1).values).any(-1) & recorded).any(-1)  # [B, L]
        for i, r in enumerate(part):
            p, c = len(r["prompt_ids"]), len(r["ids"])
            sl = slice(p - 1, p + c - 1)                                           # logp[:, t] predicts t+1
            roll_lp = torch.as_tensor(r["logprobs"][:c])
            g_free = (lp_free[i, sl] - roll_lp).abs()
            gaps_free.append(g_free.numpy())
            gaps_rep.append((lp_rep[i, sl] - roll_lp).abs().numpy())
            # tokens whose whole prefix routed identically in every layer: the gap replay cannot remove
            clean = ~(differs[i, :p + c - 1].cumsum(0) > 0)[p - 1:p + c - 1]
            gap_clean.append(g_free[clean].numpy())
            gap_flip_rep.append(gaps_rep[-1][~clean.numpy()])
        roll_routes.append(routes)
        free_routes.append(free.long())
        masks.append(b["attention_mask"].bool())
        comp_masks.append(b["completion_mask"])
    # routing comparisons, row by row (chunks differ in length)
    agree_num = agree_den = 0.0
    per_layer = np.zeros(free_routes[0].shape[2])
    per_layer_den = 0
    mismatch_num = mismatch_den = 0.0
    comp_mismatch_num = comp_mismatch_den = 0.0
    for rr, fr, m, cm in zip(roll_routes, free_routes, masks, comp_masks):
        valid = m & (rr >= 0).all(-1).all(-1)
        n_pos = int(valid.sum())
        agree_num += routing_agreement(rr, fr, valid) * n_pos * rr.shape[2]
        agree_den += n_pos * rr.shape[2]
        for j in range(rr.shape[2]):
            per_layer[j] += routing_agreement(rr[:, :, j:j + 1], fr[:, :, j:j + 1], valid) * n_pos
        per_layer_den += n_pos
        mismatch_num += route_mismatch_rate(rr, fr, valid) * n_pos
        mismatch_den += n_pos
        cvalid = valid & cm
        nc = int(cvalid.sum())
        if nc:
            comp_mismatch_num += route_mismatch_rate(rr, fr, cvalid) * nc
            comp_mismatch_den += nc
    free_all, rep_all = np.concatenate(gaps_free), np.concatenate(gaps_rep)
    clean_all = np.concatenate(gap_clean)
    flip_rep = np.concatenate(gap_flip_rep)
    return {
        "tokens": int(free_all.size), "completions": len(rows),
        "no_replay": _stats(free_all), "replay": _stats(rep_all),
        "gap_reduction": float(free_all.mean() / max(rep_all.mean(), 1e-12)),
        "routing_agreement": agree_num / agree_den,
        "routing_agreement_per_layer": (per_layer / per_layer_den).tolist(),
        "route_mismatch_positions": mismatch_num / mismatch_den,
        "route_mismatch_completion_positions": comp_mismatch_num / max(comp_mismatch_den, 1),
        "tokens_clean_prefix": int(clean_all.size),
        "gap_mean_clean_prefix": float(clean_all.mean()) if clean_all.size else float("nan"),
        "gap_mean_after_flip": float((free_all.sum() - clean_all.sum()) / max(free_all.size - clean_all.size, 1)),
        "gap_mean_after_flip_replay": float(flip_rep.mean()) if flip_rep.size else float("nan"),
    }


# -- main -----------------------------------------------------------------------------

def _fmt(x: float) -> str:
    return f"{x:.2e}"


def _trainers(policy) -> dict[str, object]:
    """The trainer under test (fp32 master weights: the headline) and two diagnostics that remove one
    source of mismatch each: fp32 compute over the rollout's bf16-rounded weights, and a bf16 trainer
    (same weights and dtype as the rollout; only the kernels and shapes differ, as vLLM vs Megatron)."""
    return {"fp32": policy,
            "fp32, bf16 weights": copy.deepcopy(policy).to(torch.bfloat16).to(torch.float32).eval(),
            "bf16": copy.deepcopy(policy).to(torch.bfloat16).eval()}


def _e(x: float) -> float:
    return float(f"{x:.3e}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench router-replay", description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default=None, help="policy: an HF checkpoint folder (or a store artifact "
                                                       "version folder); default: build one here by SFT")
    ap.add_argument("--sft-steps", type=int, default=300, help="SFT steps when building the policy here")
    ap.add_argument("--prompts", type=int, default=32, help="held-out arithmetic prompts")
    ap.add_argument("--n", type=int, default=4, help="samples per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: the model is tiny, and on a shared 2-core machine 2 threads "
                         "made SFT ~15x slower; 0 = torch's default)")
    ap.add_argument("--no-vllm", action="store_true", help="skip the vLLM rollout row")
    ap.add_argument("--quick", action="store_true", help="a smoke run (<30 s): 40 SFT steps, 4x2 samples, "
                                                         "16 new tokens, no vLLM")
    args = ap.parse_args(argv)
    if args.quick:
        args.sft_steps, args.prompts, args.n, args.max_new_tokens, args.no_vllm = 40, 4, 2, 16, True
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("COMPASS_PROGRESS", "0")

    def log(msg: str) -> None:
        print(msg, flush=True)

    t_start = time.perf_counter()
    if args.checkpoint:
        policy, tok, info = load_policy(args.checkpoint)
    else:
        policy, tok, info = build_policy(args.sft_steps, args.seed, log)
    prompts = [it.prompt for it in _arithmetic_items(args.prompts, args.seed + 1000)]
    trainers = _trainers(policy)

    rollouts: dict[str, list[dict]] = {}
    t0 = time.perf_counter()
    rollouts["hf bf16"] = hf_rollout(policy, tok, prompts, args.n, args.max_new_tokens, args.seed)
    t_gen = time.perf_counter() - t0
    skipped = {}
    if args.no_vllm:
        skipped["vllm bf16"] = "--no-vllm"
    else:
        vrows, why = vllm_rollout(policy, tok, prompts, args.n, args.max_new_tokens, args.seed)
        if vrows is None:
            skipped["vllm bf16"] = why
        else:
            rollouts["vllm bf16"] = vrows
    t0 = time.perf_counter()
    results = {(rn, tn): measure(tm, rows, tok.pad_token_id)
               for rn, rows in rollouts.items() for tn, tm in trainers.items()}
    t_train = time.perf_counter() - t0

    head = results[("hf bf16", "fp32")]
    print(f"\n# Router Replay: train–inference |Δ log p| — policy: {info['policy']}")
    print(f"rollout: bf16 copy of the policy, {args.prompts} arithmetic prompts × {args.n} samples, temperature 1, "
          f"≤{args.max_new_tokens} new tokens, {head['tokens']} completion tokens (hf); trainer: teacher forcing. "
          "Rows marked * are diagnostics.\n")
    print("| rollout | trainer | replay | mean |Δ log p| | p99 | max | mean gap reduction |")
    print("|---|---|---|---:|---:|---:|---:|")
    for (rn, tn), r in results.items():
        star = "" if tn == "fp32" else "*"
        for mode in ("no_replay", "replay"):
            st = r[mode]
            red = f"**{r['gap_reduction']:.2f}×**" if mode == "replay" else ""
            print(f"| {rn} | {tn}{star} | {'yes' if mode == 'replay' else 'no'} | {_fmt(st['mean'])} | "
                  f"{_fmt(st['p99'])} | {_fmt(st['max'])} | {red} |")
    for name, why in skipped.items():
        print(f"| {name} | — | skipped: {why.splitlines()[0][:200]} | | | | |")
    print("\nRouting (rollout routes vs the trainer's own free routes), and where the gap comes from: tokens "
          "whose whole prefix routed identically in every layer (clean) vs tokens after a flip.\n")
    print("| rollout | trainer | routing agreement | by layer | positions with a flip (all / completion) | "
          "mean gap clean (tokens) | mean gap after a flip (tokens): no replay → replay |")
    print("|---|---|---:|---|---:|---:|---:|")
    for (rn, tn), r in results.items():
        layers = " ".join(f"{a:.4f}" for a in r["routing_agreement_per_layer"])
        star = "" if tn == "fp32" else "*"
        print(f"| {rn} | {tn}{star} | {r['routing_agreement']:.4f} | {layers} | "
              f"{r['route_mismatch_positions']:.2%} / {r['route_mismatch_completion_positions']:.2%} | "
              f"{_fmt(r['gap_mean_clean_prefix'])} ({r['tokens_clean_prefix']}) | "
              f"{_fmt(r['gap_mean_after_flip'])} → {_fmt(r['gap_mean_after_flip_replay'])} "
              f"({r['tokens'] - r['tokens_clean_prefix']}) |")
    print(f"\ngeneration {t_gen:.1f} s, trainer recomputes (free + replay, {len(trainers)} trainers) {t_train:.1f} s, "
          f"total {time.perf_counter() - t_start:.1f} s")
    out = {"bench": "router-replay", "gap_reduction": round(head["gap_reduction"], 2),
           "gap_mean_no_replay": _e(head["no_replay"]["mean"]), "gap_mean_replay": _e(head["replay"]["mean"]),
           "gap_p99_no_replay": _e(head["no_replay"]["p99"]), "gap_p99_replay": _e(head["replay"]["p99"]),
           "gap_max_no_replay": _e(head["no_replay"]["max"]), "gap_max_replay": _e(head["replay"]["max"]),
           "routing_agreement": round(head["routing_agreement"], 4),
           "route_mismatch_positions": round(head["route_mismatch_positions"], 4),
           "gap_mean_clean_prefix": _e(head["gap_mean_clean_prefix"]),
           "bf16_trainer_gap_reduction": round(results[("hf bf16", "bf16")]["gap_reduction"], 2),
           "tokens": head["tokens"], "policy": info["policy"]}
    if ("vllm bf16", "fp32") in results:
        v = results[("vllm bf16", "fp32")]
        out.update({"vllm_gap_reduction": round(v["gap_reduction"], 2),
                    "vllm_gap_mean_no_replay": _e(v["no_replay"]["mean"]),
                    "vllm_gap_mean_replay": _e(v["replay"]["mean"]),
                    "vllm_routing_agreement": round(v["routing_agreement"], 4)})
    else:
        out["vllm"] = "skipped"
    print(json.dumps(out))
    return 0
