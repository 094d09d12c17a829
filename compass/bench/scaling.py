"""``compass bench scaling``: what a second trainer rank and more rollout workers cost and buy, on this machine.

Trainer (the same global batch every time, fp32, gloo): one update's seconds, the median of ``--steps``
updates after one untimed, for

- ``torch``, one process, T threads (the whole machine to one process: the baseline a user has today);
- ``fsdp``, 1 rank in this process, 1 thread;
- ``fsdp``, R ranks as Ray actors in a placement group, 1 thread each (T = R cores in all).

The speed-up is the 1-rank time over the R-rank time, and the parallel efficiency that speed-up over R. The
fsdp update runs the batch forward once more than the torch one (the whole-batch log-prob gather that
makes it exact for every loss; compass/rl/trainer/fsdp_trainer.py), so ``fsdp 1 rank`` against ``torch 1
thread`` is that overhead.

Weight sync to W rollout workers (``rollout.workers``: Ray actors with the ``hf`` backend): the median seconds
of ``RayRolloutPool.sync_weights`` for each W of ``--workers``, by both of its paths side by side:
``object_store`` (one copy into Ray's object store, every worker loads it) and ``broadcast`` (this process and
the W workers in one gloo group, the weights broadcast in buckets; NCCL on GPUs).

Then the megatron trainer (``--megatron``, on by default outside ``--quick``): one rank in this process, R
data-parallel ranks, R tensor-parallel ranks (sequence parallel), and R data-parallel ranks with AdamW's state
sharded over them (``distributed_optimizer``: the largest rank's share of the moments, and the time against the
replicated run), the same batch, 1 thread per rank.

The model is a Qwen3-MoE of the tiny world's family, larger (``--quick``: the tiny one). On a CPU these
figures say how the code scales on this machine's cores, not what a GPU cluster does: there the ranks talk
over NCCL and each has its own GPU.
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch

from compass.lm.model_config import ModelConfig

SIZES = {"full": dict(model=ModelConfig(hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=64,
                                        intermediate_size=512, num_experts=8, experts_per_token=2, expert_size=256),
                      rows=32, prompt=32, completion=64),
         "quick": dict(model=ModelConfig(), rows=8, prompt=6, completion=8)}


def _batch(tok, rows: int, prompt: int, completion: int, seed: int = 0):
    from compass.rl.trainer.batch import build_batch
    lo, g = len(tok.all_special_ids), torch.Generator().manual_seed(seed)
    lens = [max(1, completion - (i * 7) % (completion // 2 + 1)) for i in range(rows)]   # ragged, as rollouts are
    batch = build_batch([torch.randint(lo, len(tok), (prompt,), generator=g).tolist() for _ in range(rows)],
                        [torch.randint(lo, len(tok), (n,), generator=g).tolist() for n in lens], tok.pad_token_id)
    mask = batch["completion_mask"][:, 1:]
    adv = (torch.randint(0, 2, (rows, 1), generator=g).float() * 2 - 1) * mask
    return batch, adv


def time_updates(trainer, batch, adv, cfg, steps: int) -> float:
    """Median seconds of ``steps`` updates after one untimed."""
    old, _ = trainer.logprobs(batch)
    trainer.update(batch, adv, old, cfg)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        trainer.update(batch, adv, old, cfg)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench scaling", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the tiny model, one timed step: the test's mode")
    ap.add_argument("--ranks", type=int, default=2, help="trainer ranks of the sharded run (default 2)")
    ap.add_argument("--steps", type=int, default=None, help="timed updates per trainer (default 5; --quick 1)")
    ap.add_argument("--workers", default=None, help="comma-separated rollout worker counts (default 1,2,4; "
                                                    "--quick 1,2)")
    ap.add_argument("--syncs", type=int, default=None, help="timed syncs per worker count (default 5; --quick 2)")
    ap.add_argument("--megatron", action=argparse.BooleanOptionalAction, default=None,
                    help="also time the megatron trainer at 1 rank, R data-parallel and R tensor-parallel ranks "
                         "(default: on, off with --quick)")
    args = ap.parse_args(argv)
    with_megatron = args.megatron if args.megatron is not None else not args.quick
    size = SIZES["quick" if args.quick else "full"]
    steps = args.steps or (1 if args.quick else 5)
    syncs = args.syncs or (2 if args.quick else 5)
    workers = [int(w) for w in (args.workers or ("1,2" if args.quick else "1,2,4")).split(",")]
    R = args.ranks

    import torch.distributed as dist
    from compass.lm.model_factory import build_model, build_tokenizer
    from compass.rl.config import RLConfig
    from compass.rl.ray_cluster import ensure_ray
    from compass.rl.rollout.ray_pool import RayRolloutPool
    from compass.rl.trainer.fsdp_trainer import FsdpTrainer
    from compass.rl.trainer.torch_trainer import TorchTrainer

    ensure_ray(num_cpus=max(R, 2))
    tok = build_tokenizer("")
    model = build_model(size["model"], tok, seed=0)
    params = sum(p.numel() for p in model.parameters())
    batch, adv = _batch(tok, size["rows"], size["prompt"], size["completion"])
    tokens = int(batch["attention_mask"].sum())
    before = torch.get_num_threads()

    def cfg(backend: dict) -> RLConfig:
        return RLConfig(trainer={"lr": 1e-4, "backend": backend})

    ranked = {"threads_per_rank": 1, "cpus_per_rank": 1}
    runs = [(f"torch, 1 process x {R} threads", {"kind": "torch"}, R),
            ("torch, 1 process x 1 thread", {"kind": "torch"}, 1),
            ("fsdp, 1 rank x 1 thread", {"kind": "fsdp"}, 1),
            (f"fsdp, {R} ranks x 1 thread (Ray, gloo)", {"kind": "fsdp", "ranks": R, **ranked}, 1)]
    tp_refused = None
    if with_megatron:
        from compass.lm.megatron_parallel import ParallelSizes
        try:
            ParallelSizes(R, 1, 1).check(R, model.config)
        except ValueError as e:            # the quick model has one KV head: no tensor parallelism
            tp_refused = str(e)
        runs += [("megatron, 1 rank x 1 thread", {"kind": "megatron"}, 1),
                 (f"megatron, {R} data-parallel ranks x 1 thread", {"kind": "megatron", "ranks": R, **ranked}, 1)]
        if tp_refused is None:
            runs.append((f"megatron, {R} tensor-parallel ranks x 1 thread",
                         {"kind": "megatron", "ranks": R, "tensor_parallel": R, **ranked}, 1))
        runs.append((f"megatron, {R} data-parallel ranks, AdamW sharded",
                     {"kind": "megatron", "ranks": R, "distributed_optimizer": True, **ranked}, 1))
    rows, held = [], []
    for label, backend, threads in runs:
        torch.set_num_threads(threads)
        c = cfg(backend)
        kind = backend["kind"]
        if kind == "megatron":
            from compass.rl.trainer.megatron_trainer import MegatronTrainer as cls
        else:
            cls = TorchTrainer if kind == "torch" else FsdpTrainer
        trainer = cls(copy.deepcopy(model), c)
        try:
            secs = time_updates(trainer, batch, adv, c, steps)
            if backend.get("distributed_optimizer"):        # each rank's share of AdamW's state
                held = (trainer.group.call("adam_held") if trainer.group is not None
                        else [trainer._local.adam_held()])
        finally:
            trainer.close()
            torch.set_num_threads(before)
        rows.append({"trainer": label, "update_s": round(secs, 4), "tokens_per_s": round(tokens / secs, 1)})
        if dist.is_initialized() and backend.get("ranks", 1) == 1 and kind != "torch":
            if kind == "megatron":              # megatron's groups go with the default group they were made in
                from megatron.core import parallel_state as ps
                ps.destroy_model_parallel()
            dist.destroy_process_group()        # the in-process rank's group of one
    t_torch_r, t_torch1, t_one, t_r = (r["update_s"] for r in rows[:4])
    speedup = t_one / t_r
    print(f"model: {params / 1e6:.1f}M parameters; batch: {size['rows']} rows, {tokens} tokens; "
          f"median of {steps} update(s)")
    print(f"\n{'trainer':46} {'update s':>9} {'tokens/s':>10}")
    for r in rows:
        print(f"{r['trainer']:46} {r['update_s']:>9.4f} {r['tokens_per_s']:>10.1f}")
    print(f"\n{R} ranks over 1 rank: {speedup:.2f}x (parallel efficiency {speedup / R:.0%}); against torch on "
          f"{R} threads: {t_torch_r / t_r:.2f}x; fsdp's own cost at 1 rank: {t_one / t_torch1:.2f}x torch's")
    mega = {}
    if with_megatron:
        m_one, m_dp = rows[4]["update_s"], rows[5]["update_s"]
        mega = {"megatron_update_s_1rank": m_one, f"megatron_update_s_{R}dp": m_dp,
                "megatron_dp_speedup": round(m_one / m_dp, 3),
                "megatron_overhead_vs_torch_1thread": round(m_one / t_torch1, 3)}
        tp = "not run: " + tp_refused if tp_refused else ""
        m_zero = rows[-1]["update_s"]
        share = max(h["numel_held"] / h["numel"] for h in held)     # the largest rank's share of the moments
        mega |= {f"megatron_update_s_{R}dp_sharded": m_zero,
                 "megatron_sharded_over_replicated": round(m_zero / m_dp, 3),
                 "megatron_sharded_adam_share_max": round(share, 3)}
        if not tp_refused:
            m_tp = rows[6]["update_s"]
            mega |= {f"megatron_update_s_{R}tp": m_tp, "megatron_tp_speedup": round(m_one / m_tp, 3)}
            tp = f"{m_one / m_tp:.2f}x"
        print(f"megatron: {R} data-parallel ranks over 1 rank {m_one / m_dp:.2f}x, {R} tensor-parallel ranks "
              f"{tp}; megatron's own cost at 1 rank: {m_one / t_torch1:.2f}x torch's")
        print(f"megatron, AdamW's state sharded over {R} data-parallel ranks: the largest rank holds {share:.0%} of "
              f"the moments (replicated: 100%); update {m_zero / m_dp:.2f}x the replicated one's time")

    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    mb = sum(v.numel() * v.element_size() for v in sd.values()) / 2**20
    sync_rows = []
    for w in workers:
        row = {"workers": w}
        for how in ("object_store", "broadcast"):
            pool = RayRolloutPool("hf", model, tok, workers=w, threads_per_worker=1, dtype="float32", weight_sync=how)
            try:
                pool.sync_weights(sd)                         # untimed: the first load (and the group's start)
                times = []
                for _ in range(syncs):
                    t0 = time.perf_counter()
                    pool.sync_weights(sd)
                    times.append(time.perf_counter() - t0)
            finally:
                pool.close()
            row[how] = round(statistics.median(times), 4)
        sync_rows.append(row)
    print(f"\nweight sync, {mb:.1f} MiB fp32, median of {syncs}:")
    print(f"{'workers':>8} {'object store s':>15} {'broadcast s':>12} {'broadcast / store':>18}")
    for r in sync_rows:
        print(f"{r['workers']:>8} {r['object_store']:>15.4f} {r['broadcast']:>12.4f} "
              f"{r['broadcast'] / r['object_store']:>18.2f}")
    head = {"bench": "scaling", "quick": args.quick, "params_m": round(params / 1e6, 2), "tokens": tokens,
            "ranks": R, "update_s_1rank": t_one, f"update_s_{R}ranks": t_r, "speedup": round(speedup, 3),
            "parallel_efficiency": round(speedup / R, 3), f"speedup_vs_torch_{R}threads": round(t_torch_r / t_r, 3),
            "fsdp_overhead_vs_torch_1thread": round(t_one / t_torch1, 3), **mega,
            **{f"sync_s_{r['workers']}workers": r["object_store"] for r in sync_rows},
            **{f"broadcast_s_{r['workers']}workers": r["broadcast"] for r in sync_rows}}
    print(json.dumps(head))
    return 0
