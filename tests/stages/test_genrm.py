"""GenRM stage: supervised verdict training on a tiny model; bad labels are skipped and counted."""
from __future__ import annotations

import random

import pyarrow as pa
import pytest

from stages.common.model_factory import (
    ModelConfig,
    build_model,
    build_tokenizer,
    save_checkpoint,
)
from stages.common.runner import StageInputError
from stages.common.store import ArtifactStore
from stages.genrm import stage as genrm
from stages.genrm.config import GenRMConfig
from stages.genrm.verdict import (
    judge_prompt,
    normalize_label,
    parse_verdict,
    verdict_text,
)
from tests.stages.helpers import commit_artifact

_commit = commit_artifact


def _pairs(n: int, seed: int = 0, bad_labels=()) -> pa.Table:
    """Arithmetic answers judged by correctness: the right one wins, two right ones tie."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        right, wrong = f"<think>{a}+{b}={a + b}</think>{a + b}", f"<think>{a}+{b}={a + b + 1}</think>{a + b + 1}"
        kind = i % 3
        ra, rb, label = [(right, wrong, "A"), (wrong, right, "B"), (right, right, "TIE")][kind]
        rows.append({"id": f"p{i}", "prompt": f"{a}+{b}=?", "response_a": ra, "response_b": rb, "label": label})
    for j, lab in enumerate(bad_labels):
        rows.append({"id": f"bad{j}", "prompt": "1+1=?", "response_a": "2", "response_b": "3", "label": lab})
    rows.append({"id": "long", "prompt": "1+1=?", "response_a": "2" * 600, "response_b": "3", "label": "B"})
    return pa.Table.from_pylist(rows)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    store = ArtifactStore(str(tmp_path_factory.mktemp("genrm") / "a"))
    tok = build_tokenizer("")
    base = _commit(store, "checkpoint", "base_ckpt",
                   lambda w: save_checkpoint(build_model(ModelConfig(), tok, seed=0), tok, w.dir))
    pairs = _commit(store, "preference_pairs", "preference_pairs",
                    lambda w: w.write_table(_pairs(60, bad_labels=["C", "", "a tie", "B?"])))
    return store, {"base": base, "pairs": pairs}


def test_verdict_format():
    assert parse_verdict("<think>x</think>" + verdict_text("TIE")) == "TIE"
    assert parse_verdict("<answer>A</answer> no, <answer> B </answer>") == "B"
    assert parse_verdict("<answer>C</answer>") is None and parse_verdict("A") is None
    assert [normalize_label(x) for x in ("A", " tie ", "b", "C", "", None)] == ["A", "TIE", "B", None, None, None]
    p = judge_prompt("q?", "ra", "rb")
    assert p.index("q?") < p.index("ra") < p.index("rb")


def test_genrm_trains_verdicts_and_counts_bad_rows(world, monkeypatch):
    from transformers import AutoModelForCausalLM
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    store, inputs = world
    cfg = GenRMConfig()
    res = genrm.run(cfg, inputs, store, output_names={"checkpoint": "genrm_ckpt"})
    assert res.status == "ran"
    art = store.open(res.outputs["checkpoint"])
    ex = art.manifest.extra
    assert ex["rows"] == 65
    assert ex["skipped_bad_label"] == 4 and sum(ex["bad_label_values"].values()) == 4
    assert "'C'" in ex["bad_label_values"]
    assert ex["skipped_too_long"] == 1
    assert ex["rows_used"] == 60 and ex["label_counts"] == {"A": 20, "B": 20, "TIE": 20}
    assert ex["rows"] == ex["rows_used"] + ex["skipped_bad_label"] + ex["skipped_too_long"]
    assert ex["train_examples"] == 120  # each pair also swapped
    assert ex["loss_last5_mean"] < 0.5 * ex["loss_first5_mean"]
    # An untrained model never writes the verdict format; the trained judge always does.
    assert ex["verdict_format_rate_before"] == 0.0
    assert ex["verdict_format_rate"] >= 0.9
    assert 0.0 <= ex["verdict_accuracy"] <= 1.0 and ex["eval_pairs"] == 60
    assert sum(ex["verdict_counts"].values()) == 60
    AutoModelForCausalLM.from_pretrained(str(art.local_dir()))  # a plain HF checkpoint
    assert genrm.run(cfg, inputs, store, output_names={"checkpoint": "genrm_ckpt"}).status == "reused"


def test_genrm_with_only_bad_labels_is_an_input_error(world):
    store, inputs = world
    only_bad = _commit(store, "preference_pairs", "bad_pairs", lambda w: w.write_table(pa.Table.from_pylist(
        [{"id": "x", "prompt": "q", "response_a": "a", "response_b": "b", "label": "maybe"}])))
    with pytest.raises(StageInputError, match="1 with a bad label"):
        genrm.run(GenRMConfig(steps=1), {**inputs, "pairs": only_bad}, store)
