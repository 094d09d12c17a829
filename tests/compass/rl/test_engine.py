"""The RL engine's loop features: RL-ZVP, dynamic sampling, zero-variance dropping, Router Replay
metrics, the metric sinks, and exact resume after SIGKILL."""
from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
from compass.rl.config import GRPOAdvantage, RLConfig
from compass.rl.sampling.prompt_data import RLPrompt
from compass.rl.engine import train

V = json.dumps({"type": "test"})


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("")


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("COMPASS_PROGRESS", "0")


def planted():
    """reference 'pass' -> 1, 'fail' -> 0, 'mixed' -> 1, 0, 1, 0, ... over calls."""
    flip = itertools.cycle([1.0, 0.0])
    return lambda v, r, ref: {"pass": 1.0, "fail": 0.0}[ref] if ref != "mixed" else next(flip)


PROMPTS = [RLPrompt("P", "1+1=?", "pass", V, "math", "a"), RLPrompt("F", "2+2=?", "fail", V, "math", "a"),
           RLPrompt("M", "3+3=?", "mixed", V, "math", "a")]


def _by_prompt(res):
    out = {}
    for r in res.rollouts:
        out.setdefault(r["prompt_id"], []).append(r["advantage"])
    return out


def test_rl_zvp_gives_zero_variance_groups_signed_signal(tok):
    model = build_model(ModelConfig(), tok, seed=1)
    cfg = RLConfig(steps=1, sampling={"prompts_per_step": 3, "group_size": 4}, rollout={"max_new_tokens": 8},
                   advantage={"kind": "rl_zvp", "alpha": 0.5})
    res = train(model, tok, PROMPTS, cfg, score_fn=planted())
    adv = _by_prompt(res)
    assert all(a > 0 for a in adv["P"]), adv["P"]              # all passed: +α·H per token
    assert all(a < 0 for a in adv["F"]), adv["F"]              # all failed: -α·(max H - H)
    m = res.metrics[0]
    assert m["zero_variance_all_pass"] == 1 and m["zero_variance_all_fail"] == 1 and m["update_samples"] == 12
    grpo = train(build_model(ModelConfig(), tok, seed=1), tok, PROMPTS,
                 cfg.model_copy(update={"advantage": GRPOAdvantage()}), score_fn=planted())
    assert set(_by_prompt(grpo)["P"]) == {0.0}
    assert m["adv_abs_token_mean"] > grpo.metrics[0]["adv_abs_token_mean"]


def test_drop_zero_variance_updates_only_groups_with_signal(tok):
    model = build_model(ModelConfig(), tok, seed=1)
    cfg = RLConfig(steps=2, sampling={"prompts_per_step": 3, "group_size": 4, "drop_zero_variance": True},
                   rollout={"max_new_tokens": 8})
    res = train(model, tok, PROMPTS, cfg, score_fn=planted())
    assert [m["update_samples"] for m in res.metrics] == [4, 4]
    assert all(m["updated"] == 1.0 for m in res.metrics)


def test_dapo_dynamic_sampling_pays_for_the_groups_it_drops(tok):
    model = build_model(ModelConfig(), tok, seed=1)
    prompts = PROMPTS + [RLPrompt("M2", "4+4=?", "mixed", V, "math", "a")]
    cfg = RLConfig(steps=3, sampling={"prompts_per_step": 2, "group_size": 4, "dynamic": True,
                                      "dynamic_max_rounds": 4}, rollout={"max_new_tokens": 8})
    res = train(model, tok, prompts, cfg, score_fn=planted())
    for m in res.metrics:
        assert m["groups_kept"] <= 2 and m["zero_variance_rate"] > 0 or m["sampling_rounds"] == 1
        assert m["reward_std"] > 0                              # only groups with spread reach the update
        assert m["groups"] == m["samples"] // 4 >= m["groups_kept"]
    kept_rows = [r for r in res.rollouts if r["prompt_id"] in ("M", "M2")]
    dropped = [r for r in res.rollouts if r["prompt_id"] in ("P", "F")]
    assert dropped and all(r["advantage"] == 0.0 for r in dropped) and kept_rows
    # the rollout budget counts every generated token, dropped groups included
    assert res.metrics[-1]["rollout_tokens_total"] == sum(r["num_tokens"] for r in res.rollouts)
    assert any(m["sampling_rounds"] > 1 for m in res.metrics)


def plant_near_tie_routers(model, seed: int = 0, spread: float = 1e-4):
    """Make every router's expert rows equal but for a relative ``spread`` far below bf16's resolution
    (2**-8): an fp32 forward ranks the experts by that spread, a bf16 one sees ties, so routes flip on any
    CPU. Without it, whether a random tiny model flips a route under bf16 depends on the machine's
    rounding (issue 30: no flip on another 2-core machine)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in model.model.layers:
            w = layer.mlp.gate.weight                           # [num_experts, hidden]
            row = w[0].clone()
            w.copy_(row * (1 + spread * torch.randn(w.shape, generator=g)))
    return model


def test_router_replay_shrinks_the_bf16_rollout_gap_and_sinks_write_jsonl_tensorboard_png(tok, tmp_path):
    model = plant_near_tie_routers(build_model(ModelConfig(), tok, seed=4))
    cfg = RLConfig(steps=2, sampling={"prompts_per_step": 3, "group_size": 4},
                   rollout={"max_new_tokens": 12, "dtype": "bfloat16"}, trainer={"router_replay": True})
    res = train(model, tok, PROMPTS, cfg, score_fn=planted(), out_dir=tmp_path)
    for m in res.metrics:
        # the planted near-ties flip routes under bf16 on every step; replay removes the gap they cause
        assert 0.0 < m["routing_agreement"] < 1.0, m
        assert 0 < m["logp_gap_mean"] < m["logp_gap_mean_no_replay"], m
        assert m["logp_gap_max"] >= m["logp_gap_p99"] >= 0
        assert min(m["time_old_logp_s"], m["time_update_s"], m["time_sync_s"]) >= 0 and m["tokens_per_s"] > 0
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [0, 1]
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    pngs = {p.name for p in (tmp_path / "plots").glob("*.png")}
    assert {"reward.png", "zero_variance.png", "mismatch.png", "routing.png", "time.png"} <= pngs
    # a shared fp32 rollout recomputes its own log-probs: the gap is rounding only
    cfg32 = cfg.model_copy(deep=True)
    cfg32.steps, cfg32.rollout.dtype, cfg32.trainer.router_replay = 1, "float32", False
    res32 = train(build_model(ModelConfig(), tok, seed=4), tok, PROMPTS, cfg32, score_fn=planted())
    assert res32.metrics[0]["logp_gap_mean"] < 1e-4 < res.metrics[0]["logp_gap_mean_no_replay"]


RUN = textwrap.dedent('''
    import json, os, signal, sys, torch
    torch.set_num_threads(1)
    from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
    from compass.rl.config import RLConfig
    from compass.rl.sampling.prompt_data import RLPrompt
    from compass.rl.engine import train
    from safetensors.torch import save_file
    state_dir, out, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tok = build_tokenizer("")
    model = build_model(ModelConfig(), tok, seed=5)
    v = json.dumps({"type": "math_exact"})
    prompts = [RLPrompt(f"p{i}", f"{i}+{i}=?", str(2 * i), v, "math", "a") for i in range(6)]
    score = lambda spec, resp, ref: float(len(resp) % 3 == 0)
    cfg = RLConfig(steps=5, checkpoint_every=1, sampling={"prompts_per_step": 3, "group_size": 4},
                   rollout={"max_new_tokens": 10}, trainer={"lr": 1e-3}, advantage={"kind": "rl_zvp"},
                   loss={"kind": "espo"})
    def on_step(step, row, m):
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    res = train(model, tok, prompts, cfg, score_fn=score, state_dir=state_dir if state_dir != "-" else None,
                on_step=on_step)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, out)
    print(json.dumps({"steps": [m["step"] for m in res.metrics], "rollouts": len(res.rollouts)}))
''')


def test_resume_after_sigkill_equals_an_uninterrupted_run(tmp_path):
    from safetensors.torch import load_file
    script = tmp_path / "run.py"
    script.write_text(RUN)
    env = {**os.environ, "COMPASS_PROGRESS": "0", "PYTHONPATH": os.getcwd()}

    def run(state, out, kill_at):
        return subprocess.run([sys.executable, str(script), state, str(out), str(kill_at)], env=env,
                              capture_output=True, text=True, timeout=300)

    whole = run("-", tmp_path / "whole.safetensors", -1)
    assert whole.returncode == 0, whole.stderr[-2000:]
    killed = run(str(tmp_path / "state"), tmp_path / "resumed.safetensors", 2)
    assert killed.returncode == -signal.SIGKILL
    assert (tmp_path / "state" / "rl_state.pt").exists() and not (tmp_path / "resumed.safetensors").exists()
    resumed = run(str(tmp_path / "state"), tmp_path / "resumed.safetensors", -1)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads(resumed.stdout.strip().splitlines()[-1]) == json.loads(whole.stdout.strip().splitlines()[-1])
    a, b = load_file(tmp_path / "whole.safetensors"), load_file(tmp_path / "resumed.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k                        # bit-exact on CPU with the same threads


def test_engine_with_the_megatron_trainer_and_a_bf16_rollout_replaying_routes(tok):
    model = plant_near_tie_routers(build_model(ModelConfig(), tok, seed=6))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = RLConfig(steps=2, sampling={"prompts_per_step": 3, "group_size": 4},
                   rollout={"max_new_tokens": 8, "dtype": "bfloat16"},
                   trainer={"lr": 1e-3, "backend": {"kind": "megatron"}, "router_replay": True})
    res = train(model, tok, PROMPTS, cfg, score_fn=planted())
    for m in res.metrics:
        # planted near-tie routers: routes flip under bf16 on every step, and replay shrinks the gap
        assert m["updated"] == 1.0 and 0.0 < m["routing_agreement"] < 1.0, m
        assert m["logp_gap_mean"] < m["logp_gap_mean_no_replay"], m
    # the HF policy the stage saves holds the megatron-trained weights
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_mini_batches_let_the_clip_act_and_only_full_marks_retire_a_prompt(tok):
    """With one update per batch the ratio is 1 and no clip can bind; with mini-batches the later steps
    meet a moved policy (old log-probs = the sampler's). A group sharing a partial-credit score is not
    'solved'; one where every sample got full marks is."""
    def scorer():
        mixed = planted()
        return lambda v, r, ref: 0.7 if ref == "part" else mixed(v, r, ref)
    prompts = PROMPTS + [RLPrompt("H", "4+4=?", "part", V, "math", "a")] + [
        RLPrompt(f"M{i}", f"{i}+{i}+1=?", "mixed", V, "math", "a") for i in range(4)]
    # 2 steps x 4 prompts: every prompt drawn once
    base = dict(steps=2, checkpoint_every=0, rollout={"max_new_tokens": 8}, advantage={"kind": "rl_zvp"},
                sampling={"prompts_per_step": 4, "group_size": 4, "retire_solved": True})
    one = train(build_model(ModelConfig(), tok, seed=2), tok, prompts, RLConfig(**base, trainer={"lr": 5e-2}),
                score_fn=scorer())
    four = train(build_model(ModelConfig(), tok, seed=2), tok, prompts,
                 RLConfig(**base, trainer={"lr": 5e-2, "mini_batches": 4}), score_fn=scorer())
    m1, m4 = one.metrics[0], four.metrics[0]
    assert m1["mini_batches"] == 1 and m1["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and m1["clip_frac"] == 0.0
    assert m4["mini_batches"] == 4 and m4["updated"] == 1.0
    assert abs(m4["ratio_mean"] - 1.0) > 1e-4 and m4["clip_frac"] > 0.0
    # the same samples on both (same seed), so the first mini-batch's gap is the sampler-vs-trainer rounding
    assert [r["response"] for r in one.rollouts if r["step"] == 0] == \
        [r["response"] for r in four.rollouts if r["step"] == 0]
    assert m4["logp_gap_mean"] < 1e-4
    assert sorted(r["prompt_id"] for r in one.rollouts[::4]) == sorted(p.id for p in prompts)
    assert one.metrics[-1]["prompts_retired"] == 1 == four.metrics[-1]["prompts_retired"]   # "P" (all 1.0), not "H" (all 0.7)


def test_the_reward_audit_counts_reasons_and_all_fails_the_verifier_caused(tok):
    """A prompt whose gold the verifier cannot read ('bad') fails every sample for the verifier's reason; a
    wrong answer ('fail') fails for the response's: only the first is the verifier's all-fail."""
    from compass.gym.score import Reward

    def score(v, r, ref):
        return {"pass": Reward(1.0), "fail": Reward(0.0, "no_answer"), "bad": Reward(0.0, "bad_gold")}[ref]
    prompts = [RLPrompt("P", "1+1=?", "pass", V, "math", "a"), RLPrompt("F", "2+2=?", "fail", V, "math", "a"),
               RLPrompt("B", "3+3=?", "bad", V, "math", "a")]
    cfg = RLConfig(steps=2, sampling={"prompts_per_step": 3, "group_size": 2}, rollout={"max_new_tokens": 4})
    res = train(build_model(ModelConfig(), tok, seed=1), tok, prompts, cfg, score_fn=score)
    for m in res.metrics:
        assert m["reward_errors_by_reason"] == {"bad_gold": 2, "no_answer": 2}
        assert m["zero_variance_all_fail"] == 2 and m["zero_variance_all_fail_verifier_fault"] == 1
        assert m["reward_verifier_fault_samples"] == 2
    s = res.summary()
    assert s["all_fail_verifier_fault_share"] == 0.5 and s["reward_errors_by_reason"] == {"bad_gold": 4,
                                                                                         "no_answer": 4}
    assert {r["prompt_id"]: r["reward_reason"] for r in res.rollouts} == {"P": None, "F": "no_answer",
                                                                          "B": "bad_gold"}


def test_dapo_rounds_with_reasons_keep_the_group_size(tok):
    """Reason counts are summed per round without touching the round's group size (a second DAPO round
    once generated groups of the wrong size)."""
    from compass.gym.score import Reward
    flip = itertools.cycle([1.0, 0.0])

    def score(v, r, ref):
        if ref == "mixed":
            x = next(flip)
            return Reward(x, None if x else "test_failed")     # 2 reasons per group: a count that is not N
        return Reward(0.0, "no_answer") if ref == "fail" else Reward(1.0)
    # only mixed prompts give reasons (2 per group); the pass prompt forces further rounds
    prompts = [RLPrompt("P", "1+1=?", "pass", V, "math", "a"), RLPrompt("M", "3+3=?", "mixed", V, "math", "a"),
               RLPrompt("M2", "4+4=?", "mixed", V, "math", "a")]
    cfg = RLConfig(steps=3, sampling={"prompts_per_step": 2, "group_size": 4, "dynamic": True,
                                      "dynamic_max_rounds": 4}, rollout={"max_new_tokens": 4})
    res = train(build_model(ModelConfig(), tok, seed=1), tok, prompts, cfg, score_fn=score)
    assert any(m["sampling_rounds"] > 1 for m in res.metrics)
    assert all(m["samples"] == 4 * m["groups"] for m in res.metrics)
    assert all(m["reward_errors_by_reason"].get("test_failed", 0) % 2 == 0 for m in res.metrics)
