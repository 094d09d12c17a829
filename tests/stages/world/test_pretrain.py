"""The world's pretrained base: documents from a share of the training items, trained as plain text."""
from __future__ import annotations

import pytest
import torch

from compass.lm.chat import encode_document
from compass.lm.model_factory import load_checkpoint
from compass.store.store import ArtifactStore
from stages.world import stage as world
from stages.world.build import build_world
from tests.helpers import small_world_config

PRETRAIN = {"fraction": 0.4, "steps": 0}


def test_documents_are_the_first_share_of_each_suites_training_items_and_never_an_eval_item():
    plain, pre = build_world(small_world_config()), build_world(small_world_config(pretrain=PRETRAIN))
    cfg = small_world_config()
    assert pre.documents_by_suite == {name: round(s.n * 0.4) for name, s in cfg.suites.items()}
    assert len(pre.documents) == sum(pre.documents_by_suite.values())
    # the documents' items left the SFT / RL split: both tables shrink, the rest of the split is as before
    planted = sum(len(v) for v in plain.planted["raw_sft"].values())
    assert pre.raw_sft.num_rows == sum(round((s.n - round(s.n * 0.4)) * cfg.sft_fraction)
                                       for s in cfg.suites.values()) + planted
    assert pre.eval_prompts.equals(plain.eval_prompts)
    evals = pre.eval_prompts.column("prompt").to_pylist()
    assert not any(doc.split("\n")[0] in evals for doc in pre.documents)
    trained = set(pre.raw_sft.column("prompt").to_pylist()) | set(pre.raw_prompts.column("prompt").to_pylist())
    assert not any(doc.startswith(p + "\n") for doc in pre.documents[:20] for p in trained)
    assert plain.documents == [] and plain.documents_by_suite == {}


def test_a_document_is_question_solution_answer_without_the_chat_markup():
    w = build_world(small_world_config(pretrain=PRETRAIN))
    arith = [d for d in w.documents if d.startswith("What is")]
    assert arith
    for doc in arith + [d for d in w.documents if not d.startswith("What is")]:
        assert "<think>" not in doc and "</think>" not in doc and "<|im_start|>" not in doc
    question, trace, answer = arith[0].split("\n")
    assert trace.endswith(f"= {answer}.")         # the worked solution ends at the answer, which follows it


def test_encode_document_trains_on_every_token_and_refuses_what_does_not_fit(world_arts):
    _, tok = load_checkpoint(world_arts["base"].local_dir())
    ids, labels = encode_document(tok, "What is 2 + 2?\n2 + 2 = 4.\n4", 64)
    assert labels == ids and ids[-1] == tok.eos_token_id
    assert tok.decode(ids[:-1]) == "What is 2 + 2?\n2 + 2 = 4.\n4"
    assert encode_document(tok, "1 2 3 4 5 6 7 8 9 " * 20, 16) is None


def _doc_loss(model, tok, docs: list[str]) -> float:
    losses = []
    with torch.no_grad():
        for d in docs:
            ids, _ = encode_document(tok, d, 512)
            x = torch.tensor([ids])
            losses.append(model(input_ids=x, labels=x).loss.item())
    return sum(losses) / len(losses)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    cfg = small_world_config(pretrain={"fraction": 0.4, "steps": 30, "batch_size": 8, "lr": 3e-3, "warmup_steps": 2,
                                       "checkpoint_every": 0})
    store = ArtifactStore(str(tmp_path_factory.mktemp("pretrain")))
    res = world.run(cfg, {}, store)
    return cfg, store.open(res.outputs["base"])


def test_pretraining_fits_the_documents_better_than_the_random_init(pretrained, world_arts):
    cfg, base = pretrained
    extra = base.manifest.extra
    assert extra["pretrain_steps"] == 30 and extra["pretrain_documents"] == sum(build_world(cfg).documents_by_suite.values())
    assert extra["pretrain_loss_last5_mean"] < extra["pretrain_loss_first5_mean"] - 1.0
    model, tok = load_checkpoint(base.local_dir())
    init = world.build_model(cfg.model, tok, cfg.seed)      # the same tokenizer, the untrained init
    docs = build_world(cfg).documents[::7][:12]
    assert _doc_loss(model, tok, docs) < _doc_loss(init, tok, docs) - 1.0
    assert "pretrain_steps" not in world_arts["base"].manifest.extra      # the default world: the random init


def test_no_step_leaves_the_random_init(tmp_path):
    cfg = small_world_config(pretrain={"fraction": 0.4, "steps": 0})
    base = ArtifactStore(str(tmp_path)).open(world.run(cfg, {}, ArtifactStore(str(tmp_path))).outputs["base"])
    model, tok = load_checkpoint(base.local_dir())
    init = world.build_model(cfg.model, tok, cfg.seed)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), init.state_dict().values()))
    assert "pretrain_steps" not in base.manifest.extra


def test_a_killed_pretraining_goes_on_from_its_saved_state(tmp_path, monkeypatch):
    """The world stage saves the pretraining's trainer state every ``checkpoint_every`` steps; a run that dies
    mid-way (injected here after step 4) is re-run from step 4, and ends with the weights of an uninterrupted run."""
    monkeypatch.setenv("COMPASS_STATE_DIR", str(tmp_path / "state"))
    cfg = small_world_config(pretrain={"fraction": 0.4, "steps": 6, "batch_size": 4, "checkpoint_every": 2})
    real = world.train_sft

    def dies_after_four(*a, **kw):
        def on_step(n):
            if n == 4:
                raise RuntimeError("killed")
        return real(*a, **kw, on_step=on_step)

    monkeypatch.setattr(world, "train_sft", dies_after_four)
    killed = ArtifactStore(str(tmp_path / "killed"))
    with pytest.raises(RuntimeError, match="killed"):
        world.run(cfg, {}, killed)
    assert list((tmp_path / "state").rglob("sft_state.pt"))
    monkeypatch.setattr(world, "train_sft", real)
    resumed = killed.open(world.run(cfg, {}, killed).outputs["base"])
    assert resumed.manifest.extra["pretrain_resumed_from_step"] == 4
    assert not list((tmp_path / "state").rglob("*.pt"))                     # cleared once the base is committed
    whole = ArtifactStore(str(tmp_path / "whole"))
    fresh = whole.open(world.run(cfg, {}, whole).outputs["base"])
    assert fresh.manifest.extra["pretrain_resumed_from_step"] is None
    a, _ = load_checkpoint(resumed.local_dir())
    b, _ = load_checkpoint(fresh.local_dir())
    assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
