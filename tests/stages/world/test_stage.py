"""World stage: schemas, determinism, teacher correctness, planted rows, held-out eval, base checkpoint."""
from __future__ import annotations

import re

import pytest

from artifacts_schema.tables import conform
from compass.store.store import ArtifactStore
from stages.evaluation.config import EvalConfig
from compass.gym.score import score
from stages.world import stage as world
from stages.world.build import build_world
from stages.world.suites.arithmetic import LEVELS
from tests.helpers import small_world_config

KINDS = {"raw_sft": "sft_samples", "raw_prompts": "prompts", "preferences": "preference_pairs",
         "eval_prompts": "prompts", "base": "checkpoint"}


def test_outputs_have_declared_kinds_and_schemas(world_arts, world_config):
    assert {s: a.kind for s, a in world_arts.items()} == KINDS
    for slot, art in world_arts.items():
        if art.kind == "checkpoint":
            continue
        t = art.read_table()
        conform(t, art.kind, slot)
        assert art.manifest.rows == t.num_rows > 0
    evals = world_arts["eval_prompts"].read_table()
    assert evals.num_rows == sum(s.n_eval for s in world_config.suites.values())
    assert sorted(set(evals.column("domain").to_pylist())) == ["ecommerce", "math"]
    assert world_arts["preferences"].read_table().num_rows == world_config.n_preference_pairs
    planted = world_arts["raw_sft"].manifest.extra["planted"]
    n_planted = sum(len(v) for v in planted.values())
    k = sum(round(s.n * world_config.sft_fraction) for s in world_config.suites.values())
    assert world_arts["raw_sft"].manifest.rows == k + n_planted


def test_same_config_gives_byte_identical_artifacts(tmp_path, world_config, world_arts):
    other = world.run(world_config, {}, ArtifactStore(str(tmp_path / "b")))
    assert other.status == "ran"
    for slot, uri in other.outputs.items():
        mine = {f.path: f.sha256 for f in world_arts[slot].manifest.files}
        theirs = {f.path: f.sha256 for f in ArtifactStore(str(tmp_path / "b")).open(uri).manifest.files}
        assert mine == theirs, f"{slot} differs between two runs of the same config"


def test_seed_changes_the_data():
    a, b = build_world(small_world_config()), build_world(small_world_config(seed=1))
    assert a.raw_sft.column("prompt").to_pylist() != b.raw_sft.column("prompt").to_pylist()
    assert a.eval_prompts.column("prompt").to_pylist() != b.eval_prompts.column("prompt").to_pylist()


def test_eval_set_does_not_depend_on_training_sizes():
    a = build_world(small_world_config())
    b = build_world(small_world_config(suites={"arithmetic": {"n": 40, "n_eval": 10}, "ecommerce_category": {"n": 10, "n_eval": 10}},
                                       n_preference_pairs=5))
    assert a.eval_prompts.equals(b.eval_prompts)


def test_teacher_responses_verify_and_follow_the_roles(world_arts):
    t = world_arts["raw_sft"].read_table()
    planted = {i for idx in world_arts["raw_sft"].manifest.extra["planted"].values() for i in idx}
    n_math = n_dom = 0
    for i, r in enumerate(t.to_pylist()):
        if i in planted:
            continue
        assert score(r["verifier"], r["response"], r["reference"]) == 1.0, r
        if r["domain"] == "math":
            n_math += 1
            assert re.fullmatch(r"<think>(-?\d+ [+*-] -?\d+ = -?\d+\. ?)+</think>-?\d+", r["response"]), r
        else:
            n_dom += 1
            assert r["domain"] == "ecommerce" and r["task"] == "mcq_category"
            assert re.fullmatch(r"[ABCD]", r["response"]) and "<think>" not in r["response"]
    assert n_math > 0 and n_dom > 0
    assert set(t.column("language").to_pylist()) == {"en", "id"}


def test_difficulty_sets_the_number_of_operations(world_arts):
    rows = world_arts["raw_prompts"].read_table().to_pylist()
    seen = set()
    for r in rows:
        if r["domain"] != "math" or not r["reference"]:
            continue
        d = r["difficulty"]
        assert d in LEVELS
        n_ops, lo, hi = LEVELS[d]
        expr = r["prompt"].removeprefix("What is ").removesuffix("?")
        if r["prompt"].startswith("What is "):
            assert len(re.findall(r" [+*-] ", expr)) == n_ops, r
            seen.add(d)
        assert r["pass_rate"] is None
    assert seen == set(LEVELS)
    assert {r["difficulty"] for r in rows if r["domain"] == "ecommerce"} <= {1, 2, 3, 4, 5}


def test_eval_prompts_are_held_out_except_planted_leaks(world_arts):
    eval_prompts = set(world_arts["eval_prompts"].read_table().column("prompt").to_pylist())
    for slot in ("raw_sft", "raw_prompts"):
        art = world_arts[slot]
        leaks = set(art.manifest.extra["planted"].get("contaminated", []))
        assert leaks, f"{slot}: no planted eval leak"
        for i, p in enumerate(art.read_table().column("prompt").to_pylist()):
            if i not in leaks:
                assert p not in eval_prompts and not any(e in p for e in eval_prompts), (slot, i, p)
    pref = set(world_arts["preferences"].read_table().column("prompt").to_pylist())
    assert not pref & eval_prompts


def test_preference_labels_match_the_verifier(world_arts):
    rows = world_arts["preferences"].read_table().to_pylist()
    labels = {"A": 0, "B": 0, "TIE": 0}
    for r in rows:
        sa = score(r["verifier"], r["response_a"], r["reference"])
        sb = score(r["verifier"], r["response_b"], r["reference"])
        expected = "TIE" if sa == sb else ("A" if sa > sb else "B")
        assert r["label"] == expected, r
        if r["label"] == "TIE":
            assert sa == sb == 1.0 and r["response_a"] != r["response_b"]
        labels[r["label"]] += 1
    assert all(labels.values()), labels


def test_teacher_traces_fit_the_default_eval_budget(world_arts):
    """A correct answer must be reachable within evaluation's default max_new_tokens (eos included)."""
    from compass.lm.model_factory import load_checkpoint
    _, tok = load_checkpoint(world_arts["base"].local_dir())
    longest = max(len(tok(r, add_special_tokens=False)["input_ids"])
                  for r in world_arts["raw_sft"].read_table().column("response").to_pylist())
    assert longest + 1 <= EvalConfig().max_new_tokens


def test_base_checkpoint_loads_and_tokenizes_the_corpus(world_arts, world_config):
    from compass.lm.model_factory import load_checkpoint
    model, tok = load_checkpoint(world_arts["base"].local_dir())
    assert sum(p.numel() for p in model.parameters()) == world_arts["base"].manifest.extra["params"]
    assert model.config.hidden_size == world_config.model.hidden_size
    sample = world_arts["raw_sft"].read_table().to_pylist()[0]
    for text in (sample["prompt"], sample["response"]):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == text
    assert tok.convert_tokens_to_ids("<think>") != tok.unk_token_id


def test_second_run_reuses(world_store, world_config, world_result):
    again = world.run(world_config, {}, world_store)
    assert again.status == "reused" and again.outputs == world_result.outputs


def test_world_avoids_leaks_at_the_filters_default_ngram():
    from stages.data_filter.config import DataFilterConfig
    from stages.world.build import LEAK_NGRAM
    assert LEAK_NGRAM == DataFilterConfig().decontam_ngram


def test_clean_world_plants_nothing():
    w = build_world(small_world_config(n_planted=0))
    assert w.planted == {"raw_sft": {}, "raw_prompts": {}}


def test_bad_language_is_a_config_error():
    with pytest.raises(ValueError):
        small_world_config(languages=["xx"])
