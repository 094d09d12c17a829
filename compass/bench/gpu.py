"""compass bench gpu: SFT and RL steps of a ~0.6B dense Qwen3 and a ~1B Qwen3-MoE on one GPU, through the
stages' own code.

Models are built from their configs with random weights (nothing is downloaded): ``dense`` is Qwen3-0.6B's
shape (28 layers, hidden 1024, tied embeddings, 151,936-token vocabulary), ``moe`` a Qwen3-MoE of 12 layers
with 32 experts of width 512, 4 per token (~1.0B parameters, ~0.4B active). For each model, in order:

- ``build``: the model on the device; every parameter must be there;
- ``sft``: :func:`compass.lm.sft.train.train_sft` (the SFT stage's loop: packed rows, AdamW, bf16 autocast
  over fp32 master weights on a GPU) on random token sequences;
- ``rollout``: the ``native`` rollout backend (the RL stages' default) on a bf16 copy, then transformers'
  ``generate`` on the same copy at the same batch and length, for the ratio;
- ``update``: the ``torch`` trainer's update (the RL engine's call) on those completions with random
  advantages, and the trainer's log-probs against the rollout's (the train-inference gap);
- ``vllm``: vLLM as the rollout engine on the same device, where its environment is installed ("not measured:
  vLLM absent" where not): generation tokens/s (bf16 on a GPU; fp8 too), seconds per GB of a weight sync by the
  file path and by the in-memory one, sleep and wake seconds, and the log-prob gap after a sync;
- ``megatron``: the same update through the megatron trainer where megatron-core is installed.

Each phase prints one JSON line as it ends (a time-out keeps the phases already done), then a table and a
headline JSON line. Checks: parameters and every input the model is handed on the device
(:func:`compass.lm.device.watch_inputs`), weights changed by each update, finite losses, a small log-prob gap.
Throughput is tokens per second of wall time on the device (synchronized); MFU is the training FLOPs
(6 x active parameters + causal attention, per token) over the card's dense bf16 peak, for the cards whose
peak is known. ``--quick`` runs tiny models for a few steps: the CPU mode CI exercises.

Runs on a bare GPU machine with torch and transformers and the pydantic wheels (docs/gpu.md says which):
``python -m compass.bench.gpu`` from the repository root, or ``compass bench gpu``.
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import os
import sys
import time
import warnings
from types import SimpleNamespace

import torch

from compass.lm.device import compute_dtype, model_device, resolve_device, watch_inputs

# dense bf16 peak FLOP/s (no sparsity), from the vendors' data sheets, by a substring of the device name
PEAK_BF16 = {"H100": 989.4e12, "H200": 989.4e12, "H800": 989.4e12, "A100": 312e12, "L40S": 362.1e12,
             "A10G": 125e12, "L4": 121e12}

VOCAB = 151936
SIZES = {
    "dense": dict(arch="qwen3", hidden=1024, layers=28, heads=16, kv=8, head_dim=128, inter=3072, vocab=VOCAB, tie=True),
    "moe": dict(arch="qwen3_moe", hidden=1024, layers=12, heads=16, kv=4, head_dim=128, inter=3072, vocab=VOCAB,
                experts=32, topk=4, expert=512, tie=False),
    # --quick: the same code on models a CPU runs in seconds
    "dense-quick": dict(arch="qwen3", hidden=64, layers=2, heads=2, kv=1, head_dim=32, inter=128, vocab=512, tie=True),
    "moe-quick": dict(arch="qwen3_moe", hidden=64, layers=2, heads=2, kv=1, head_dim=32, inter=128, vocab=512,
                      experts=4, topk=2, expert=64, tie=False),
}
# per model: SFT steps x micro-batch x row length; rollout prompts x samples x (prompt, new tokens)
# the update's micro-batch cap: the one-GPU example's (configs/examples/one-gpu-qwen3.yaml)
WORK = {"full": dict(sft_steps=12, sft_batch=16, sft_len=1024, prompts=32, n=4, prompt_len=128, new_tokens=256,
                     micro_batch_tokens=16384),
        "quick": dict(sft_steps=3, sft_batch=4, sft_len=32, prompts=4, n=2, prompt_len=8, new_tokens=8,
                      micro_batch_tokens=32)}
# FSDP2 at a world size of 1 (one GPU: the sharded code path, not its scaling), with and without CPU offload
FSDP_PHASES = {"fsdp": {}, "fsdp_offload": {"cpu_offload": True}}
EOS, PAD = 1, 0


def hf_config(spec: dict):
    from transformers import AutoConfig
    common = dict(vocab_size=spec["vocab"], hidden_size=spec["hidden"], num_hidden_layers=spec["layers"],
                  num_attention_heads=spec["heads"], num_key_value_heads=spec["kv"], head_dim=spec["head_dim"],
                  intermediate_size=spec["inter"], max_position_embeddings=4096, rope_theta=1e6,
                  tie_word_embeddings=spec["tie"], bos_token_id=EOS, eos_token_id=EOS, pad_token_id=PAD)
    if spec["arch"] == "qwen3_moe":
        common.update(num_experts=spec["experts"], num_experts_per_tok=spec["topk"],
                      moe_intermediate_size=spec["expert"], decoder_sparse_step=1, norm_topk_prob=True,
                      output_router_logits=False, mlp_only_layers=[])
    return AutoConfig.for_model(spec["arch"], **common)


def build(spec: dict, dev: torch.device, seed: int = 0):
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    with dev:                                    # initialised where it will run: no host copy of the weights
        model = AutoModelForCausalLM.from_config(hf_config(spec), dtype=torch.float32)
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = PAD, EOS
    return model


def active_params(model, spec: dict) -> float:
    """Parameters one token's forward multiplies by: all but the embedding lookup, the experts at top-k of E."""
    total = 0.0
    for name, p in model.named_parameters():
        if "embed_tokens" in name and not spec["tie"]:
            continue                             # a lookup, not a matmul (tied: it is also the LM head)
        share = spec["topk"] / spec["experts"] if ".experts." in name else 1.0
        total += p.numel() * share
    return total


def train_flops_per_token(spec: dict, n_active: float, seq_len: float) -> float:
    """6 N for the matmuls (forward and backward) plus causal attention's QK^T and AV: 6 x layers x
    heads x head_dim x seq_len per token (the 12 of full attention halved by the causal mask)."""
    return 6 * n_active + 6 * spec["layers"] * spec["heads"] * spec["head_dim"] * seq_len


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _reset_peak(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)


def _peak_gib(dev: torch.device) -> float | None:
    return round(torch.cuda.max_memory_allocated(dev) / 2**30, 2) if dev.type == "cuda" else None


def _peak_flops(dev: torch.device) -> float | None:
    if dev.type != "cuda":
        return None
    name = torch.cuda.get_device_name(dev)
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def _snapshot(state: dict) -> dict:
    """A norm per tensor: enough to see a step changed the weights, without a second copy of them."""
    return {k: v.detach().float().norm().item() for k, v in state.items()}


def _changed(before: dict, state: dict) -> bool:
    return any(before[k] != v for k, v in _snapshot(state).items())


def _tok():
    """What the rollout backends read of a tokenizer when they do not decode text."""
    return SimpleNamespace(eos_token_id=EOS, pad_token_id=PAD)


def phase_build(spec, dev):
    model = build(spec, dev)
    n = sum(p.numel() for p in model.parameters())
    return model, {"params_b": round(n / 1e9, 3), "active_params_b": round(active_params(model, spec) / 1e9, 3),
                   "checks": {"params_on_device": all(p.device == dev for p in model.parameters())}}


def phase_sft(model, spec, dev, precision, work, gen):
    from compass.lm.sft.train import train_sft
    L = work["sft_len"]
    samples = []
    for _ in range(work["sft_steps"] * work["sft_batch"]):
        ids = torch.randint(2, spec["vocab"], (L,), generator=gen).tolist()
        samples.append((ids, [-100] * (L // 4) + ids[L // 4:]))     # a prompt quarter, then supervised tokens
    before = _snapshot(model.state_dict())
    _reset_peak(dev)
    _sync(dev)
    with watch_inputs(model) as bad:
        m = train_sft(model, SimpleNamespace(pad_token_id=PAD), samples, steps=work["sft_steps"],
                      batch_size=work["sft_batch"], lr=1e-5, warmup_steps=0, weight_decay=0.0, grad_clip=1.0, seed=0,
                      log_every=10**9, logger=logging.getLogger("compass.bench.gpu"), packing=True, pack_len=L,
                      device=str(dev), precision=precision)
    _sync(dev)
    steady = m["train_s"] * (len(m["losses"]) - 1) / len(m["losses"]) if len(m["losses"]) > 1 else m["train_s"]
    tokens = m["tokens"] * (len(m["losses"]) - 1) / max(1, len(m["losses"]))           # the first step warms up
    tps = tokens / steady if steady > 0 and tokens else m["tokens"] / max(m["train_s"], 1e-9)
    return {"tokens_per_s": round(tps, 1), "steps": len(m["losses"]), "tokens": m["tokens"],
            "flops_per_token": train_flops_per_token(spec, active_params(model, spec), L / 2), "peak_gib": _peak_gib(dev),
            "checks": {"finite_loss": all(math.isfinite(x) for x in m["losses"]), "weights_changed": _changed(before, model.state_dict()),
                       "inputs_on_device": not bad, "params_on_device": all(p.device == dev for p in model.parameters())}}


def phase_rollout(model, spec, dev, work, gen):
    from compass.rl.rollout.base import SamplingParams
    from compass.rl.rollout.native import NativeRollout
    dtype = "bfloat16" if dev.type == "cuda" else "float32"
    rollout = NativeRollout(model, _tok(), dtype=dtype, share=False, detokenize=False,
                            record_routes=spec["arch"] == "qwen3_moe")
    prompts = [torch.randint(2, spec["vocab"], (work["prompt_len"],), generator=gen).tolist()
               for _ in range(work["prompts"])]
    sp = SamplingParams(max_new_tokens=work["new_tokens"], temperature=1.0, seed=0)
    rollout.generate(prompts[:2], 1, SamplingParams(max_new_tokens=4, temperature=1.0, seed=1))   # warm-up
    _reset_peak(dev)
    _sync(dev)
    t0 = time.perf_counter()
    groups = rollout.generate(prompts, work["n"], sp)
    _sync(dev)
    native_s = time.perf_counter() - t0
    native_tokens = sum(len(c.ids) for g in groups for c in g)
    row = {"tokens_per_s": round(native_tokens / native_s, 1), "rows": work["prompts"] * work["n"],
           "new_tokens": work["new_tokens"], "peak_gib": _peak_gib(dev)}
    # transformers' generate on the same bf16 copy, the same rows and length (every row runs to the end)
    m = rollout.model
    ids = torch.tensor([p for p in prompts for _ in range(work["n"])], device=dev)
    kw = dict(attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_k=None, top_p=None,
              max_new_tokens=work["new_tokens"], min_new_tokens=work["new_tokens"], pad_token_id=PAD,
              eos_token_id=EOS)
    try:
        with torch.no_grad():
            m.generate(ids[:2], **{**kw, "attention_mask": kw["attention_mask"][:2], "max_new_tokens": 4,
                                   "min_new_tokens": 4})
            _sync(dev)
            t0 = time.perf_counter()
            out = m.generate(ids, **kw)
            _sync(dev)
        hf_s = time.perf_counter() - t0
        hf_tokens = (out.shape[1] - ids.shape[1]) * out.shape[0]
        row["generate_tokens_per_s"] = round(hf_tokens / hf_s, 1)
        row["speedup_vs_generate"] = round(row["tokens_per_s"] / row["generate_tokens_per_s"], 2)
    except torch.cuda.OutOfMemoryError as e:
        row["generate_tokens_per_s"] = f"not measured: out of memory ({str(e).splitlines()[0][:120]})"
    row["checks"] = {"rollout_on_device": model_device(m) == dev,
                     "finite_logprobs": all(bool(torch.isfinite(torch.from_numpy(c.logprobs)).all())
                                            for g in groups for c in g)}
    rollout.close()
    return prompts, groups, row


def _rollout_batch(prompts, groups):
    """The trainer's batch of every completion in ``groups`` and the rollout's log-probs of it, with the
    prefixes, completions, ``[rows, len - 1]`` shape and completion mask that go with them."""
    from compass.rl.trainer.batch import build_batch, rollout_values
    prefixes = [p for p, g in zip(prompts, groups) for _ in g]
    comps = [c for g in groups for c in g]
    batch = build_batch(prefixes, [c.ids for c in comps], PAD)
    shape = (batch["input_ids"].shape[0], batch["input_ids"].shape[1] - 1)
    mask = batch["completion_mask"][:, 1:]
    return batch, prefixes, comps, shape, mask, rollout_values("logprobs", prefixes, comps, shape)


def phase_update(model, spec, dev, precision, prompts, groups, gen, backend: str = "torch",
                 micro_batch_tokens: int | None = None, **extra):
    """One trainer update on the rollout's completions; ``extra``: more settings of the backend (fsdp's
    ``cpu_offload``)."""
    from compass.rl.config import RLConfig
    from compass.rl.trainer.base import get_trainer_backend
    from compass.rl.trainer.batch import routes_batch
    settings = {"kind": backend}
    if backend in ("torch", "fsdp"):
        settings.update(device=str(dev), precision=precision, micro_batch_tokens=micro_batch_tokens, **extra)
    cfg = RLConfig(trainer={"backend": settings, "lr": 1e-5,
                            "router_replay": spec["arch"] == "qwen3_moe"})
    trainer = get_trainer_backend(backend)(model, cfg)
    try:
        batch, prefixes, comps, shape, mask, old = _rollout_batch(prompts, groups)
        signs = torch.randint(0, 2, (shape[0], 1), generator=gen).float() * 2 - 1
        adv = signs * mask.float()
        routes = routes_batch(prefixes, comps, batch["input_ids"].shape[1]) if cfg.trainer.router_replay else None
        before = _snapshot(trainer.hf_state_dict())       # the trainer's own weights (megatron trains a copy)
        # the train-inference gap: the trainer's log-probs (replaying the rollout's routes) against the rollout's
        logp, _ = trainer.logprobs(batch, routes)
        gap = (logp - old).abs()[mask].mean().item()
        # the model the update computes on: the fsdp rank's own copy where there is one
        computing = getattr(getattr(trainer, "_local", None), "model", None) or model
        _reset_peak(dev)
        _sync(dev)
        with watch_inputs(computing) as bad:
            t0 = time.perf_counter()
            m = trainer.update(batch, adv, old, cfg, routes=routes)
            _sync(dev)
            secs = time.perf_counter() - t0
        tokens = int(batch["attention_mask"].sum())
        seq = float(batch["attention_mask"].sum(1).float().mean())
        changed = _changed(before, trainer.hf_state_dict())
    finally:
        trainer.close()          # also after an out-of-memory error: the next phase starts with the memory back
    return {"tokens_per_s": round(tokens / secs, 1), "tokens": tokens, "update_s": round(secs, 3),
            "flops_per_token": train_flops_per_token(spec, active_params(model, spec), seq / 2),
            "logp_gap_mean_abs": round(gap, 5), "peak_gib": _peak_gib(dev),
            "checks": {"updated": m.get("updated") == 1.0, "finite_loss": math.isfinite(m["loss"]),
                       "weights_changed": changed,
                       "inputs_on_device": not bad, "logp_gap_small": gap < 0.1}}


def _vllm_generate(rollout, prompts, work, dev):
    from compass.rl.rollout.base import SamplingParams
    rollout.generate(prompts[:2], 1, SamplingParams(max_new_tokens=4, temperature=1.0, seed=1))   # warm-up
    _sync(dev)
    t0 = time.perf_counter()
    groups = rollout.generate(prompts, work["n"], SamplingParams(max_new_tokens=work["new_tokens"], temperature=1.0,
                                                                 seed=0))
    secs = time.perf_counter() - t0
    return groups, round(sum(len(c.ids) for g in groups for c in g) / secs, 1)


def phase_vllm(model, spec, dev, precision, prompts, work, gen):
    """vLLM as the rollout engine, colocated with the model on ``dev``: generation tokens/s (bf16 on a GPU,
    then fp8), the weight sync's seconds per GB by each path, sleep and wake seconds, and the trainer's
    log-probs against vLLM's after a sync (the train-inference gap the sync must not widen)."""
    from compass.rl.config import RLConfig
    from compass.rl.rollout.vllm_client import VllmEnvMissing, VllmRollout, vllm_python
    from compass.rl.trainer.base import get_trainer_backend
    try:
        vllm_python()
    except VllmEnvMissing:
        return {"not_measured": "vLLM absent: no vLLM environment on this machine (make install-vllm, or "
                                "$COMPASS_VLLM_PYTHON)"}
    row: dict = {}
    # routes are not recorded here (the bench's update replays none): prefix caching stays on
    original = {k: v.detach().clone() for k, v in model.state_dict().items()}
    rollout = VllmRollout(model, _tok(), dtype="auto", record_routes=False, detokenize=False)
    try:
        _, row["tokens_per_s"] = _vllm_generate(rollout, prompts, work, dev)
        row["dtype"] = rollout.dtype
        rollout.release_memory()                # as the engine does before the update: colocated, vLLM sleeps
        # a sync per path, after a small change to every weight (the step's update); each path once untimed
        # (its one-off set-up; an engine asleep since the rollout wakes there), then timed from the same state
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + 1e-3 * torch.randn(p.shape, generator=gen).to(p.device))
        n_params = sum(p.numel() for p in model.parameters())
        moved = {"file": next(model.parameters()).element_size(),                  # the trainer's own dtype
                 "memory": torch.tensor([], dtype=getattr(torch, rollout.dtype)).element_size()}
        for path in rollout.sync_paths():
            rollout.sync_weights(model.state_dict(), method=path)
            _sync(dev)
            t0 = time.perf_counter()
            rollout.sync_weights(model.state_dict(), method=path)
            row[f"sync_{path}_s_per_gb"] = round((time.perf_counter() - t0) / (n_params * moved[path] / 1e9), 3)
        # the gap after the sync: the trainer's log-probs of vLLM's samples against vLLM's own
        groups, _ = _vllm_generate(rollout, prompts, work, dev)
        cfg = RLConfig(trainer={"backend": {"kind": "torch", "device": str(dev), "precision": precision}})
        trainer = get_trainer_backend("torch")(model, cfg)
        batch, _, _, _, mask, vllm_logp = _rollout_batch(prompts, groups)
        logp, _ = trainer.logprobs(batch, None)
        trainer.close()
        gap = (logp - vllm_logp).abs()[mask].mean().item()
        row["logp_gap_mean_abs"] = round(gap, 5)
        stats = rollout.stats()
        if stats["sleeps"]:
            row["sleep_s"] = round(stats["sleep_s"] / stats["sleeps"], 3)
            row["wake_s"] = round(stats["wake_s"] / stats["sleeps"], 3)
        else:
            row["sleep_s"] = "not measured: vLLM has no sleep mode on the CPU" if dev.type != "cuda" else \
                "not measured: sleep mode off"
        row["checks"] = {"finite_logprobs": all(bool(np_isfinite(c.logprobs)) for g in groups for c in g),
                         "logp_gap_small": gap < (0.1 if rollout.dtype != "float32" else 1e-3)}
    finally:
        rollout.close()
    with torch.no_grad():                       # the phases after this one get the model as it came
        model.load_state_dict(original)
    if dev.type == "cuda":
        fp8 = VllmRollout(model, _tok(), dtype="auto", record_routes=False, quantization="fp8", detokenize=False)
        try:
            _, row["fp8_tokens_per_s"] = _vllm_generate(fp8, prompts, work, dev)
        finally:
            fp8.close()
    else:
        row["fp8_tokens_per_s"] = "not measured: fp8 needs a GPU with FP8 (H100 or newer)"
    return row


def np_isfinite(x) -> bool:
    import numpy as np
    return bool(np.isfinite(x).all())


def _mfu(row: dict, peak: float | None):
    if peak is None or not isinstance(row.get("tokens_per_s"), float):
        return "not measured: no known bf16 peak for this device"
    return round(row["tokens_per_s"] * row["flops_per_token"] / peak, 4)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench gpu", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny models, few steps: the CPU mode CI runs")
    ap.add_argument("--models", default="dense,moe", help="comma-separated: dense, moe")
    ap.add_argument("--device", default="auto", help="auto (the GPU when there is one), cpu, cuda, cuda:N")
    ap.add_argument("--precision", default="auto", help="auto (bf16 on a GPU, fp32 on the CPU), fp32, bf16")
    ap.add_argument("--out", default=None, help="also append each JSON line to this file")
    args = ap.parse_args(argv)
    os.environ.setdefault("COMPASS_PROGRESS", "0")
    warnings.filterwarnings("ignore", module=r"megatron\.")      # its deprecation and Apex notices, per model
    dev = resolve_device(args.device)
    work = WORK["quick" if args.quick else "full"]
    peak = _peak_flops(dev)
    rows: list[dict] = []

    def emit(row: dict) -> None:
        rows.append(row)
        line = json.dumps(row, default=str)
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(line + "\n")

    import transformers
    emit({"phase": "env", "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
          "torch": torch.__version__, "transformers": transformers.__version__,
          "compute_dtype": str(compute_dtype(dev, args.precision)).replace("torch.", ""),
          "peak_bf16_tflops": None if peak is None else peak / 1e12})
    gen = torch.Generator().manual_seed(0)
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        if name not in ("dense", "moe"):
            print(f"error: unknown model {name!r} (dense, moe)", file=sys.stderr)
            return 2
        spec = SIZES[f"{name}-quick" if args.quick else name]
        model = None
        phase = "build"
        try:
            model, row = phase_build(spec, dev)
            emit({"phase": "build", "model": name, **row})
            phase = "sft"
            row = phase_sft(model, spec, dev, args.precision, work, gen)
            row["mfu"] = _mfu(row, peak)
            emit({"phase": "sft", "model": name, **row})
            phase = "rollout"
            prompts, groups, row = phase_rollout(model, spec, dev, work, gen)
            emit({"phase": "rollout", "model": name, **row})
            phase = "update"
            rollout_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
            row = phase_update(model, spec, dev, args.precision, prompts, groups, gen,
                               micro_batch_tokens=work["micro_batch_tokens"])
            row["mfu"] = _mfu(row, peak)
            emit({"phase": "update", "model": name, **row})
            # the torch trainer stepped this model in place: later phases start from the rollout's weights again,
            # so their log-prob gap compares the same policy (it read 0.06-0.14 nats against a stale rollout)
            model.load_state_dict(rollout_weights)
            del rollout_weights
            for phase, extra in FSDP_PHASES.items():
                if extra.get("cpu_offload") and dev.type != "cuda":
                    emit({"phase": phase, "model": name, "not_measured": "CPU offload needs a GPU"})
                    continue
                try:
                    row = phase_update(model, spec, dev, args.precision, prompts, groups, gen, backend="fsdp",
                                       micro_batch_tokens=work["micro_batch_tokens"], **extra)
                    row["mfu"] = _mfu(row, peak)
                except torch.cuda.OutOfMemoryError as e:
                    row = {"not_measured": f"out of memory: {str(e).splitlines()[0][:160]}"}
                    del e                      # its traceback holds the phase's frames, and their tensors
                    gc.collect()
                    torch.cuda.empty_cache()
                emit({"phase": phase, "model": name, **row})
            phase = "vllm"
            emit({"phase": "vllm", "model": name, **phase_vllm(model, spec, dev, args.precision, prompts, work, gen)})
            if name == "moe":
                phase = "megatron"
                try:
                    import megatron.core  # noqa: F401
                except ImportError:
                    emit({"phase": "megatron", "model": name,
                          "not_measured": "megatron-core is not installed on this machine"})
                else:
                    row = phase_update(model, spec, dev, args.precision, prompts, groups, gen, backend="megatron")
                    row["mfu"] = _mfu(row, peak)
                    emit({"phase": "megatron", "model": name, **row})
        except torch.cuda.OutOfMemoryError as e:
            emit({"phase": phase, "model": name, "not_measured": f"out of memory: {str(e).splitlines()[0][:160]}"})
        finally:
            del model
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    # the table, then the headline line
    print(f"\n{'model':6} {'phase':9} {'tokens/s':>11} {'MFU':>7} {'peak GiB':>9}  checks")
    ok = True
    for r in rows[1:]:
        checks = r.get("checks", {})
        ok &= all(checks.values())
        mfu = r.get("mfu")
        print(f"{r['model']:6} {r['phase']:9} {r.get('tokens_per_s', '-')!s:>11} "
              f"{mfu if isinstance(mfu, float) else '-'!s:>7} {r.get('peak_gib') or '-'!s:>9}  "
              f"{'ok' if all(checks.values()) else 'FAILED ' + ','.join(k for k, v in checks.items() if not v)}"
              f"{'  ' + r['not_measured'] if 'not_measured' in r else ''}")
    by = {(r.get("model"), r["phase"]): r for r in rows}
    head = {"bench": "gpu", "device": rows[0]["device"], "quick": args.quick, "all_checks_pass": ok}
    for name in ("dense", "moe"):
        for phase, key in (("sft", "tokens_per_s"), ("sft", "mfu"), ("rollout", "tokens_per_s"),
                           ("rollout", "speedup_vs_generate"), ("update", "tokens_per_s"), ("update", "mfu"),
                           ("update", "logp_gap_mean_abs"), ("update", "peak_gib"), ("fsdp", "tokens_per_s"),
                           ("fsdp", "mfu"), ("fsdp", "peak_gib"), ("fsdp_offload", "tokens_per_s"),
                           ("fsdp_offload", "peak_gib"), ("vllm", "tokens_per_s"), ("vllm", "fp8_tokens_per_s"),
                           ("vllm", "logp_gap_mean_abs"), ("vllm", "sleep_s"), ("vllm", "wake_s"),
                           ("vllm", "sync_file_s_per_gb"), ("vllm", "sync_memory_s_per_gb")):
            v = by.get((name, phase), {}).get(key)
            if v is not None:
                head[f"{name}_{phase}_{key}"] = v
    print(json.dumps(head, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
