"""GenRM stage: quarantine, held-out split, warm start + GRPO, Bradley–Terry baseline, judgements, summary."""
from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer, save_checkpoint
from compass.runtime.runner import StageInputError
from compass.store.store import ArtifactStore
from stages.genrm import stage as genrm
from stages.genrm.config import BradleyTerryConfig, GenRMConfig
from stages.genrm.rationale import rationale
from compass.rl.config import RLConfig
from tests.helpers import commit_artifact

BAD_LABELS = ["C", "", "a tie", "B?"]


def _pairs(n: int, seed: int = 0, bad_labels=()) -> pa.Table:
    """Arithmetic answers judged by correctness: the right one wins, two right ones tie."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        right, wrong = f"<think>{a}+{b}={a + b}</think>{a + b}", f"<think>{a}+{b}={a + b + 1}</think>{a + b + 1}"
        alt = f"The sum is {a + b}"
        ra, rb, label = [(right, wrong, "A"), (wrong, right, "B"), (right, alt, "TIE")][i % 3]
        rows.append({"id": f"p{i}", "prompt": f"{a}+{b}=?", "response_a": ra, "response_b": rb, "label": label,
                     "domain": "math", "task": "arithmetic", "reference": str(a + b)})
    for j, lab in enumerate(bad_labels):
        rows.append({"id": f"bad{j}", "prompt": "1+1=?", "response_a": "2", "response_b": "3", "label": lab,
                     "domain": "math", "task": "arithmetic", "reference": "2"})
    rows.append({"id": "empty", "prompt": "1+1=?", "response_a": " ", "response_b": "3", "label": "B",
                 "domain": "math", "task": "arithmetic", "reference": "2"})
    rows.append({"id": "long", "prompt": "1+1=?", "response_a": "2" * 600, "response_b": "3", "label": "B",
                 "domain": "math", "task": "arithmetic", "reference": "2"})
    return pa.Table.from_pylist(rows)


def tiny_config(**over) -> GenRMConfig:
    base = dict(steps=40, batch_size=8, lr=3e-3, holdout_fraction=0.25, eval_pairs=12, max_new_tokens=48,
                grpo=RLConfig(steps=3, checkpoint_every=1, sampling={"prompts_per_step": 4, "group_size": 2},
                              rollout={"max_new_tokens": 48}, trainer={"lr": 1e-4}),
                bt=BradleyTerryConfig(steps=10, batch_size=8), log_every=100)
    return GenRMConfig(**{**base, **over})


def _corpus(table: pa.Table) -> list[str]:
    rows = table.to_pylist()
    return [v for r in rows for v in r.values() if isinstance(v, str)] + \
        [rationale(r, "TIE") for r in rows] * 2


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    store = ArtifactStore(str(tmp_path_factory.mktemp("genrm") / "a"))
    table = _pairs(48, bad_labels=BAD_LABELS)
    tok = build_tokenizer(_corpus(table))
    base = commit_artifact(store, "checkpoint", "base_ckpt",
                           lambda w: save_checkpoint(build_model(ModelConfig(), tok, seed=0), tok, w.dir))
    pairs = commit_artifact(store, "preference_pairs", "preference_pairs", lambda w: w.write_table(table))
    return store, {"base": base, "pairs": pairs}


@pytest.fixture(scope="module")
def ran(world, tmp_path_factory):
    import os
    os.environ["COMPASS_PROGRESS"] = "0"
    os.environ["COMPASS_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
    store, inputs = world
    return genrm.run(tiny_config(), inputs, store, output_names={"checkpoint": "genrm_ckpt"})


def test_bad_labels_and_empty_responses_are_quarantined_with_reasons(world, ran):
    store, _ = world
    q = store.open(ran.outputs["quarantine"]).read_table().to_pylist()
    by_id = {json.loads(r["row_json"])["id"]: r for r in q}
    assert set(by_id) == {"bad0", "bad1", "bad2", "bad3", "empty"}
    for j, lab in enumerate(BAD_LABELS):
        r = by_id[f"bad{j}"]
        assert r["field"] == "label" and repr(lab) in r["reason"] and r["row_index"] == 48 + j
    assert by_id["empty"]["field"] == "response_a" and "empty" in by_id["empty"]["reason"]
    assert all(r["source"] == world[1]["pairs"].uri for r in q)


def test_stage_trains_judges_held_out_pairs_and_writes_judgements(world, ran):
    from transformers import AutoModelForCausalLM
    store, inputs = world
    assert ran.status == "ran"
    art = store.open(ran.outputs["checkpoint"])
    ex = art.manifest.extra
    assert ex["rows"] == 54 and ex["quarantined"] == 5 and ex["skipped_too_long"] == 1
    assert ex["train_pairs"] + ex["holdout_pairs"] == 48 and ex["holdout_pairs"] >= 6
    assert ex["warm_start_loss_last5_mean"] < 0.5 * ex["warm_start_loss_first5_mean"]
    assert ex["grpo_steps"] == 3 and len(ex["grpo_reward_curve"]) == 3
    assert ex["genrm_format_rate"] >= 0.5          # the warm start taught the structure
    for k in ("genrm_accuracy", "genrm_tie_accuracy", "bt_accuracy", "bt_tie_accuracy"):
        assert 0.0 <= ex[k] <= 1.0, k
    j = store.open(ran.outputs["judgements"]).read_table().to_pylist()
    n = ex["eval_pairs"]
    assert [r["judge"] for r in j].count("genrm") == n and [r["judge"] for r in j].count("bradley_terry") == n
    assert all(r["consistent"] for r in j if r["judge"] == "bradley_terry")
    assert sum(r["correct"] for r in j if r["judge"] == "genrm") == round(ex["genrm_accuracy"] * n)
    held_ids = {r["pair_id"] for r in j}
    # never trained on: the GRPO prompts (rollouts in metrics) and the split are disjoint
    from stages.genrm.pairs import is_held_out
    assert all(is_held_out(i, 0.25) for i in held_ids)
    summary = (art.local_dir() / "summary.md").read_text()
    assert "| GenRM |" in summary and "| Bradley–Terry |" in summary and "Advantage flipping" in summary
    assert ex["bt_flips"] is not None and ex["flips_avoided"] is not None
    AutoModelForCausalLM.from_pretrained(str(art.local_dir()))  # a plain HF checkpoint
    assert genrm.run(tiny_config(), inputs, store, output_names={"checkpoint": "genrm_ckpt"}).status == "reused"


def test_genrm_with_only_bad_labels_is_an_input_error(world):
    store, inputs = world
    only_bad = commit_artifact(store, "preference_pairs", "bad_pairs", lambda w: w.write_table(pa.Table.from_pylist(
        [{"id": "x", "prompt": "q", "response_a": "a", "response_b": "b", "label": "maybe"}])))
    with pytest.raises(StageInputError, match=r"bad_pairs.*1 row\(s\), 1 quarantined"):
        genrm.run(tiny_config(steps=1), {**inputs, "pairs": only_bad}, store)
