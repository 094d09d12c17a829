"""Device and precision (compass.lm.device): the one place that decides, the settings every model-holding
config carries, and the training loops that follow them.

On this CPU machine the device is always the CPU, so the device checks here show that nothing a stage hands
the model lies elsewhere; the precision checks can fail here: bf16 autocast runs on the CPU too, so a loop
that ignored ``precision: bf16`` (or cast the master weights) is caught."""
from __future__ import annotations

import itertools
import json

import pytest
import torch

from compass.config import ComputeSettings, ConfigError, validate
from compass.lm.device import (autocast, compute_dtype, place_for_inference, resolve_device, to_device,
                               watch_inputs)
from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("")


def test_auto_takes_the_gpu_only_when_there_is_one():
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == want
    assert resolve_device("cpu") == torch.device("cpu")
    assert compute_dtype(torch.device("cpu")) == torch.float32            # CPU runs stay fp32
    assert compute_dtype(torch.device("cuda", 0)) == torch.bfloat16       # a GPU: bf16 mixed precision
    assert compute_dtype(torch.device("cpu"), "bf16") == torch.bfloat16
    assert compute_dtype(torch.device("cuda", 0), "fp32") == torch.float32


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error is for a machine without a GPU")
def test_asking_for_a_gpu_that_is_not_there_names_the_setting():
    with pytest.raises(ValueError, match=r"device 'cuda:1': torch sees no GPU"):
        resolve_device("cuda:1")


def test_malformed_settings_are_refused_in_the_config_and_in_code():
    with pytest.raises(ValueError, match="expected auto, cpu, cuda or cuda:N"):
        resolve_device("gpu")
    with pytest.raises(ValueError, match="precision 'fp16'"):
        compute_dtype(torch.device("cpu"), "fp16")
    with pytest.raises(ConfigError, match="device"):
        validate(ComputeSettings, {"device": "gpu0"})
    assert validate(ComputeSettings, {}).model_dump() == {"device": "auto", "precision": "auto"}


def test_fp32_has_no_autocast_and_a_batch_on_its_device_is_not_copied():
    from contextlib import nullcontext
    assert isinstance(autocast(torch.device("cpu"), torch.float32), nullcontext)
    batch = {"input_ids": torch.ones(2, 3, dtype=torch.long), "n": 3}
    moved = to_device(batch, torch.device("cpu"))
    assert moved["input_ids"] is batch["input_ids"] and moved["n"] == 3


def test_watch_inputs_sees_a_tensor_on_another_device_than_the_weights(tok):
    """The watcher itself can fail: a module whose weights are on 'meta' handed a CPU tensor is recorded."""
    lin = torch.nn.Linear(2, 2, device="meta")
    with watch_inputs(lin) as bad:
        lin(torch.ones(1, 2, device="meta"))
        assert bad == []
        try:
            lin(torch.ones(1, 2))
        except (RuntimeError, NotImplementedError):
            pass                                           # meta and CPU do not mix; the hook ran first
    assert bad == ["Linear: input on cpu, weights on meta"]


def _linear_output_dtypes(model) -> tuple[set, list]:
    """Hooks recording the dtype of every Linear's output; returns (the set, the handles)."""
    seen: set = set()
    handles = [m.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
               for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return seen, handles


@pytest.mark.parametrize("precision, want", [("auto", torch.float32), ("bf16", torch.bfloat16)])
def test_sft_computes_in_the_configured_precision_on_fp32_master_weights(tok, precision, want):
    import logging
    from compass.lm.sft.train import encode_table, train_sft
    model = build_model(ModelConfig(arch="qwen3"), tok, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    enc, _ = encode_table(tok, ["1+1=?", "2+2=?", "3+3=?", "4+4=?"], ["2", "4", "6", "8"], 64)
    seen, handles = _linear_output_dtypes(model)
    with watch_inputs(model) as bad:
        m = train_sft(model, tok, enc, steps=2, batch_size=4, lr=1e-3, warmup_steps=0, weight_decay=0.0,
                      grad_clip=1.0, seed=0, log_every=1, logger=logging.getLogger("test"), packing=False,
                      device="cpu", precision=precision)
    for h in handles:
        h.remove()
    assert bad == []
    assert seen == {want}, seen                                            # every matmul in the configured dtype
    assert all(p.dtype == torch.float32 for p in model.parameters())     # master weights stay fp32
    assert all(torch.isfinite(torch.tensor(x)) for x in m["losses"])
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("precision, want", [("auto", torch.float32), ("bf16", torch.bfloat16)])
def test_rl_torch_trainer_updates_in_the_configured_precision(tok, precision, want):
    from compass.rl.config import RLConfig
    from compass.rl.engine import train
    from compass.rl.sampling.prompt_data import RLPrompt
    v = json.dumps({"type": "test"})
    prompts = [RLPrompt("M", "3+3=?", "mixed", v, "math", "a"), RLPrompt("N", "4+4=?", "mixed", v, "math", "a")]
    flip = itertools.cycle([1.0, 0.0])
    model = build_model(ModelConfig(), tok, seed=1)                        # the tiny Qwen3-MoE
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = RLConfig(steps=1, sampling={"prompts_per_step": 2, "group_size": 2}, rollout={"max_new_tokens": 6},
                   trainer={"backend": {"kind": "torch", "device": "cpu", "precision": precision}})
    seen, handles = _linear_output_dtypes(model)
    with watch_inputs(model) as bad:
        res = train(model, tok, prompts, cfg, score_fn=lambda *_: next(flip))
    for h in handles:
        h.remove()
    assert bad == []
    assert want in seen                                                    # the update's forward ran in it
    if want == torch.float32:
        assert seen == {torch.float32}
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert res.metrics[0]["updated"] == 1.0
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_evaluation_placement_is_a_no_op_on_the_cpu_in_fp32(tok):
    model = build_model(ModelConfig(arch="qwen3"), tok, seed=0)
    ptr = next(model.parameters()).data_ptr()
    assert place_for_inference(model, "auto", "auto") is model
    assert next(model.parameters()).data_ptr() == ptr                     # not copied
    place_for_inference(model, "cpu", "bf16")
    assert next(model.parameters()).dtype == torch.bfloat16


def test_sft_pieces_capped_by_tokens_make_the_same_step(tok):
    """``micro_batch_tokens``: a micro-batch in pieces, gradients accumulated: the same losses and weights."""
    import copy
    import logging
    from compass.lm.sft.train import encode_table, split_by_tokens, train_sft
    enc, _ = encode_table(tok, [f"{a}+{a}=?" for a in range(8)], [str(2 * a) for a in range(8)], 64)
    assert [len(p) for p in split_by_tokens(enc, None)] == [8]
    pieces = split_by_tokens(enc, 2 * max(len(s[0]) for s in enc))
    assert len(pieces) >= 4 and [s for p in pieces for s in p] == enc
    base = build_model(ModelConfig(arch="qwen3"), tok, seed=0)
    losses = {}
    for cap, packing in ((None, True), (24, True), (None, False), (24, False)):
        m = train_sft(copy.deepcopy(base), tok, enc, steps=3, batch_size=8, lr=1e-3, warmup_steps=0,
                      weight_decay=0.0, grad_clip=1.0, seed=0, log_every=1, logger=logging.getLogger("test"),
                      packing=packing, micro_batch_tokens=cap)
        losses[cap, packing] = m["losses"]
    for packing in (True, False):
        assert losses[None, packing] == pytest.approx(losses[24, packing], rel=1e-5)
    # the gradient itself: the pieces' summed losses back-propagate to the whole micro-batch's gradient
    from compass.lm.sft.train import padded_loss_sum, packed_loss_sum
    for loss_of in (lambda m, s: padded_loss_sum(m, s, tok.pad_token_id),
                    lambda m, s: packed_loss_sum(m, s, tok.pad_token_id, 64)):
        grads = []
        for parts in ([enc], split_by_tokens(enc, 24)):
            model = copy.deepcopy(base)
            for p in parts:
                loss_of(model, p)[0].backward()
            grads.append({k: v.grad for k, v in model.named_parameters()})
        for k in grads[0]:                  # equal up to float summation order, relative to the tensor's scale
            assert float((grads[0][k] - grads[1][k]).abs().max()) <= 1e-5 * float(grads[0][k].abs().max()) + 1e-9, k


def _saved_bytes_and_grads(model, loss_fn, on: bool):
    """Bytes autograd keeps for the backward while ``loss_fn(model)`` runs, and the gradients it gives."""
    from compass.lm.device import activation_checkpointing
    saved = [0]

    def pack(t):
        saved[0] += t.numel() * t.element_size()
        return t
    with activation_checkpointing(model, on), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model)
    loss.backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return saved[0], grads


@pytest.mark.parametrize("path", ["native_packed", "shared_prefix", "transformers"])
def test_activation_checkpointing_keeps_less_and_gives_the_same_gradients(tok, path):
    from compass.lm.policy_forward import token_logprobs
    from compass.lm.sft.train import encode_table, packed_loss_sum, padded_loss_sum
    from compass.rl.trainer.batch import build_batch
    model = build_model(ModelConfig(num_layers=4), tok, seed=0)
    model.train()
    enc, _ = encode_table(tok, [f"{a}*{a}=?" for a in range(6)], [str(a * a) for a in range(6)], 64)
    if path == "native_packed":
        fn = lambda m: packed_loss_sum(m, enc, tok.pad_token_id, 64)[0]            # noqa: E731
    elif path == "transformers":
        fn = lambda m: padded_loss_sum(m, enc, tok.pad_token_id)[0]                # noqa: E731
    else:
        batch = build_batch([ids[:4] for ids, _ in enc], [ids[4:] for ids, _ in enc], tok.pad_token_id)
        fn = lambda m: token_logprobs(m, batch["input_ids"], batch["attention_mask"],  # noqa: E731
                                      only=batch["completion_mask"][:, 1:])[0].sum()
    off_bytes, off_grads = _saved_bytes_and_grads(model, fn, False)
    on_bytes, on_grads = _saved_bytes_and_grads(model, fn, True)
    assert on_bytes < 0.6 * off_bytes, (on_bytes, off_bytes)
    assert off_grads.keys() == on_grads.keys()
    # equal up to float summation order (two runs without checkpointing differ by as much: ~1e-7 relative)
    for k in off_grads:
        scale = float(off_grads[k].abs().max()) + 1e-12
        assert float((off_grads[k] - on_grads[k]).abs().max()) <= 1e-5 * scale, k
    assert not getattr(model, "is_gradient_checkpointing", False)                 # switched off again after
