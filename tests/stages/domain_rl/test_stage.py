"""Domain RL stage: domain prompts plus exactly the carryover band of phase-1 prompts at the configured ratio;
open-ended prompts judged by the GenRM checkpoint."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from compass.config import ConfigError, validate
from compass.lm.model_factory import (
    ModelConfig,
    build_model,
    build_tokenizer,
    save_checkpoint,
)
from compass.store.store import ArtifactStore
from stages.domain_rl import stage as domain_rl
from stages.domain_rl.carryover import mix_carryover, select_carryover
from stages.domain_rl.config import DomainRLConfig
from tests.helpers import MATH_VERIFIER, MCQ_VERIFIER, commit_artifact

MATH, MCQ = MATH_VERIFIER, MCQ_VERIFIER
_commit = commit_artifact


def _prompts() -> pa.Table:
    rows = [{"id": f"m{i}", "domain": "math", "task": "arith", "language": "en", "prompt": f"{i}+2=?",
             "reference": str(i + 2), "verifier": MATH, "difficulty": 2, "pass_rate": None} for i in range(7)]
    rows += [{"id": f"d{i}", "domain": "ecommerce", "task": "mcq", "language": lang,
              "prompt": f"Pick the shoe ({i}). A) hat B) boot C) cup D) pen", "reference": "B", "verifier": MCQ,
              "difficulty": None, "pass_rate": None} for i, lang in enumerate(["en", "id", "vi"])]
    return pa.Table.from_pylist(rows)


# phase-1 measurements: (prompt_id, n_samples, pass_rate)
PHASE1 = [("m0", 8, 0.0), ("m1", 8, 0.5), ("m2", 8, 0.8), ("m3", 8, 0.875), ("m4", 8, 1.0),
          ("m5", 1, 0.0), ("m6", 8, 0.25), ("ghost", 8, 0.5)]


def _stats(rows=PHASE1) -> pa.Table:
    return pa.table({
        "prompt_id": [r[0] for r in rows], "domain": ["math"] * len(rows), "task": ["arith"] * len(rows),
        "n_samples": pa.array([r[1] for r in rows], pa.int32()),
        "pass_rate": [r[2] for r in rows], "mean_reward": [r[2] for r in rows],
        "zero_variance": [r[2] in (0.0, 1.0) for r in rows]})


def test_select_carryover_band_is_inclusive_and_respects_min_samples():
    s = _stats()
    assert select_carryover(s, min_pass_rate=0.0, max_pass_rate=0.8) == ["m0", "m1", "m2", "m5", "m6", "ghost"]
    assert select_carryover(s, min_pass_rate=0.0, max_pass_rate=0.8, min_samples=2) == ["m0", "m1", "m2", "m6",
                                                                                         "ghost"]
    assert select_carryover(s, min_pass_rate=0.25, max_pass_rate=0.5) == ["m1", "m6", "ghost"]
    assert select_carryover(s, min_pass_rate=0.0, max_pass_rate=1.0) == [r[0] for r in PHASE1]
    assert select_carryover(_stats([("a", 4, 0.5), ("a", 4, 0.5)]), min_pass_rate=0, max_pass_rate=1) == ["a"]


def test_config_band_must_not_be_empty():
    with pytest.raises(ConfigError, match="carryover_min_pass_rate"):
        validate(DomainRLConfig, {"carryover_min_pass_rate": 0.9, "carryover_max_pass_rate": 0.5})
    with pytest.raises(ConfigError, match="unknown key"):
        validate(DomainRLConfig, {"carryover_min_difficulty": 0.2})
    with pytest.raises(ConfigError, match="`group_size` moved to `sampling.group_size`"):   # the engine's old keys
        validate(DomainRLConfig, {"group_size": 4, "carryover_min_samples": 2})


@pytest.fixture()
def world(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    store = ArtifactStore(str(tmp_path / "a"), cache_dir=tmp_path / "cache")
    tok = build_tokenizer("")
    policy = _commit(store, "checkpoint", "ckpt_r1",
                     lambda w: save_checkpoint(build_model(ModelConfig(), tok, seed=0), tok, w.dir))
    genrm = _commit(store, "checkpoint", "genrm_ckpt",
                    lambda w: save_checkpoint(build_model(ModelConfig(), tok, seed=1), tok, w.dir))
    prompts = _commit(store, "prompts", "rl_prompts", lambda w: w.write_table(_prompts()))
    carry = _commit(store, "prompt_stats", "prompt_stats_r1", lambda w: w.write_table(_stats()))
    return store, {"policy": policy, "prompts": prompts, "carryover": carry, "genrm": genrm}


def test_domain_rl_trains_on_domain_plus_exact_carryover(world):
    store, inputs = world
    # 3 domain + 4 carried (m0, m1, m2, m6; m5 has too few samples, ghost is not a prompt) = 7 per step
    cfg = DomainRLConfig(steps=2, sampling={"prompts_per_step": 7, "group_size": 2}, rollout={"max_new_tokens": 12},
                         carryover_min_pass_rate=0.0, carryover_max_pass_rate=0.8, carryover_min_samples=2)
    names = {"checkpoint": "ckpt_final", "prompt_stats": "prompt_stats_domain", "rollouts": "rollouts_domain"}
    res = domain_rl.run(cfg, inputs, store, output_names=names)
    assert res.status == "ran"
    ckpt = store.open(res.outputs["checkpoint"])
    carry = json.loads(ckpt.local_path("carryover.json").read_text())
    assert carry["kept"] == ["m0", "m1", "m2", "m6"] and carry["missing"] == ["ghost"]

    extra = ckpt.manifest.extra
    assert extra["carryover_kept"] == 4 and extra["carryover_missing"] == 1 and extra["carryover_measured"] == 8
    assert extra["domain_prompts"] == 3
    assert extra["genrm"] == inputs["genrm"].uri and extra["genrm_used"] is False
    assert json.loads(ckpt.local_path("compass.json").read_text())["genrm"] == inputs["genrm"].uri

    stats = store.open(res.outputs["prompt_stats"]).read_table()      # schema-validated on read
    assert set(stats.column("prompt_id").to_pylist()) == {"d0", "d1", "d2", "m0", "m1", "m2", "m6"}
    assert set(stats.column("n_samples").to_pylist()) == {2 * cfg.sampling.group_size}
    rollouts = store.open(res.outputs["rollouts"]).read_table()
    assert rollouts.num_rows == 2 * 7 * 2
    assert sum(stats.column("n_samples").to_pylist()) == rollouts.num_rows
    assert len(ckpt.local_path("metrics.jsonl").read_text().splitlines()) == 2
    # the inputs are recorded as lineage, GenRM included
    assert {r.slot for r in ckpt.manifest.inputs} == {"policy", "prompts", "carryover", "genrm"}


def test_domain_rl_with_an_empty_carryover_band_trains_on_domain_only(world):
    store, inputs = world
    cfg = DomainRLConfig(steps=1, sampling={"prompts_per_step": 8, "group_size": 2}, rollout={"max_new_tokens": 8},
                         carryover_min_pass_rate=0.9, carryover_max_pass_rate=0.95)
    res = domain_rl.run(cfg, inputs, store)
    ckpt = store.open(res.outputs["checkpoint"])
    assert ckpt.manifest.extra["carryover_kept"] == 0
    stats = store.open(res.outputs["prompt_stats"]).read_table()
    assert set(stats.column("prompt_id").to_pylist()) == {"d0", "d1", "d2"}


def test_spec_matches_the_dag():
    from compass.dag.pipeline import NODES
    node, spec = NODES["domain_rl"], domain_rl.SPEC
    assert set(spec.inputs) == set(node.inputs) and set(spec.outputs) == set(node.outputs)
    assert spec.inputs == {"policy": "checkpoint", "prompts": "prompts", "carryover": "prompt_stats",
                           "genrm": "checkpoint"}


def test_mix_carryover_at_the_configured_ratio():
    band = [f"c{i}" for i in range(10)]
    assert mix_carryover(band, 6, None, 0) == band
    two = mix_carryover(band, 6, 0.25, 0)                   # 0.25 / 0.75 * 6 = 2 -> 2 of 8 prompts
    assert len(two) == 2 and two == [c for c in band if c in two]         # table order kept
    assert two == mix_carryover(band, 6, 0.25, 0)                          # seeded
    assert len(mix_carryover(band, 6, 0.5, 0)) == 6
    assert mix_carryover(band, 6, 0.9, 0) == band            # the band holds fewer than 54: all of it
    assert mix_carryover(band, 6, 0.0, 0) == []


def test_domain_rl_mixes_the_band_at_the_ratio_and_judges_titles_with_the_genrm(world):
    """3 domain prompts + a title-rewriting prompt; the band holds m0, m1, m2, m6; ratio 1/3 of the mix keeps
    round(0.5 * 4) = 2 of them. The title prompt is judged by the (untrained) GenRM checkpoint."""
    store, inputs = world
    rows = _prompts().to_pylist()
    title = json.dumps({"type": "title_rules", "must_keep": ["Nike"], "max_chars": 60})
    rows.append({"id": "t0", "domain": "ecommerce", "task": "title", "language": "en",
                 "prompt": "Rewrite: nike RUNNING shoe", "reference": "Nike Running Shoe", "verifier": title,
                 "difficulty": None, "pass_rate": None})
    inputs = {**inputs, "prompts": _commit(store, "prompts", "rl_prompts_t", lambda w: w.write_table(
        pa.Table.from_pylist(rows, schema=_prompts().schema)))}
    cfg = DomainRLConfig(steps=1, sampling={"prompts_per_step": 6, "group_size": 2}, rollout={"max_new_tokens": 6},
                         carryover_max_pass_rate=0.8, carryover_min_samples=2, carryover_ratio=1 / 3,
                         genrm_max_new_tokens=8)
    res = domain_rl.run(cfg, inputs, store)
    ckpt = store.open(res.outputs["checkpoint"])
    carry = json.loads(ckpt.local_path("carryover.json").read_text())
    assert carry["in_band"] == 4 and len(carry["kept"]) == 2 and set(carry["kept"]) <= {"m0", "m1", "m2", "m6"}
    extra = ckpt.manifest.extra
    assert extra["carryover_share"] == pytest.approx(2 / 6) and extra["genrm_used"] is True
    stats = store.open(res.outputs["prompt_stats"]).read_table()
    assert set(stats.column("prompt_id").to_pylist()) == {"d0", "d1", "d2", "t0", *carry["kept"]}
    rollouts = store.open(res.outputs["rollouts"]).read_table().to_pylist()
    judged = [r for r in rollouts if r["prompt_id"] == "t0"]
    assert extra["genrm_judged_samples"] == len(judged) == 2
    # an untrained judge: its verdicts are what they are, but each is counted once, malformed or not
    assert 0 <= extra["genrm_malformed"] <= 2
    assert all(r["reward_reason"] in (None, "genrm_worse", "genrm_malformed") for r in judged)
    assert sum(r["reward_reason"] == "genrm_malformed" for r in judged) == extra["genrm_malformed"]
