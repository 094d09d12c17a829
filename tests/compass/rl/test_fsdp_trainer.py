"""The ``fsdp`` trainer backend with one rank in this process (a torch.distributed group of one, gloo):
the same update as the ``torch`` trainer and as plain autograd, gathered checkpoints that resume exactly,
and clear errors. Two and more ranks on Ray: ``test_fsdp_ranks.py``."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist

from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
from compass.lm.policy_forward import token_logprobs
from compass.rl.algos.losses import policy_loss
from compass.rl.config import RLConfig
from compass.rl.trainer.batch import build_batch
from compass.dist.fsdp import decoder_layers
from compass.rl.trainer.fsdp_trainer import FsdpTrainer
from compass.rl.trainer.torch_trainer import TorchTrainer

LENGTHS = ((4, 6, 3, 5, 4, 2), (5, 3, 7, 2, 6, 4))         # prompt and completion lengths of the six rows


@pytest.fixture(autouse=True)
def _own_process_group():
    """The rank's group of one is made by the trainer; leave the process as it was found."""
    was = dist.is_initialized()
    yield
    if not was and dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("")


@pytest.fixture(scope="module")
def model(tok):
    return build_model(ModelConfig(), tok, seed=4)                 # the tiny Qwen3-MoE


def make_batch(tok, seed: int = 0):
    lo = len(tok.all_special_ids)
    g = torch.Generator().manual_seed(seed)
    batch = build_batch([torch.randint(lo, len(tok), (n,), generator=g).tolist() for n in LENGTHS[0]],
                        [torch.randint(lo, len(tok), (n,), generator=g).tolist() for n in LENGTHS[1]],
                        tok.pad_token_id)
    mask = batch["completion_mask"][:, 1:]
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0])[:, None] * mask
    return batch, mask, adv


def cfg_for(backend: dict, loss: str = "gspo") -> RLConfig:
    return RLConfig(trainer={"lr": 1e-2, "backend": backend}, loss={"kind": loss})


def test_the_gradient_is_plain_autogradients(tok, model):
    """One rank's gradient of the batch loss equals autograd through the HF model with no FSDP (fp32, up to
    the float rounding of a differently ordered sum: 1e-5 of the largest entry)."""
    batch, mask, adv = make_batch(tok)
    cfg = cfg_for({"kind": "fsdp", "micro_batch_tokens": 20})                   # 20 tokens: 3+ micro-batches
    ref = copy.deepcopy(model)
    with torch.no_grad():
        old = token_logprobs(ref, batch["input_ids"], batch["attention_mask"])[0] + 0.05 * mask
    logp, ent = token_logprobs(ref, batch["input_ids"], batch["attention_mask"], only=mask)
    loss, _, _ = policy_loss("gspo", logp, old, adv, mask, entropy=ent.detach(), vocab_size=ref.config.vocab_size,
                             settings=cfg.loss.model_dump(exclude={"kind"}))
    loss.backward()
    trainer = FsdpTrainer(copy.deepcopy(model), cfg)
    try:
        grads = trainer.gradients(batch, adv, old, cfg)
    finally:
        trainer.close()
    expected = {k: p.grad for k, p in ref.named_parameters() if p.grad is not None}
    assert set(expected) <= set(grads)
    top = max(float(g.abs().max()) for g in expected.values())
    assert top > 1e-3                                                             # a real gradient
    for k, g in expected.items():
        assert torch.allclose(grads[k], g, rtol=0, atol=1e-5 * top), k


@pytest.mark.parametrize("cap", [None, 20], ids=["one-forward", "micro-batches"])
def test_one_rank_trains_as_the_torch_trainer(tok, model, cap):
    """Log-probs, two updates' metrics, the weights after them: the fsdp backend at one rank against the torch
    trainer. Log-probs to 1e-5 nats, metrics to 1e-5 relative; weights to 1% of how far the two AdamW steps
    moved them (Adam divides by the gradient's size, so entries whose gradient is rounding noise move by
    a noisy amount in both)."""
    batch, mask, adv = make_batch(tok)
    results = {}
    for kind in ("torch", "fsdp"):
        cfg = cfg_for({"kind": kind, "micro_batch_tokens": cap})
        trainer = (TorchTrainer if kind == "torch" else FsdpTrainer)(copy.deepcopy(model), cfg)
        try:
            old, _ = trainer.logprobs(batch)
            metrics = [trainer.update(batch, adv, old + 0.05 * mask, cfg) for _ in range(2)]
            results[kind] = (old, metrics, trainer.hf_state_dict(), trainer.state_dict())
        finally:
            trainer.close()
    (old_t, m_t, w_t, s_t), (old_f, m_f, w_f, s_f) = results["torch"], results["fsdp"]
    assert torch.allclose(old_t, old_f, atol=1e-5)
    for a, b in zip(m_t, m_f):
        for k in ("loss", "entropy", "grad_norm", "adv_abs_token_mean", "updated"):
            assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-7), k
    assert set(w_t) == set(w_f)                                        # the same Hugging Face names
    start = model.state_dict()
    moved = max(float((w_t[k] - start[k]).abs().max()) for k in w_t)
    assert moved > 1e-3
    assert max(float((w_t[k] - w_f[k]).abs().max()) for k in w_t) <= 0.01 * moved
    assert s_f["steps"] == 2 and s_f["ranks"] == 1 and set(s_f["model"]) == set(w_t)


def test_a_saved_state_resumes_exactly(tok, model):
    """``state_dict()`` after a step, loaded into a fresh trainer built from the first weights: the next update
    is bit for bit the uninterrupted one (AdamW's moments and step count came back too: without them the
    second step differs)."""
    batch, mask, adv = make_batch(tok)
    cfg = cfg_for({"kind": "fsdp"})
    a, b = FsdpTrainer(copy.deepcopy(model), cfg), FsdpTrainer(copy.deepcopy(model), cfg)
    try:
        old, _ = a.logprobs(batch)
        a.update(batch, adv, old, cfg)
        saved = a.state_dict()
        b.load_state_dict(saved)
        assert b.steps == 1
        ma, mb = a.update(batch, adv, old, cfg), b.update(batch, adv, old, cfg)
        assert ma == mb
        wa, wb = a.hf_state_dict(), b.hf_state_dict()
        assert all(torch.equal(wa[k], wb[k]) for k in wa)
        fresh = FsdpTrainer(copy.deepcopy(model), cfg)
        try:
            fresh.load_state_dict({**saved, "optimizer": fresh.state_dict()["optimizer"]})    # weights only
            fresh.update(batch, adv, old, cfg)
            wf = fresh.hf_state_dict()
            assert any(not torch.equal(wa[k], wf[k]) for k in wa)          # the moments matter: a real check
        finally:
            fresh.close()
    finally:
        a.close()
        b.close()


def test_settings_and_models_it_cannot_take_fail_clearly(tok, model):
    with pytest.raises(ValueError, match="cpu_offload: the ranks compute on cpu, not a GPU"):
        FsdpTrainer(copy.deepcopy(model), cfg_for({"kind": "fsdp", "cpu_offload": True, "device": "cpu"}))
    with pytest.raises(Exception, match="cpu_offload runs at ranks: 1 only"):
        cfg_for({"kind": "fsdp", "ranks": 2, "cpu_offload": True})
    with pytest.raises(Exception, match="needs gpus_per_rank or cpus_per_rank above 0"):
        cfg_for({"kind": "fsdp", "ranks": 2, "cpus_per_rank": 0})
    with pytest.raises(Exception, match="ranks"):
        cfg_for({"kind": "fsdp", "ranks": 0})
    with pytest.raises(ValueError, match="no decoder layers at model.layers"):
        decoder_layers(torch.nn.Linear(2, 2))
    assert len(decoder_layers(model)) == model.config.num_hidden_layers


@pytest.mark.parametrize("checkpointing", [False, True], ids=["stored", "recomputed"])
def test_router_replay_under_fsdp_is_the_torch_trainers(tok, model, checkpointing):
    """Recorded routes replayed in the sharded model: the same log-probs and update as the torch trainer with the
    same routes, and different log-probs from free routing where the routes were planted. With activation
    checkpointing the backward recomputes every layer, and it must replay the routes there too."""
    from compass.rl.router_replay import record_routes
    batch, mask, adv = make_batch(tok, seed=2)
    with torch.no_grad(), record_routes(model) as rec:
        token_logprobs(model, batch["input_ids"], batch["attention_mask"])
    routes = rec.routes()
    planted = routes.clone()
    planted[..., 0] = (planted[..., 0] + 1) % model.config.num_experts      # another first expert everywhere
    planted[..., 0] = torch.where(planted[..., 0] == planted[..., 1], (planted[..., 0] + 1) % model.config.num_experts,
                                  planted[..., 0])
    out = {}
    for kind in ("torch", "fsdp"):
        cfg = RLConfig(trainer={"lr": 1e-2, "backend": {"kind": kind, "activation_checkpointing": checkpointing},
                                "router_replay": True})
        trainer = (TorchTrainer if kind == "torch" else FsdpTrainer)(copy.deepcopy(model), cfg)
        try:
            free, _ = trainer.logprobs(batch)
            replayed, _ = trainer.logprobs(batch, planted)
            m = trainer.update(batch, adv, replayed, cfg, routes=planted)
            out[kind] = (free, replayed, m)
        finally:
            trainer.close()
    (f_t, r_t, m_t), (f_f, r_f, m_f) = out["torch"], out["fsdp"]
    assert torch.allclose(r_t, r_f, atol=1e-5) and torch.allclose(f_t, f_f, atol=1e-5)
    assert float((r_f - f_f).abs()[mask].max()) > 1e-3                         # the replay changed something
    assert m_t["loss"] == pytest.approx(m_f["loss"], rel=1e-5, abs=1e-7)
    assert m_t["grad_norm"] == pytest.approx(m_f["grad_norm"], rel=1e-5)
