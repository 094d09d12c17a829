"""SFT stage: real optimizer steps on a tiny model, a loadable HF checkpoint, reuse on re-run,
held-out loss, and held-out suites scored by the gym's verifiers."""
from __future__ import annotations

import os
import random
from pathlib import Path

import pyarrow as pa
import pytest
import torch

from compass.lm.model_factory import (
    ModelConfig,
    build_model,
    build_tokenizer,
)
from compass.runtime.runner import StageInputError
from compass.store.store import ArtifactStore
from stages.sft import stage as sft
from stages.sft.config import SFTConfig
from tests.helpers import MATH_VERIFIER, commit_checkpoint, commit_table

_commit_checkpoint = commit_checkpoint


def _arith_samples(n: int, seed: int = 0, n_too_long: int = 0) -> pa.Table:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b, c = rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 9)
        s = a + b
        rows.append({"id": f"m{i}", "domain": "math", "task": "arith", "language": "en",
                     "prompt": f"{a}+{b}+{c}=?", "response": f"<think>{a}+{b}={s}. {s}+{c}={s + c}.</think>{s + c}"})
    for i in range(n_too_long):
        rows.append({"id": f"long{i}", "domain": "math", "task": "arith", "language": "en",
                     "prompt": "1+1=?", "response": "<think>" + "1+1=2. " * 200 + "</think>2"})
    return pa.Table.from_pylist(rows)


@pytest.fixture(autouse=True)
def _state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPASS_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture()
def world(tmp_path):
    store = ArtifactStore(str(tmp_path / "a"))
    tok = build_tokenizer("")
    base = _commit_checkpoint(store, "base_ckpt", build_model(ModelConfig(), tok, seed=0), tok)
    data = commit_table(store, "sft_samples", "sft_longcot", _arith_samples(96, n_too_long=3))
    return store, tok, {"base": base, "data": data}


def test_sft_default_config_trains_saves_and_is_reused(world, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    store, base_tok, inputs = world
    cfg = SFTConfig()
    res = sft.run(cfg, inputs, store, output_names={"checkpoint": "thinking_ckpt"})
    assert res.status == "ran"
    art = store.open(res.outputs["checkpoint"])
    assert art.kind == "checkpoint" and art.name == "thinking_ckpt"
    ex = art.manifest.extra
    assert ex["steps"] == cfg.steps
    assert ex["skipped_too_long"] == 3 and ex["samples_used"] == 96 and ex["samples"] == 99
    assert ex["tokens"] > ex["supervised_tokens"] > 0
    # Real learning: the loss falls well below its starting value (random init ~ log(vocab) ≈ 4.7).
    assert ex["loss_last5_mean"] < 0.75 * ex["loss_first5_mean"], ex
    # ... on rows it never trained on too: a hash of the id holds out 5% (at least 4 rows)
    assert ex["heldout_samples"] >= 4 and ex["train_samples"] + ex["heldout_samples"] == 96
    assert ex["heldout_loss_last"] < 0.75 * ex["heldout_loss_first"], ex
    assert [h["step"] for h in ex["heldout_curve"]] == [0, cfg.steps]
    assert ex["mode"] == "packed" and 0.8 < ex["packing_efficiency"] <= 1.0 and ex["resumed_from_step"] is None
    assert ex["lr_last"] < 0.2 * ex["lr_peak"]                                  # warmup, then cosine down
    summary = (art.local_dir() / "summary.md").read_text()
    assert f"| steps | {cfg.steps} |" in summary and "held-out loss" in summary
    assert not list(Path(os.environ["COMPASS_STATE_DIR"]).rglob("*.pt"))       # trainer state saved, then cleared

    # The checkpoint is a plain HF folder: transformers loads it without our helpers.
    d = art.local_dir()
    model = AutoModelForCausalLM.from_pretrained(str(d))
    tok = AutoTokenizer.from_pretrained(str(d))
    assert tok.get_vocab() == base_tok.get_vocab()
    text = "<|user|>7+8=?<|end|><|assistant|><think>7+8=15.</think>15<|end|>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert tok.convert_ids_to_tokens(ids[:1]) == ["<|user|>"]
    base_model = AutoModelForCausalLM.from_pretrained(str(inputs["base"].local_dir()))
    trained, base_sd = model.state_dict(), base_model.state_dict()
    assert trained.keys() == base_sd.keys()
    assert any(not torch.equal(trained[k], base_sd[k]) for k in trained)
    assert all(torch.isfinite(v).all() for v in trained.values())

    again = sft.run(cfg, inputs, store, output_names={"checkpoint": "thinking_ckpt"})
    assert again.status == "reused" and again.version == res.version
    assert again.outputs == res.outputs


def test_sft_is_seeded(world, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    store, _, inputs = world
    other = ArtifactStore(str(tmp_path / "second-run"))  # a real second run, not a reuse
    cfg = SFTConfig(steps=3, batch_size=4)
    a = store.open(sft.run(cfg, inputs, store).outputs["checkpoint"]).manifest.extra
    rerun = sft.run(cfg, inputs, other)
    assert rerun.status == "ran"
    b = other.open(rerun.outputs["checkpoint"]).manifest.extra
    assert a["loss_first"] == b["loss_first"] and a["loss_last"] == b["loss_last"]
    c = store.open(sft.run(cfg.model_copy(update={"seed": 1}), inputs, store).outputs["checkpoint"]).manifest.extra
    assert c["loss_first"] != a["loss_first"]


def test_sft_refuses_when_no_pair_fits(world):
    store, _, inputs = world
    with pytest.raises(StageInputError, match="max_len=8"):
        sft.run(SFTConfig(max_len=8, steps=1), inputs, store)
    assert store.list("checkpoint", "checkpoint") == []


def _constant_answer(n: int, domain: str, answer: str) -> list[dict]:
    return [{"id": f"{domain}{i}", "domain": domain, "task": "t", "language": "en", "prompt": f"{i}*0+{answer}=?",
             "response": f"<think>{i}*0=0.</think>{answer}"} for i in range(n)]


def test_sft_scores_held_out_suites_with_the_gym(tmp_path, monkeypatch):
    """With an ``eval`` input the trained model answers held-out prompts greedily and the gym's
    verifier scores them: on a task it can learn in a few steps, accuracy goes from 0 (base) to 1."""
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    store = ArtifactStore(str(tmp_path / "a"))
    tok = build_tokenizer("")
    base = _commit_checkpoint(store, "base_ckpt", build_model(ModelConfig(), tok, seed=0), tok)
    data = commit_table(store, "sft_samples", "sft_longcot", pa.Table.from_pylist(_constant_answer(64, "math", "7")))
    prompts = [{"id": f"e{d}{i}", "domain": d, "task": "t", "language": "en", "prompt": f"{100 + i}*0+7=?",
                "reference": "7", "verifier": MATH_VERIFIER, "difficulty": 1, "pass_rate": None}
               for d in ("math", "ecommerce") for i in range(6)]
    evals = commit_table(store, "prompts", "eval_prompts", pa.Table.from_pylist(prompts))
    cfg = SFTConfig(steps=40, batch_size=8, lr=3e-3, eval_domains=["math"], eval_max_prompts_per_suite=4,
                    eval_max_new_tokens=16, eval_base=True)
    res = sft.run(cfg, {"base": base, "data": data, "eval": evals}, store)
    art = store.open(res.outputs["checkpoint"])
    ex = art.manifest.extra
    assert {r.slot for r in art.manifest.inputs} == {"base", "data", "eval"}
    assert ex["eval_prompts"] == {"math": 4}                                     # only the domains asked, capped
    assert ex["eval_base_accuracy"] == {"math": 0.0} and ex["eval_accuracy"] == {"math": 1.0}, ex
    summary = (art.local_dir() / "summary.md").read_text()
    assert "| math | 4 | 1.000 |" in summary and "base accuracy" in summary
    # the eval slot is optional, and part of the run's identity
    without = sft.run(cfg, {"base": base, "data": data}, store)
    assert without.version != res.version
    assert "eval_accuracy" not in store.open(without.outputs["checkpoint"]).manifest.extra


def test_replay_trains_on_a_share_of_the_other_parents_rows_and_keeps_their_skill(tmp_path, monkeypatch):
    """``replay_fraction`` with a ``replay`` input: a seeded draw of the other table's rows (that share of the data
    rows, capped at the table) joins the training rows, never the held-out ones; the skill it teaches is kept."""
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    store = ArtifactStore(str(tmp_path / "a"))
    tok = build_tokenizer("")
    base = _commit_checkpoint(store, "base_ckpt", build_model(ModelConfig(), tok, seed=0), tok)
    data = commit_table(store, "sft_samples", "sft_longcot", pa.Table.from_pylist(_constant_answer(64, "math", "7")))
    other = commit_table(store, "sft_samples", "sft_domain", pa.Table.from_pylist(_constant_answer(48, "ecommerce", "3")))
    prompts = [{"id": f"e{d}{i}", "domain": d, "task": "t", "language": "en", "prompt": f"{100 + i}*0+{a}=?",
                "reference": a, "verifier": MATH_VERIFIER, "difficulty": 1, "pass_rate": None}
               for d, a in (("math", "7"), ("ecommerce", "3")) for i in range(4)]
    evals = commit_table(store, "prompts", "eval_prompts", pa.Table.from_pylist(prompts))
    cfg = SFTConfig(steps=80, batch_size=8, lr=3e-3, eval_max_new_tokens=16, replay_fraction=0.5)
    inputs = {"base": base, "data": data, "eval": evals, "replay": other}
    ex = store.open(sft.run(cfg, inputs, store).outputs["checkpoint"]).manifest.extra
    assert ex["replay_rows"] == 32 and ex["samples"] == 64
    assert ex["train_samples"] == 32 + 64 - ex["heldout_samples"]               # replay rows are never held out
    assert ex["eval_accuracy"] == {"ecommerce": 1.0, "math": 1.0}, ex
    alone = store.open(sft.run(cfg.model_copy(update={"replay_fraction": 0.0}), inputs, store)
                       .outputs["checkpoint"]).manifest.extra
    assert alone["replay_rows"] == 0 and alone["eval_accuracy"] == {"ecommerce": 0.0, "math": 1.0}, alone
    capped = store.open(sft.run(cfg.model_copy(update={"replay_fraction": 1.0, "steps": 1}), inputs, store)
                        .outputs["checkpoint"]).manifest.extra
    assert capped["replay_rows"] == 48                                          # all of the other table, no more
