"""Our RL step against TRL's GRPOTrainer: same tiny model, prompts, group size, max tokens and batch, one process.

Both sides start from identical weights (the world's tiny Qwen3-MoE, random
init from the world seed, vocabulary from the world's tokenizer) and get the
same prompts in the same order: step k of each side sees the same
``--prompts`` world prompts, samples ``--group`` completions of each with up to
``--max-tokens`` new tokens at temperature 1.0 (no top-k/top-p, the whole
vocabulary, stopping on the same eos), scores them with the gym's
``compass.gym.score.score`` (the prompt's verifier spec and reference; TRL
gets it as a reward function that decodes the ids exactly as our sampler does)
and takes one AdamW step (same lr, clip 0.2, grad-norm 1.0, no KL, token-mean
loss, no reference model). Our side runs its defaults (``--rollout auto``: the
``native`` decoder on this model; the torch trainer with its shared-prefix
forward); ``--rollout hf`` puts transformers ``generate`` on our side too.

The two runs are interleaved: a TRL callback runs our step right after each TRL
step, so load from other processes on the machine hits both sides alike. The
first ``--warmup`` steps of each side are excluded. A TRL step is timed from the
end of the previous step to the end of this one (data loading, generation,
reward, update and TRL's bookkeeping); ours around the whole
``compass.rl.engine.train`` call (its per-call setup included). Reported:
samples/s and generated tokens/s per side, the ratio, and where each side's
step time goes.

The default prompts are the world's ``ifeval`` prompts: from a random init the
rule checks give partial credit (no arithmetic answer is ever right), so the
groups have reward variance and our engine never skips its backward pass for
lack of signal (it does when every advantage is 0; TRL never skips). The table
says how many timed steps each side updated on.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import statistics
import tempfile
import time
import warnings

TRL_MATCHED = [
    # (setting, value or None for "from the bench's arguments", why)
    ("num_generations", "group", "group size"),
    ("per_device_train_batch_size", "prompts x group", "one step covers every completion of the step"),
    ("gradient_accumulation_steps", 1, "one optimizer step per batch"),
    ("steps_per_generation", 1, "one generation per optimizer step (generation_batch_size = batch)"),
    ("num_iterations", 1, "one update per batch"),
    ("max_completion_length", "max tokens", "max_new_tokens"),
    ("temperature / top_p / top_k", "1.0 / 1.0 / 0", "plain sampling, as our sampler"),
    ("learning_rate", "lr", "same AdamW lr"),
    ("lr_scheduler_type", "constant", "TRL's default decays linearly; ours is constant"),
    ("weight_decay / max_grad_norm / epsilon", "0 / 1.0 / 0.2", "TRL defaults, equal to ours"),
    ("beta", 0.0, "no KL, no reference model (TRL default, our default)"),
    ("loss_type / scale_rewards", "dapo / group", "TRL defaults: token mean, group-std advantages (ours)"),
    ("router_aux_loss_coef", 0.0, "TRL adds the MoE load-balancing loss by default; ours has none"),
    ("gradient_checkpointing", False, "TRL default True recomputes activations; ours does not"),
    ("bf16 / fp16", "False / False", "fp32 both sides (TRL defaults to bf16)"),
    ("use_cpu / use_vllm", "True / False", "generation on the CPU, as ours (TRL: transformers generate)"),
    ("shuffle_dataset", False, "dataset laid out in our sampler's order: same prompts per step"),
    ("logging_strategy / save_strategy / report_to", "no / no / none", "no logging or saving work"),
]


# -- setup -------------------------------------------------------------------------------

def build_setup(tasks: list[str], quick: bool, seed: int = 0):
    """(model, tokenizer, prompts): the world's tiny model and tokenizer, and its RL prompts of ``tasks``."""
    from compass.cli.main import default_config
    from compass.config import read_yaml, validate
    from compass.lm.model_factory import build_model, build_tokenizer
    from compass.rl.sampling.prompt_data import prompts_from_table
    from stages.world.build import build_world
    from stages.world.config import WorldConfig

    raw = read_yaml(default_config(), "world")
    if quick:  # a small world (one suite) for the test: same model sizes, a smaller corpus for the tokenizer
        raw = {**raw, "suites": {"ifeval": {"n": 60, "n_eval": 0}}, "n_preference_pairs": 0, "n_planted": 0}
        tasks = ["ifeval"]
    cfg = validate(WorldConfig, raw)
    world = build_world(cfg)
    tok = build_tokenizer(world.texts(), cfg.tokenizer)
    model = build_model(cfg.model, tok, cfg.seed + seed)
    prompts = [p for p in prompts_from_table(world.raw_prompts)
               if p.task in tasks and (p.reference.strip() or _no_reference_needed(p.verifier))]
    if not prompts:
        raise SystemExit(f"error: the world has no RL prompts of task(s) {', '.join(tasks)}")
    return model, tok, prompts, cfg


def _no_reference_needed(verifier: str) -> bool:
    from compass.gym.score import needs_reference
    try:
        return not needs_reference(verifier)
    except ValueError:
        return False


def schedule(prompts, steps: int, per_step: int, seed: int):
    """The prompts of each step, drawn once by our engine's own sampler; both sides get this list."""
    from compass.rl.sampling.prompt_data import PromptSampler
    sampler = PromptSampler(prompts, seed)
    return [sampler.take(per_step) for _ in range(steps)]


def decode_like_ours(tok, ids) -> str:
    """What ``compass.lm.chat.sample`` hands the scorer: eos and pad dropped, other special markup kept."""
    return tok.decode([t for t in ids if t not in (tok.eos_token_id, tok.pad_token_id)])


# -- TRL side ------------------------------------------------------------------------------

class TrlProbe:
    """Wraps a GRPOTrainer's generation and scoring methods with timers (behaviour unchanged)."""

    def __init__(self):
        self.gen_s: list[float] = []        # transformers generate (+ eos masking), per call
        self.prep_s: list[float] = []       # _generate_and_score_completions: generation, reward, batch prep
        self.reward_s: list[float] = []
        self.tokens: list[int] = []
        self.samples: list[int] = []
        self.rewards: list[list[float]] = []

    def wrap(self, trainer) -> None:
        def timed(fn, sink):
            def inner(*a, **k):
                t0 = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    sink.append(time.perf_counter() - t0)
            return inner
        trainer._generate_single_turn = timed(trainer._generate_single_turn, self.gen_s)
        trainer._generate_and_score_completions = timed(trainer._generate_and_score_completions, self.prep_s)


def make_reward_fn(tok, probe: TrlProbe):
    from compass.gym.score import score

    def gym_score(prompts, completions, completion_ids, verifier, reference, **_):
        t0 = time.perf_counter()
        out = [float(score(v, decode_like_ours(tok, ids), r)) for ids, v, r in zip(completion_ids, verifier, reference)]
        probe.reward_s.append(time.perf_counter() - t0)
        probe.tokens.append(sum(len(ids) for ids in completion_ids))
        probe.samples.append(len(completion_ids))
        probe.rewards.append(out)
        return out
    gym_score.__name__ = "gym_score"
    return gym_score


def make_trl_trainer(model, tok, steps_prompts, args, probe: TrlProbe, callbacks, out_dir: str):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    rows = [{"prompt": [{"role": "user", "content": p.prompt}], "verifier": p.verifier, "reference": p.reference}
            for step in steps_prompts for p in step]
    batch = args.prompts * args.group
    config = GRPOConfig(
        output_dir=out_dir, seed=args.seed, max_steps=len(steps_prompts),
        per_device_train_batch_size=batch, gradient_accumulation_steps=1, steps_per_generation=1,
        num_generations=args.group, num_iterations=1, max_completion_length=args.max_tokens,
        temperature=1.0, top_p=1.0, top_k=0,
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0, epsilon=0.2, beta=0.0, loss_type="dapo", scale_rewards="group",
        router_aux_loss_coef=0.0, gradient_checkpointing=False, bf16=False, fp16=False,
        use_cpu=True, use_vllm=False, shuffle_dataset=False, dataloader_num_workers=0,
        logging_strategy="no", save_strategy="no", report_to="none", disable_tqdm=True, log_completions=False,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[make_reward_fn(tok, probe)], args=config,
                          train_dataset=Dataset.from_list(rows), processing_class=tok, callbacks=callbacks)
    probe.wrap(trainer)
    return trainer, config


def read_back_trl(trainer, config, tok, args) -> tuple[dict, dict]:
    """What TRL will do, read from the built trainer, and whether each matches ours (all must be True)."""
    from compass.lm.chat import chat_prefix
    p = "Write one sentence about tea."
    ours_ids = tok(chat_prefix(tok, p), add_special_tokens=False)["input_ids"]
    trl_ids, _, _ = trainer._tokenize_prompts([[{"role": "user", "content": p}]])
    gc = trainer.generation_config
    param = next(trainer.model.parameters())
    values = {"num_generations": trainer.num_generations, "max_completion_length": gc.max_new_tokens,
              "generation_batch_size": config.generation_batch_size,
              "completions_per_update": config.per_device_train_batch_size * config.gradient_accumulation_steps}
    checks = {
        "completions_per_step": values["generation_batch_size"] == values["completions_per_update"]
        == args.prompts * args.group,
        "group_size": values["num_generations"] == args.group,
        "max_tokens": values["max_completion_length"] == args.max_tokens,
        "sampling": bool(gc.do_sample) and gc.temperature == 1.0 and gc.top_k in (0, None)
        and gc.top_p in (1.0, None) and not list(gc.suppress_tokens or []),
        "eos_pad": trainer.eos_token_ids == [tok.eos_token_id] and gc.pad_token_id == tok.pad_token_id,
        "prompt_ids": list(trl_ids[0]) == list(ours_ids),
        "one_update_per_batch": config.steps_per_generation == 1 and trainer.num_iterations == 1,
        "no_kl_no_aux": trainer.beta == 0.0 and trainer.ref_model is None and not trainer.aux_loss_enabled,
        "fp32_cpu": not config.bf16 and not config.fp16 and trainer.accelerator.device.type == "cpu"
        and str(param.dtype) == "torch.float32",
    }
    return values, checks


# -- the interleaved run ---------------------------------------------------------------------

def run(args) -> dict:
    import torch
    from transformers import TrainerCallback

    from compass.gym.score import score
    from compass.rl.config import RLConfig
    from compass.rl.engine import resolve_rollout_backend, train

    torch.set_num_threads(args.threads)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    t_setup = time.perf_counter()
    model, tok, prompts, wcfg = build_setup(tasks, args.quick, args.seed)
    ours_model = model
    trl_model = copy.deepcopy(model)
    identical = all(torch.equal(a, b) for a, b in zip(ours_model.state_dict().values(),
                                                       trl_model.state_dict().values()))
    total = args.warmup + args.steps
    plan = schedule(prompts, total, args.prompts, args.seed)
    probe = TrlProbe()
    ours: list[dict] = []
    trl_step_s: list[float] = []
    trl_cpu_s: list[float] = []
    threads_seen: set[int] = set()

    def our_step(k: int) -> None:
        cfg = RLConfig(seed=args.seed * 1000 + k + 1, steps=1,
                       sampling={"prompts_per_step": args.prompts, "group_size": args.group},
                       rollout={"backend": {"kind": args.rollout}, "max_new_tokens": args.max_tokens, "temperature": 1.0},
                       trainer={"lr": args.lr})
        threads_seen.add(torch.get_num_threads())
        t0, c0 = time.perf_counter(), time.process_time()
        res = (train(ours_model, tok, plan[k], cfg, reward_service=service, desc="ours") if service is not None
               else train(ours_model, tok, plan[k], cfg, score_fn=score, desc="ours"))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        m = res.metrics[0]
        ours.append({"wall_s": wall, "cpu_s": cpu, "step_s": m["time_step_s"], "rollout_s": m["time_rollout_s"],
                     "reward_s": m["time_reward_s"], "train_s": m.get("time_train_s", 0.0),
                     "tokens": m["tokens"], "samples": m["samples"], "updated": m.get("updated", 1.0),
                     "reward_mean": m["reward_mean"], "prompt_ids": [p.id for p in plan[k]]})

    class Interleave(TrainerCallback):
        mark = cpu_mark = None

        def on_train_begin(self, *a, **k):
            self.mark, self.cpu_mark = time.perf_counter(), time.process_time()

        def on_step_end(self, *a, **k):
            trl_step_s.append(time.perf_counter() - self.mark)
            trl_cpu_s.append(time.process_time() - self.cpu_mark)
            threads_seen.add(torch.get_num_threads())
            our_step(len(trl_step_s) - 1)
            self.mark, self.cpu_mark = time.perf_counter(), time.process_time()

    service = None
    if args.reward_workers:      # our samples scored in these processes as they finish (started once, not timed)
        from compass.gym.service import RewardService
        service = RewardService(args.reward_workers, default_timeout_s=60)
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory(prefix="vs-trl-") as out_dir, \
            warnings.catch_warnings():
        if service is not None:
            stack.callback(service.close)
        warnings.simplefilter("ignore")
        trainer, config = make_trl_trainer(trl_model, tok, plan, args, probe, [Interleave()], out_dir)
        trl_values, matches = read_back_trl(trainer, config, tok, args)
        setup_s = time.perf_counter() - t_setup
        with contextlib.redirect_stdout(io.StringIO()):     # TRL prints its run summary; the table is ours
            trainer.train()
    n = len(trl_step_s)
    if n != total or len(ours) != total or len(probe.samples) != total:
        raise RuntimeError(f"expected {total} steps per side, got TRL {n} ({len(probe.samples)} generations), "
                           f"ours {len(ours)}")
    return {"ours": ours, "trl_step_s": trl_step_s, "trl_cpu_s": trl_cpu_s, "probe": probe, "matches": matches,
            "trl_values": trl_values, "identical": identical,
            "rollout_backend": resolve_rollout_backend(args.rollout, ours_model),
            "threads": sorted(threads_seen), "setup_s": setup_s, "n_prompts": len(prompts), "tasks": tasks,
            "vocab": len(tok), "params": sum(p.numel() for p in model.parameters()), "wcfg": wcfg}


PHASES = ("generate", "reward", "update", "other")


def per_step_rows(r: dict) -> list[dict]:
    """One row per step and side: wall and CPU seconds, phase seconds, samples and generated tokens."""
    probe: TrlProbe = r["probe"]
    rows = []
    for k, (o, t_wall) in enumerate(zip(r["ours"], r["trl_step_s"])):
        prep = probe.prep_s[k]
        rows.append({
            "ours": {"wall": o["wall_s"], "cpu": o["cpu_s"], "samples": o["samples"], "tokens": o["tokens"],
                     "updated": o["updated"], "generate": o["rollout_s"], "reward": o["reward_s"],
                     "update": o["train_s"], "other": o["wall_s"] - o["rollout_s"] - o["reward_s"] - o["train_s"]},
            "trl": {"wall": t_wall, "cpu": r["trl_cpu_s"][k], "samples": probe.samples[k],
                    "tokens": probe.tokens[k], "updated": 1.0, "generate": probe.gen_s[k],
                    "reward": probe.reward_s[k], "update": t_wall - prep,
                    "other": prep - probe.gen_s[k] - probe.reward_s[k]}})
    return rows


def summarize(r: dict, args) -> dict:
    rows = per_step_rows(r)[args.warmup:]
    probe: TrlProbe = r["probe"]
    s: dict = {}
    for side in ("ours", "trl"):
        steps = [row[side] for row in rows]
        wall, cpu = sum(x["wall"] for x in steps), sum(x["cpu"] for x in steps)
        samples, tokens = sum(x["samples"] for x in steps), sum(x["tokens"] for x in steps)
        s[side] = {"wall": wall, "cpu": cpu, "samples": samples, "tokens": tokens,
                   "samples_per_s": samples / wall, "tokens_per_s": tokens / wall, "samples_per_cpu_s": samples / cpu,
                   "step_s": wall / len(steps), "step_s_median": statistics.median(x["wall"] for x in steps),
                   "updates": int(sum(x["updated"] for x in steps)),
                   "split": {k: sum(x[k] for x in steps) for k in PHASES},
                   "split_median": {k: statistics.median(x[k] for x in steps) for k in PHASES}}
    s["ours"]["reward_mean"] = statistics.fmean(x["reward_mean"] for x in r["ours"][args.warmup:])
    s["trl"]["reward_mean"] = statistics.fmean(v for rs in probe.rewards[args.warmup:] for v in rs)
    s["rows"] = rows
    return s


def steady_allocator() -> str:
    """Keep freed heap memory mapped (glibc ``mallopt``), so that neither side pays page faults to map
    fresh memory for its activations every step. With glibc's defaults TRL's update phase measured
    0.58-0.81 s a step when interleaved with our native rollout and 0.25-0.30 s with this set, ours
    unchanged: an artifact of the allocator, not of either engine (docs/benchmarks.md)."""
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        ok = libc.mallopt(m_mmap_threshold, 32 * 1024 * 1024) and libc.mallopt(m_trim_threshold, 1 << 30)
    except (OSError, AttributeError):
        return "default allocator (no glibc mallopt)"
    return "glibc mallopt: mmap threshold 32 MiB, trim threshold 1 GiB" if ok else "default allocator (mallopt refused)"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench vs-trl", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5, help="timed steps per side (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps per side first")
    ap.add_argument("--prompts", type=int, default=8, help="prompts per step")
    ap.add_argument("--group", type=int, default=4, help="completions per prompt (TRL: num_generations)")
    ap.add_argument("--max-tokens", type=int, default=48, help="max new tokens (TRL: max_completion_length)")
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--rollout", default="auto", choices=["auto", "native", "hf"],
                    help="our rollout backend (auto: native on this model)")
    ap.add_argument("--tasks", default="ifeval", help="world prompt tasks, comma-separated")
    ap.add_argument("--threads", type=int, default=2, help="torch threads, both sides")
    ap.add_argument("--reward-workers", type=int, default=0,
                    help="ours: score in this many reward-service processes as samples finish (0: in process)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true",
                    help="a seconds-long run for tests: small world, 2 prompts x 2 samples x 8 tokens, 1 timed step")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.prompts, args.group, args.max_tokens = 1, 1, 2, 2, 8
    if args.steps < 1 or args.warmup < 0 or args.prompts < 1 or args.group < 2 or args.max_tokens < 1:
        ap.error("need --steps >= 1, --warmup >= 0, --prompts >= 1, --group >= 2, --max-tokens >= 1")
    os.environ.setdefault("COMPASS_PROGRESS", "0")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    allocator = steady_allocator()
    import trl
    r = run(args)
    s = summarize(r, args)
    speedup = s["ours"]["samples_per_s"] / s["trl"]["samples_per_s"]
    m = r["wcfg"].model
    per_step = args.prompts * args.group
    print(f"# Ours vs TRL {trl.__version__} GRPOTrainer: tiny {m.arch} (hidden {m.hidden_size}, {m.num_layers} layers, "
          f"{m.num_experts} experts top-{m.experts_per_token}, head_dim {m.head_dim}, vocab {r['vocab']}, "
          f"{r['params']:,} params), {args.threads} torch threads\n")
    print(f"{args.steps} timed steps per side after {args.warmup} warm-up, interleaved (TRL step k, then ours step "
          f"k); each step {args.prompts} prompts x {args.group} samples x <= {args.max_tokens} new tokens = "
          f"{per_step} completions; prompts: world task(s) {', '.join(r['tasks'])} ({r['n_prompts']} prompts), "
          f"the same {args.prompts} per step on both sides; identical start weights: {r['identical']}\n")
    o, t = s["ours"], s["trl"]
    print("| side | samples/s | gen tokens/s | mean step s | median step s | samples | gen tokens | updates | "
          "mean reward |\n|---|---|---|---|---|---|---|---|---|")
    for name, x in (("ours (compass.rl.engine.train)", o), ("TRL GRPOTrainer", t)):
        print(f"| {name} | {x['samples_per_s']:.2f} | {x['tokens_per_s']:.0f} | {x['step_s']:.2f} | "
              f"{x['step_s_median']:.2f} | {x['samples']} | {x['tokens']} | {x['updates']}/{args.steps} | "
              f"{x['reward_mean']:.3f} |")
    cpu_speedup = o["samples_per_cpu_s"] / t["samples_per_cpu_s"]
    med_speedup = t["step_s_median"] / o["step_s_median"]
    tok_speedup = o["tokens_per_s"] / t["tokens_per_s"]
    print(f"\nspeedup (ours samples/s / TRL samples/s): {speedup:.2f}x (tokens/s: {tok_speedup:.2f}x; from the "
          f"median steps: {med_speedup:.2f}x; per CPU second of this process, which other load on the machine "
          f"disturbs less: {cpu_speedup:.2f}x, ours {o['cpu']:.1f} CPU s, TRL {t['cpu']:.1f} CPU s)\n")
    print("Per step (wall s; generate / update s in brackets), in run order; w = warm-up, not timed:\n")
    print("| step | TRL | ours |\n|---|---|---|")
    for k, row in enumerate(per_step_rows(r)):
        tag = f"{k}w" if k < args.warmup else str(k)
        print(f"| {tag} | " + " | ".join(f"{row[x]['wall']:.2f} ({row[x]['generate']:.2f} / {row[x]['update']:.2f})"
                                         for x in ("trl", "ours")) + " |")
    print("\nWhere a step's time goes (timed steps: seconds summed, and the median step's seconds):\n")
    print("| phase | ours sum s | ours share | ours median s | TRL sum s | TRL share | TRL median s |\n"
          "|---|---|---|---|---|---|---|")
    labels = {"generate": f"generate (ours: {r['rollout_backend']} rollout; TRL: transformers generate)",
              "reward": "reward (gym score)",
              "update": "update (log-probs, loss, backward, AdamW; TRL: + its trainer loop)",
              "other": "other (ours: per-call setup; TRL: decode, padding, advantages)"}
    for k, label in labels.items():
        print(f"| {label} | {o['split'][k]:.2f} | {o['split'][k] / o['wall']:.0%} | {o['split_median'][k]:.2f} | "
              f"{t['split'][k]:.2f} | {t['split'][k] / t['wall']:.0%} | {t['split_median'][k]:.2f} |")
    print(f"| total | {o['wall']:.2f} | 100% | {o['step_s_median']:.2f} | {t['wall']:.2f} | 100% | "
          f"{t['step_s_median']:.2f} |")
    print("\nTRL settings changed from its defaults or pinned, each to make the two runs do the same work:\n")
    print("| TRL setting | value | why |\n|---|---|---|")
    for name, val, why in TRL_MATCHED:
        print(f"| {name} | {val} | {why} |")
    print("\nread back from the built trainer: " + ", ".join(f"{k} {'ok' if v else 'MISMATCH'}"
                                                         for k, v in r["matches"].items()))
    print(f"torch threads seen during the steps: {r['threads']}; setup (world, model, trainer) "
          f"{r['setup_s']:.1f} s; allocator: {allocator}\n")
    settings_ok = all(r["matches"].values()) and r["identical"] and r["threads"] == [args.threads]
    out = {"bench": "vs-trl", "trl_version": trl.__version__,
           "speedup_vs_trl": round(speedup, 3),
           "ours_samples_per_s": round(o["samples_per_s"], 3), "trl_samples_per_s": round(t["samples_per_s"], 3),
           "ours_tokens_per_s": round(o["tokens_per_s"], 1), "trl_tokens_per_s": round(t["tokens_per_s"], 1),
           "tokens_speedup_vs_trl": round(tok_speedup, 3),
           "median_step_speedup_vs_trl": round(med_speedup, 3), "cpu_time_speedup_vs_trl": round(cpu_speedup, 3),
           "steps": args.steps, "warmup": args.warmup, "prompts_per_step": args.prompts, "group_size": args.group,
           "max_new_tokens": args.max_tokens, "temperature": 1.0, "lr": args.lr, "threads": args.threads,
           "tasks": r["tasks"], "ours_rollout_backend": r["rollout_backend"], "allocator": allocator,
           "ours_completions_per_step": o["samples"] // args.steps,
           "trl_completions_per_step": t["samples"] // args.steps,
           "trl_read_back": r["trl_values"], "ours_updates": o["updates"],
           "ours_time_split_s": {k: round(v, 3) for k, v in o["split"].items()},
           "trl_time_split_s": {k: round(v, 3) for k, v in t["split"].items()},
           "settings_matched": settings_ok, "quick": args.quick}
    print(json.dumps(out))
    return 0 if settings_ok else 1
