"""Reasoning RL stage: trains on the reasoning rows only, writes valid checkpoint/prompt_stats/rollouts, reuses."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from compass.config import ConfigError, validate
from compass.lm.model_factory import (
    ModelConfig,
    build_model,
    build_tokenizer,
    load_checkpoint,
    save_checkpoint,
)
from compass.store.store import ArtifactStore
from stages.reasoning_rl import stage as reasoning_rl
from stages.reasoning_rl.config import ReasoningRLConfig
from tests.helpers import MATH_VERIFIER, MCQ_VERIFIER, commit_artifact

MATH, MCQ = MATH_VERIFIER, MCQ_VERIFIER
_commit = commit_artifact


def prompts_table(n_math: int, n_domain: int, n_math_by_verifier: int = 0) -> pa.Table:
    rows = []
    for i in range(n_math):
        rows.append({"id": f"m{i}", "domain": "math", "task": "arith", "language": "en",
                     "prompt": f"{i}+{i + 1}=?", "reference": str(2 * i + 1), "verifier": MATH,
                     "difficulty": 1, "pass_rate": None})
    for i in range(n_math_by_verifier):
        rows.append({"id": f"v{i}", "domain": "ecommerce", "task": "price_sum", "language": "en",
                     "prompt": f"Two items cost {i} and 3. Total?", "reference": str(i + 3), "verifier": MATH,
                     "difficulty": None, "pass_rate": None})
    for i in range(n_domain):
        rows.append({"id": f"d{i}", "domain": "ecommerce", "task": "mcq", "language": "en",
                     "prompt": f"Which item is a shoe? A) hat B) boot C) cup D) pen ({i})", "reference": "B",
                     "verifier": MCQ, "difficulty": None, "pass_rate": None})
    return pa.Table.from_pylist(rows, schema=pa.schema([
        ("id", pa.string()), ("domain", pa.string()), ("task", pa.string()), ("language", pa.string()),
        ("prompt", pa.string()), ("reference", pa.string()), ("verifier", pa.string()),
        ("difficulty", pa.int32()), ("pass_rate", pa.float64())]))


@pytest.fixture()
def world(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    store = ArtifactStore(str(tmp_path / "a"), cache_dir=tmp_path / "cache")
    tok = build_tokenizer("")
    policy = _commit(store, "checkpoint", "thinking_base",
                     lambda w: save_checkpoint(build_model(ModelConfig(), tok, seed=0), tok, w.dir))
    prompts = _commit(store, "prompts", "rl_prompts",
                      lambda w: w.write_table(prompts_table(n_math=12, n_domain=6, n_math_by_verifier=2)))
    return store, {"policy": policy, "prompts": prompts}


def test_default_config_trains_on_reasoning_prompts_and_writes_valid_outputs(world):
    store, inputs = world
    cfg = ReasoningRLConfig()
    names = {"checkpoint": "ckpt_r1", "prompt_stats": "prompt_stats_r1", "rollouts": "rollouts_r1"}
    res = reasoning_rl.run(cfg, inputs, store, output_names=names)
    assert res.status == "ran"
    ckpt = store.open(res.outputs["checkpoint"])
    stats_art = store.open(res.outputs["prompt_stats"])
    ro_art = store.open(res.outputs["rollouts"])
    assert (ckpt.name, stats_art.name, ro_art.name) == ("ckpt_r1", "prompt_stats_r1", "rollouts_r1")

    n = cfg.steps * cfg.sampling.prompts_per_step * cfg.sampling.group_size
    rollouts = ro_art.read_table()                     # read_table validates the schema
    assert rollouts.num_rows == n == ro_art.manifest.rows
    reasoning_ids = {f"m{i}" for i in range(12)} | {"v0", "v1"}
    assert set(rollouts.column("prompt_id").to_pylist()) <= reasoning_ids
    assert set(rollouts.column("step").to_pylist()) == set(range(cfg.steps))
    rewards = rollouts.column("reward").to_pylist()
    assert all(0.0 <= r <= 1.0 for r in rewards)

    stats = stats_art.read_table()
    assert sum(stats.column("n_samples").to_pylist()) == n
    assert set(stats.column("prompt_id").to_pylist()) == set(rollouts.column("prompt_id").to_pylist())
    # 4 steps x 8 prompts over 14 reasoning prompts: every prompt measured at least twice
    assert stats.num_rows == 14 and min(stats.column("n_samples").to_pylist()) >= 2 * cfg.sampling.group_size
    for row in stats.to_pylist():
        mine = [r for r in rollouts.to_pylist() if r["prompt_id"] == row["prompt_id"]]
        assert row["mean_reward"] == pytest.approx(sum(r["reward"] for r in mine) / len(mine))
        assert row["pass_rate"] == pytest.approx(sum(r["reward"] > 0.5 for r in mine) / len(mine))

    lines = ckpt.local_path("metrics.jsonl").read_text().splitlines()
    metrics = [json.loads(x) for x in lines]
    assert [m["step"] for m in metrics] == list(range(cfg.steps))
    for m in metrics:
        for key in ("reward_mean", "zero_variance_rate", "zero_variance_all_pass", "zero_variance_all_fail",
                    "adv_abs_mean", "entropy", "clip_frac", "tokens", "time_rollout_s", "time_reward_s",
                    "time_train_s"):
            assert key in m, key
        assert m["zero_variance_all_pass"] + m["zero_variance_all_fail"] == pytest.approx(
            m["zero_variance_rate"] * m["groups"])
    assert sum(m["tokens"] for m in metrics) == sum(rollouts.column("num_tokens").to_pylist())

    extra = ckpt.manifest.extra
    assert extra["steps"] == cfg.steps and extra["samples"] == n and extra["prompts_available"] == 14
    assert extra["pool_domains"] == {"ecommerce": 2, "math": 12}      # math_exact rows of e-commerce too
    assert extra["policy"] == inputs["policy"].uri
    assert stats_art.manifest.extra["samples"] == n
    model, tok = load_checkpoint(ckpt.local_dir())
    assert model.config.model_type == "qwen3_moe" and len(tok) > 0
    # the UI summary shows the reward and zero-variance curves, inlined from the checkpoint's plots
    from compass.runtime.stage_summary import stage_summary
    summary = ckpt.local_path("summary.md").read_text()
    assert "![plots/reward.png](plots/reward.png)" in summary and "(plots/zero_variance.png)" in summary
    assert stage_summary(res, store).count("](data:image/png;base64,") == 2

    again = reasoning_rl.run(cfg, inputs, store, output_names=names)
    assert again.status == "reused" and again.outputs == res.outputs


def test_pool_graded_by_the_policy_is_what_the_run_trains_on(world):
    """``sampling.pool``: a seeded draw graded by the starting policy, its grades beside the checkpoint and its
    counts in the manifest; the run trains on the kept prompts only; a pool that keeps nothing is a clear error
    and leaves no artifact."""
    import pyarrow.parquet as pq
    store, inputs = world
    cfg = ReasoningRLConfig(steps=2, sampling={"prompts_per_step": 4, "pool": {"size": 5, "candidates": 8, "k": 2}},
                            rollout={"max_new_tokens": 6})
    res = reasoning_rl.run(cfg, inputs, store)
    ckpt = store.open(res.outputs["checkpoint"])
    pool = pq.read_table(ckpt.local_path("pool.parquet")).to_pylist()
    assert len(pool) == 8 and len({r["prompt_id"] for r in pool}) == 8
    kept = {r["prompt_id"] for r in pool if r["outcome"] == "kept"}
    assert len(kept) == min(5, sum(r["passes"] < r["k"] for r in pool))
    rollouts = store.open(res.outputs["rollouts"]).read_table()
    assert set(rollouts.column("prompt_id").to_pylist()) <= kept
    extra = ckpt.manifest.extra
    assert extra["pool_graded"] == 8 and extra["pool_kept"] == len(kept) and extra["pool_k"] == 2
    assert extra["pool_tokens"] == sum(r["tokens"] for r in pool)
    assert sum(extra["pool_domains"].values()) == len(kept)

    nothing = cfg.model_copy(update={"sampling": cfg.sampling.model_copy(update={"pool": cfg.sampling.pool.model_copy(
        update={"drop_never_solved": True, "drop_always_solved": True, "candidates": 1, "k": 1})})})
    before = len(store.list("checkpoint", "ckpt_r1"))
    with pytest.raises(ValueError, match="sampling.pool kept no prompt"):
        reasoning_rl.run(nothing, inputs, store, output_names={"checkpoint": "ckpt_r1"})
    assert len(store.list("checkpoint", "ckpt_r1")) == before


def test_no_reasoning_prompts_is_a_clear_error(world, tmp_path):
    store, inputs = world
    only_domain = _commit(store, "prompts", "domain_only", lambda w: w.write_table(prompts_table(0, 4)))
    with pytest.raises(ValueError, match="no reasoning prompts"):
        reasoning_rl.run(ReasoningRLConfig(steps=1), {**inputs, "prompts": only_domain}, store)
    assert not store.list("checkpoint", "checkpoint")     # nothing half-written became visible


def test_spec_matches_the_dag():
    from compass.dag.pipeline import NODES
    node, spec = NODES["reasoning_rl"], reasoning_rl.SPEC
    assert set(spec.inputs) == set(node.inputs) and set(spec.outputs) == set(node.outputs)
    assert spec.inputs == {"policy": "checkpoint", "prompts": "prompts"}
    assert spec.outputs == {"checkpoint": "checkpoint", "prompt_stats": "prompt_stats", "rollouts": "rollouts"}


def test_config_names_the_new_place_of_an_old_flat_key():
    with pytest.raises(ConfigError, match=r"reasoning_rl.yaml: \(top level\): `policy_loss: espo` is now "
                                          r"`loss: \{kind: espo\}`"):
        validate(ReasoningRLConfig, {"policy_loss": "espo"}, "reasoning_rl.yaml")
