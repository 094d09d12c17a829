"""The ``megatron`` SFT backend (megatron-core on CPU + gloo, one process) against transformers and the torch backend."""
from __future__ import annotations

import logging
import math
import warnings

import pytest
import torch

from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
from compass.lm.sft.train import make_sft_backend, padded_loss_sum, supervised_count, train_sft
from tests.helpers import sum_sft_samples

warnings.filterwarnings("ignore", message=".*Transformer Engine.*")
log = logging.getLogger("test.sft.megatron")
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("")


_samples = sum_sft_samples


def _grads(named_params) -> dict[str, torch.Tensor]:
    return {k: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for k, p in named_params}


@pytest.mark.parametrize("packing", [True, False])
def test_megatron_loss_and_gradients_equal_per_sample_transformers(tok, packing):
    from compass.lm.megatron_convert import megatron_to_hf
    model = build_model(ModelConfig(), tok, seed=3)
    samples = _samples(tok, 12)
    n = supervised_count(samples)
    mg = make_sft_backend("megatron", model, tok.pad_token_id, packing=packing, pack_len=96)
    loss, info = mg(samples)
    assert (info["rows"] < len(samples)) == packing
    (loss / n).backward()
    g_mg = megatron_to_hf(_grads(mg.module.named_parameters()), model.config)
    ref = sum(padded_loss_sum(model, [s], tok.pad_token_id)[0] for s in samples)      # one sample, no padding
    (ref / n).backward()
    g_ref = _grads(model.named_parameters())
    assert float(loss.detach() / n) == pytest.approx(float(ref.detach() / n), abs=1e-5)
    assert g_mg.keys() == g_ref.keys()
    assert sum(float(g.abs().sum()) for g in g_ref.values()) > 0
    for k in g_ref:
        assert torch.allclose(g_mg[k], g_ref[k], atol=1e-6, rtol=1e-4), k


def test_megatron_training_matches_the_torch_backend_and_writes_back(tok):
    samples = _samples(tok, 24, seed=1)
    kw = dict(steps=4, batch_size=6, grad_accum_steps=2, lr=1e-3, warmup_steps=1, weight_decay=0.0, grad_clip=1.0,
              seed=0, log_every=10, logger=log, packing=True, pack_len=128, heldout=samples[:4])
    start = build_model(ModelConfig(), tok, seed=4).state_dict()
    a, b = build_model(ModelConfig(), tok, seed=4), build_model(ModelConfig(), tok, seed=4)
    ma = train_sft(a, tok, samples, backend="torch", **kw)
    mb = train_sft(b, tok, samples, backend="megatron", **kw)
    assert mb["backend"] == "megatron" and mb["mode"] == "packed"
    assert mb["losses"] == pytest.approx(ma["losses"], abs=1e-4)
    assert [h["loss"] for h in mb["heldout"]] == pytest.approx([h["loss"] for h in ma["heldout"]], abs=1e-4)
    assert mb["tokens"] == ma["tokens"] and mb["supervised_tokens"] == ma["supervised_tokens"]
    moved = diff = 0.0
    for k, v in b.state_dict().items():                      # the HF model holds megatron's result
        moved += float((v - start[k]).pow(2).sum())
        diff += float((v - a.state_dict()[k]).pow(2).sum())
    assert moved > 0 and math.sqrt(diff / moved) < 1e-3


def test_megatron_resume_after_an_interruption_is_exact(tok, tmp_path):
    samples = _samples(tok, 20, seed=2)
    kw = dict(steps=5, batch_size=4, lr=1e-3, warmup_steps=1, weight_decay=0.0, grad_clip=1.0, seed=0, log_every=10,
              logger=log, packing=True, pack_len=128, checkpoint_every=2, backend="megatron")
    whole = build_model(ModelConfig(), tok, seed=5)
    mw = train_sft(whole, tok, samples, state_dir=tmp_path / "w", **kw)

    def stop_at_3(done):
        if done == 3:
            raise KeyboardInterrupt

    part = build_model(ModelConfig(), tok, seed=5)
    with pytest.raises(KeyboardInterrupt):
        train_sft(part, tok, samples, state_dir=tmp_path / "p", on_step=stop_at_3, **kw)
    resumed = build_model(ModelConfig(), tok, seed=5)
    mr = train_sft(resumed, tok, samples, state_dir=tmp_path / "p", **kw)
    assert mw["resumed_from_step"] is None and mr["resumed_from_step"] == 2
    assert mr["losses"] == mw["losses"]
    for k, v in whole.state_dict().items():
        assert torch.equal(v, resumed.state_dict()[k]), k
    # the saved state belongs to one backend: a torch run with otherwise equal settings starts afresh
    other = build_model(ModelConfig(), tok, seed=5)
    mt = train_sft(other, tok, samples, state_dir=tmp_path / "p", **{**kw, "backend": "torch", "steps": 5})
    assert mt["resumed_from_step"] is None


def test_megatron_backend_refuses_a_model_it_cannot_convert(tok):
    from transformers import LlamaConfig, LlamaForCausalLM
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
    with pytest.raises(ValueError, match="backend 'megatron' cannot train this model.*qwen3_moe.*'llama'"):
        make_sft_backend("megatron", model, tok.pad_token_id, packing=True, pack_len=64)
    with pytest.raises(ValueError, match="unknown sft backend 'jax'"):
        make_sft_backend("jax", model, tok.pad_token_id, packing=True, pack_len=64)


def test_sft_stage_refuses_megatron_for_such_a_model_before_any_work(tok, tmp_path, monkeypatch):
    from transformers import LlamaConfig, LlamaForCausalLM

    from compass.runtime.runner import StageInputError
    from compass.store.store import ArtifactStore
    from stages.sft import stage as sft
    from stages.sft.config import SFTConfig
    from tests.helpers import commit_checkpoint, commit_table
    from tests.stages.sft.test_stage import _arith_samples
    monkeypatch.setenv("COMPASS_STATE_DIR", str(tmp_path / "state"))
    store = ArtifactStore(str(tmp_path / "a"))
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
    inputs = {"base": commit_checkpoint(store, "base_ckpt", llama, tok),
              "data": commit_table(store, "sft_samples", "sft_longcot", _arith_samples(12))}
    trained = []
    monkeypatch.setattr(sft, "train_sft", lambda *a, **k: trained.append(1))
    with pytest.raises(StageInputError, match="backend 'megatron' cannot train .*base_ckpt.*'llama'.*backend: torch"):
        sft.run(SFTConfig(backend="megatron", steps=2), inputs, store, output_names={"checkpoint": "thinking_ckpt"})
    assert not trained and store.list("checkpoint", "thinking_ckpt") == []


def test_sft_stage_refuses_parallel_sizes_the_model_cannot_take_before_any_work(tok, tmp_path, monkeypatch):
    """Four pipeline stages of a two-layer model: the stage's input error names the sizes, nothing trains or
    is written."""
    from compass.runtime.runner import StageInputError
    from compass.store.store import ArtifactStore
    from stages.sft import stage as sft
    from stages.sft.config import SFTConfig
    from tests.helpers import commit_checkpoint, commit_table
    from tests.stages.sft.test_stage import _arith_samples
    monkeypatch.setenv("COMPASS_STATE_DIR", str(tmp_path / "state"))
    store = ArtifactStore(str(tmp_path / "a"))
    inputs = {"base": commit_checkpoint(store, "base_ckpt", build_model(ModelConfig(), tok, seed=3), tok),
              "data": commit_table(store, "sft_samples", "sft_longcot", _arith_samples(12))}
    trained = []
    monkeypatch.setattr(sft, "train_sft", lambda *a, **k: trained.append(1))
    cfg = SFTConfig(backend="megatron", steps=2, ranks=4, pipeline_parallel=4)
    with pytest.raises(StageInputError, match="base_ckpt.*pipeline_parallel 4 does not divide the 2 layers"):
        sft.run(cfg, inputs, store, output_names={"checkpoint": "thinking_ckpt"})
    assert not trained and store.list("checkpoint", "thinking_ckpt") == []


def test_the_backend_after_the_process_left_its_group_and_joined_a_new_one(tok):
    """Megatron's parallel state outlives the default group it was made in (a group of one destroyed by an
    in-process fsdp rank of ``bench scaling``, say): the one-process backend rebuilds it (a failure seen when the
    megatron trainer's tests, then the scaling bench's, ran before this file in one process)."""
    import torch.distributed as dist
    model = build_model(ModelConfig(), tok, seed=3)
    samples = _samples(tok, 4)
    loss, _ = make_sft_backend("megatron", model, tok.pad_token_id, packing=False, pack_len=None)(samples)
    if dist.is_initialized():
        dist.destroy_process_group()
    again, _ = make_sft_backend("megatron", model, tok.pad_token_id, packing=False, pack_len=None)(samples)
    assert float(again) == pytest.approx(float(loss), rel=1e-6)
