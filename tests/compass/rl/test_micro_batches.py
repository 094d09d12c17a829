"""Token-capped micro-batches in the torch trainer's update (``trainer.backend.micro_batch_tokens``): the same
update as one forward over the batch, for every loss, with Router Replay too, while each forward holds at
most the cap's tokens."""
from __future__ import annotations

import copy

import pytest
import torch

from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
from compass.rl.config import RLConfig
from compass.rl.trainer.batch import build_batch
from compass.rl.trainer.torch_trainer import policy_step, token_micro_batches


def test_groups_respect_the_cap_and_keep_every_row_once():
    attn = torch.zeros(6, 10, dtype=torch.long)
    for i, n in enumerate([3, 9, 2, 4, 10, 1]):
        attn[i, :n] = 1
    groups = token_micro_batches(attn, 12)
    assert sorted(i for g in groups for i in g) == list(range(6))
    assert [i for g in groups for i in g] == list(range(6))                    # consecutive, in order
    for g in groups:
        widths = attn[g].sum(1)
        assert len(g) == 1 or len(g) * int(widths.max()) <= 12                 # a long row may go alone
    assert token_micro_batches(attn, 1000) == [list(range(6))]
    assert token_micro_batches(attn, 1) == [[i] for i in range(6)]


def _batch(tok, seed=0):
    lo = len(tok.all_special_ids)
    g = torch.Generator().manual_seed(seed)
    return build_batch([torch.randint(lo, len(tok), (n,), generator=g).tolist() for n in (4, 6, 3, 5, 4, 2)],
                       [torch.randint(lo, len(tok), (n,), generator=g).tolist() for n in (5, 3, 7, 2, 6, 4)],
                       tok.pad_token_id)


@pytest.mark.parametrize("loss", [{"kind": "ppo_clip_token_mean"}, {"kind": "gspo"},
                                  {"kind": "espo", "alpha": 0.1}])
def test_micro_batches_make_the_same_update_as_one_forward(loss):
    tok = build_tokenizer("")
    model = build_model(ModelConfig(), tok, seed=4)                            # the tiny Qwen3-MoE
    batch = _batch(tok)
    mask = batch["completion_mask"][:, 1:]
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0])[:, None] * mask
    cfg = RLConfig(loss=loss)
    old = None
    runs = {}
    for cap in (None, 20):                                                     # 20 tokens: 1-2 rows per forward
        m = copy.deepcopy(model)
        opt = torch.optim.SGD(m.parameters(), lr=1.0)       # the step is the (clipped) gradient itself
        if old is None:
            with torch.no_grad():                                              # an older policy: ratios != 1
                from compass.lm.policy_forward import token_logprobs
                old = token_logprobs(m, batch["input_ids"], batch["attention_mask"])[0] + 0.05 * mask
        sink: dict = {}
        metrics = policy_step(m, opt, batch, adv, cfg, old_logp=old, sink=sink, micro_batch_tokens=cap)
        runs[cap] = (metrics, sink["logp"], {k: v.detach() - model.state_dict()[k] for k, v in m.named_parameters()})
    (m1, lp1, p1), (m2, lp2, p2) = runs[None], runs[20]
    assert len(token_micro_batches(batch["attention_mask"], 20)) >= 3
    assert torch.allclose(lp1, lp2, atol=1e-5)
    for key in ("loss", "entropy", "grad_norm", "adv_abs_token_mean", "updated"):
        assert m1[key] == pytest.approx(m2[key], rel=1e-4, abs=1e-6), key
    assert max(float(d.abs().max()) for d in p1.values()) > 1e-3              # the step moved the weights
    for k in p1:       # by the same gradient, up to float summation order and the rounding of the new weight
        ulp = 2.0 ** -23 * float(model.state_dict()[k].abs().max())
        assert float((p1[k] - p2[k]).abs().max()) <= 1e-5 * float(p1[k].abs().max()) + 4 * ulp, k


def test_micro_batches_with_router_replay_and_no_signal():
    from compass.rl.router_replay import record_routes
    from compass.lm.policy_forward import token_logprobs
    tok = build_tokenizer("")
    model = build_model(ModelConfig(), tok, seed=5)
    batch = _batch(tok, seed=1)
    mask = batch["completion_mask"][:, 1:]
    with torch.no_grad(), record_routes(model) as rec:
        token_logprobs(model, batch["input_ids"], batch["attention_mask"])
    routes = rec.routes()
    cfg = RLConfig()
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0])[:, None] * mask
    out = {}
    for cap in (None, 16):
        m = copy.deepcopy(model)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        out[cap] = (policy_step(m, opt, batch, adv, cfg, routes=routes, micro_batch_tokens=cap),
                    dict(m.named_parameters()))
    assert out[None][0]["loss"] == pytest.approx(out[16][0]["loss"], abs=1e-6)
    for k, w in out[None][1].items():          # the same step, up to float rounding of the step and the weight
        moved = float((w - model.state_dict()[k]).abs().max())
        ulp = 2.0 ** -23 * float(w.abs().max())
        assert float((w - out[16][1][k]).abs().max()) <= 1e-5 * moved + 4 * ulp, k
    # no signal: no step, as without micro-batches
    m = copy.deepcopy(model)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    r = policy_step(m, opt, batch, torch.zeros(mask.shape), cfg, micro_batch_tokens=16)
    assert r["updated"] == 0.0 and r["grad_norm"] == 0.0
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in m.named_parameters())


def test_the_trainer_reads_the_cap_from_its_settings():
    from compass.rl.trainer.torch_trainer import TorchTrainer
    tok = build_tokenizer("")
    cfg = RLConfig(trainer={"backend": {"kind": "torch", "micro_batch_tokens": 64}})
    assert TorchTrainer(build_model(ModelConfig(), tok, seed=0), cfg).micro_batch_tokens == 64


def test_an_engine_step_with_micro_batches_and_checkpointing_trains():
    import itertools
    import json
    from compass.rl.engine import train
    from compass.rl.sampling.prompt_data import RLPrompt
    tok = build_tokenizer("")
    v = json.dumps({"type": "test"})
    prompts = [RLPrompt(f"P{i}", f"{i}+{i}=?", "mixed", v, "math", "a") for i in range(3)]
    flip = itertools.cycle([1.0, 0.0])
    model = build_model(ModelConfig(), tok, seed=2)
    before = {k: t.clone() for k, t in model.state_dict().items()}
    cfg = RLConfig(steps=1, sampling={"prompts_per_step": 3, "group_size": 2}, rollout={"max_new_tokens": 6},
                   trainer={"backend": {"kind": "torch", "micro_batch_tokens": 24, "activation_checkpointing": True}})
    res = train(model, tok, prompts, cfg, score_fn=lambda *_: next(flip))
    assert res.metrics[0]["updated"] == 1.0
    assert any(not torch.equal(before[k], t) for k, t in model.state_dict().items())
    assert not getattr(model, "is_gradient_checkpointing", False) and model.config.use_cache in (True, None)
