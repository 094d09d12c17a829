"""Merge stage: a real mergekit merge on tiny Qwen3-MoE checkpoints, loadable by transformers."""
from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from compass.lm.model_factory import (
    ModelConfig,
    build_model,
    build_tokenizer,
    load_checkpoint,
)
from compass.store.store import ArtifactStore
from stages.merge import stage as merge
from stages.merge.config import MergeConfig
from tests.helpers import commit_checkpoint

_commit_checkpoint = commit_checkpoint


def _finetuned(base, seed: int, scale: float = 0.02):
    """A copy of ``base`` moved by a random task vector (stands in for an SFT run)."""
    model = build_model(ModelConfig(), _TOK, seed=0)
    model.load_state_dict(base.state_dict())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return model


_TOK = build_tokenizer("")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    store = ArtifactStore(str(tmp_path_factory.mktemp("merge") / "a"))
    base = build_model(ModelConfig(), _TOK, seed=0)
    arts = {"base": _commit_checkpoint(store, "base_ckpt", base, _TOK),
            "thinking": _commit_checkpoint(store, "thinking_ckpt", _finetuned(base, 1), _TOK),
            "domain": _commit_checkpoint(store, "domain_ckpt", _finetuned(base, 2), _TOK)}
    return store, arts


def _sd(art):
    return load_checkpoint(art.local_dir())[0].state_dict()


def _maxdiff(a, b):
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_ties_merge_default(world, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    store, arts = world
    res = merge.run(MergeConfig(), arts, store, output_names={"checkpoint": "thinking_base"})
    assert res.status == "ran"
    out = store.open(res.outputs["checkpoint"])
    d = out.local_dir()
    model = AutoModelForCausalLM.from_pretrained(str(d))
    tok = AutoTokenizer.from_pretrained(str(d))
    assert tok.get_vocab() == _TOK.get_vocab() and tok.chat_template == _TOK.chat_template
    assert (d / "mergekit_config.yml").exists()
    merged = model.state_dict()
    parents = {s: _sd(a) for s, a in arts.items()}
    assert merged.keys() == parents["base"].keys()
    assert all(torch.isfinite(v).all() for v in merged.values())
    for s in ("base", "thinking", "domain"):
        assert _maxdiff(merged, parents[s]) > 1e-3, s
    ex = out.manifest.extra
    assert ex["method"] == "ties" and ex["density"] == 0.7
    # TIES keeps 70% of each task vector and a weighted mean that leans to thinking (0.7 vs 0.3).
    assert ex["l2_to_thinking"] < ex["l2_to_domain"]
    assert 0 < ex["fraction_changed_vs_base"] < 1
    # Same on-disk layout as the inputs (per-expert tensors after the transformers re-save).
    from safetensors import safe_open
    with safe_open(str(d / "model.safetensors"), "pt") as f:
        assert any(".mlp.experts.0." in k for k in f.keys())
    assert merge.run(MergeConfig(), arts, store, output_names={"checkpoint": "thinking_base"}).status == "reused"


def test_task_arithmetic_weight_one_gives_thinking(world):
    store, arts = world
    cfg = MergeConfig(method="task_arithmetic", thinking_weight=1.0, domain_weight=0.0)
    merged = _sd(store.open(merge.run(cfg, arts, store).outputs["checkpoint"]))
    assert _maxdiff(merged, _sd(arts["thinking"])) < 1e-6


def test_merge_of_one_model_with_itself(world):
    """(base, A, A): TIES (normalised by the weights) and task arithmetic with weights summing to 1 give A back."""
    store, arts = world
    same = {"base": arts["base"], "thinking": arts["thinking"], "domain": arts["thinking"]}
    thinking = _sd(arts["thinking"])
    for cfg in (MergeConfig(method="ties", density=1.0, thinking_weight=0.6, domain_weight=0.9),
                MergeConfig(method="task_arithmetic", thinking_weight=0.25, domain_weight=0.75)):
        merged = _sd(store.open(merge.run(cfg, same, store).outputs["checkpoint"]))
        assert _maxdiff(merged, thinking) < 1e-5, cfg
    # dare_ties at density 1 drops nothing: also A.
    cfg = MergeConfig(method="dare_ties", density=1.0, thinking_weight=0.5, domain_weight=0.5)
    assert _maxdiff(_sd(store.open(merge.run(cfg, same, store).outputs["checkpoint"])), thinking) < 1e-5
    # Low density trims the task vector: the result moves back towards base.
    sparse = _sd(store.open(merge.run(MergeConfig(density=0.2), same, store).outputs["checkpoint"]))
    base = _sd(arts["base"])
    frac = sum(int((sparse[k] != base[k]).sum()) for k in base) / sum(v.numel() for v in base.values())
    assert 0.1 < frac < 0.4


def test_mismatched_architecture_is_refused(world, tmp_path):
    store, arts = world
    wide = build_model(ModelConfig(hidden_size=96), _TOK, seed=3)
    other = _commit_checkpoint(store, "wide_ckpt", wide, _TOK)
    with pytest.raises(merge.MergeInputError) as e:
        merge.run(MergeConfig(), {**arts, "domain": other}, store)
    msg = str(e.value)
    assert "architectures differ" in msg and "hidden_size=96 vs 64" in msg
    assert other.uri in msg and arts["base"].uri in msg


def test_mismatched_tokenizer_is_refused(world):
    store, arts = world
    tok2 = build_tokenizer(["zebra zebra zebra zebra"])  # BPE learns merges the base lacks
    other = _commit_checkpoint(store, "other_tok_ckpt", build_model(ModelConfig(), tok2, seed=0), tok2)
    with pytest.raises(merge.MergeInputError) as e:
        merge.run(MergeConfig(), {**arts, "thinking": other}, store)
    msg = str(e.value)
    assert "tokenizers differ" in msg and other.uri in msg and arts["base"].uri in msg
    assert "0 only in base" in msg and "only in thinking ['" in msg and "zebra" in msg


def test_config_rejects_zero_weights():
    with pytest.raises(ValidationError):
        MergeConfig(thinking_weight=0, domain_weight=0)
