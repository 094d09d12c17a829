"""The ``megatron`` trainer backend (megatron-core 0.16.1, CPU + gloo, one in-process rank) against the HF/torch
reference (more ranks: test_megatron_ranks.py).

A tiny Qwen3-MoE (hidden 64, 2 layers, 4 heads / 2 KV heads, head_dim 32, 4
experts top-2, vocab 300) from the project's own tokenizer and model factory,
with weights re-drawn at a larger scale so that routing and log-probs are far
from uniform (differences would show).
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

warnings.filterwarnings("ignore", message=".*Transformer Engine.*")

TEXT = ("the quick brown fox jumps over the lazy dog 0123456789 while seven wizards quietly "
        "hex the jovial prize of a big sphinx; pack my box with five dozen liquor jugs. ") * 20


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tok():
    from compass.lm.model_factory import build_tokenizer
    from compass.lm.model_config import TokenizerConfig
    return build_tokenizer(TEXT, TokenizerConfig(vocab_size=300, min_frequency=1))


@pytest.fixture(scope="module")
def hf_model(tok):
    from compass.lm.model_config import ModelConfig
    from compass.lm.model_factory import build_model
    cfg = ModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32,
                      intermediate_size=128, num_experts=4, experts_per_token=2, expert_size=32, max_positions=128)
    model = build_model(cfg, tok, seed=0)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.15)
            else:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
    return model.eval()


@pytest.fixture(scope="module")
def batch(tok):
    """Right-padded teacher-forcing batch (as build_batch makes it) of 4 sequences of different lengths."""
    from compass.rl.trainer.batch import build_batch
    g = torch.Generator().manual_seed(1)
    lo = len(tok.all_special_ids)
    prefixes = [torch.randint(lo, len(tok), (n,), generator=g).tolist() for n in (5, 3, 7, 4)]
    completions = [torch.randint(lo, len(tok), (n,), generator=g).tolist() for n in (6, 9, 2, 5)]
    return build_batch(prefixes, completions, tok.pad_token_id)


def per_token(adv, batch, shift=1):
    """``[B]`` per-completion advantages over the completion tokens: ``[B, L-1]`` (the estimators' shape)."""
    from compass.rl.algos.advantages import over_tokens
    return over_tokens(adv, batch["completion_mask"][:, shift:])


def rl_cfg(lr: float = 1e-3, loss: dict | None = None):
    """AdamW at ``lr`` (weight decay 0.01, grad clip 1.0) on ``loss`` (its kind and settings; default PPO-clip)."""
    from compass.rl.config import RLConfig
    return RLConfig(trainer={"lr": lr, "weight_decay": 0.01, "max_grad_norm": 1.0},
                    loss=loss or {"kind": "ppo_clip_token_mean"})


def make_trainer(model, **over):
    from compass.rl.trainer.base import TRAINER_BACKENDS
    import compass.rl.trainer.megatron_trainer  # noqa: F401  (registers "megatron")
    return TRAINER_BACKENDS["megatron"](model, rl_cfg(**over))


# -- HF-side routing: record and force ----------------------------------------------------

def moe_routers(model):
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter
    return [m for m in model.modules() if isinstance(m, Qwen3MoeTopKRouter)]


def hf_record_routes(model, batch) -> torch.Tensor:
    """[B, L, n_moe, k]: the experts HF's routers pick (read from Qwen3MoeTopKRouter's router_indices)."""
    B, L = batch["input_ids"].shape
    seen, hooks = [], []
    for r in moe_routers(model):
        hooks.append(r.register_forward_hook(lambda mod, args, out: seen.append(out[2].detach().clone())))
    try:
        with torch.no_grad():
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    finally:
        for h in hooks:
            h.remove()
    return torch.stack([s.reshape(B, L, -1) for s in seen], dim=2)


class forced_hf_routes:
    """Patch HF's routers to use given experts ([B, L, n_moe, k]; -1 row = own top-k), weights from the
    current router renormalised over them (the same rule as megatron's REPLAY_FORWARD)."""

    def __init__(self, model, routes):
        self.routers, self.routes = moe_routers(model), routes

    def __enter__(self):
        for i, r in enumerate(self.routers):
            target = self.routes[:, :, i, :].reshape(-1, self.routes.shape[-1])

            def fwd(hidden, r=r, target=target):
                hidden = hidden.reshape(-1, r.hidden_dim)
                logits = torch.nn.functional.linear(hidden, r.weight)
                probs = torch.softmax(logits, dtype=torch.float, dim=-1)
                own = torch.topk(probs, r.top_k, dim=-1).indices
                idx = torch.where((target < 0).any(-1, keepdim=True), own, target)
                top = probs.gather(1, idx)
                top = top / top.sum(dim=-1, keepdim=True)
                return logits, top.to(logits.dtype), idx
            r.forward = fwd
        return self

    def __exit__(self, *exc):
        for r in self.routers:
            del r.forward


def hf_token_logprobs(model, batch):
    from compass.lm.policy_forward import token_logprobs
    with torch.no_grad():
        return token_logprobs(model, batch["input_ids"], batch["attention_mask"])


def max_abs_valid(a, b, batch):
    """Largest difference over completion tokens: where a trainer's ``logprobs`` is defined (the torch
    trainer leaves prompt positions 0: it projects only completion positions onto the vocabulary)."""
    valid = batch["completion_mask"][:, 1:].bool()
    return float((a - b)[valid].abs().max())


# -- tests --------------------------------------------------------------------------------

def test_conversion_round_trip_exact(hf_model):
    from compass.lm.megatron_convert import fuse_qkv, hf_to_megatron, megatron_to_hf, split_qkv
    sd = hf_model.state_dict()
    mg = hf_to_megatron(sd, hf_model.config)
    assert mg["decoder.layers.0.self_attention.linear_qkv.weight"].shape == ((4 + 2 * 2) * 32, 64)
    assert mg["decoder.layers.1.mlp.experts.local_experts.3.linear_fc1.weight"].shape == (64, 64)
    back = megatron_to_hf(mg, hf_model.config)
    assert set(back) == set(sd)
    for k in sd:
        assert torch.equal(back[k], sd[k]), k
    # megatron's grouped layout: group g = [q heads 2g, 2g+1 | k head g | v head g]
    q, k, v = (torch.arange(n * 3, dtype=torch.float32).reshape(n, 3) + off for n, off in ((8, 0), (4, 100), (4, 200)))
    qkv = fuse_qkv(q, k, v, n_heads=4, n_kv=2, head_dim=2)
    assert torch.equal(qkv[:4], q[:4]) and torch.equal(qkv[4:6], k[:2]) and torch.equal(qkv[6:8], v[:2])
    assert all(torch.equal(a, b) for a, b in zip(split_qkv(qkv, 4, 2, 2), (q, k, v)))


def test_trainer_weights_round_trip_and_registry(hf_model):
    tr = make_trainer(hf_model)
    assert tr.name == "megatron" and tr.n_moe_layers == 2
    sd, out = hf_model.state_dict(), tr.hf_state_dict()
    assert set(out) == set(sd) and all(torch.equal(out[k], sd[k]) for k in sd)


def test_a_trainer_after_the_process_left_its_group_and_joined_a_new_one(hf_model, batch):
    """Megatron's parallel state outlives the default group it was made in (a group of one destroyed, e.g. by a
    bench that ran ranks in process before): the next trainer rebuilds it rather than ask torch about groups of
    a world that is gone (a CI failure: "Group ... is not registered")."""
    import torch.distributed as dist
    first = make_trainer(hf_model)
    lp, _ = first.logprobs(batch)
    if dist.is_initialized():
        dist.destroy_process_group()
    again = make_trainer(hf_model)
    assert torch.equal(again.logprobs(batch)[0], lp)


def test_logprobs_match_transformers(hf_model, batch):
    tr = make_trainer(hf_model)
    ref_lp, ref_ent = hf_token_logprobs(hf_model, batch)
    lp, ent = tr.logprobs(batch)
    assert lp.shape == ent.shape == ref_lp.shape and lp.dtype == torch.float32 and not lp.requires_grad
    assert max_abs_valid(lp, ref_lp, batch) <= 1e-5
    assert max_abs_valid(ent, ref_ent, batch) <= 1e-5
    assert float(ref_lp.std()) > 0.1           # far from uniform: the comparison means something


def test_router_replay_from_hf_and_from_a_different_model(hf_model, batch):
    tr = make_trainer(hf_model)
    ref_lp, _ = hf_token_logprobs(hf_model, batch)
    hf_routes = hf_record_routes(hf_model, batch)                          # [B, L, 2, 2]
    assert hf_routes.shape == (4, batch["input_ids"].shape[1], 2, 2)
    # megatron's own free routing (RECORD) agrees with HF's on every token
    own = tr.record_routes(batch)
    agreement = float((own.sort(-1).values == hf_routes.sort(-1).values).all(-1).float().mean())
    assert agreement == 1.0
    # replaying HF's routes changes nothing
    lp, _ = tr.logprobs(batch, routes=hf_routes)
    assert max_abs_valid(lp, ref_lp, batch) <= 1e-5

    # routes of a perturbed model: replay really forces other experts
    other = copy.deepcopy(hf_model)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for r in moe_routers(other):
            r.weight.add_(torch.randn(r.weight.shape, generator=g) * 0.5)
    forced = hf_record_routes(other, batch)
    valid = batch["attention_mask"].bool()
    differ = float((forced.sort(-1).values != hf_routes.sort(-1).values).any(-1)[valid].float().mean())
    assert differ > 0.2
    with forced_hf_routes(hf_model, forced):
        ref_forced, _ = hf_token_logprobs(hf_model, batch)
    lp_forced, _ = tr.logprobs(batch, routes=forced)
    assert max_abs_valid(lp_forced, ref_forced, batch) <= 1e-5
    assert max_abs_valid(lp_forced, ref_lp, batch) > 1e-2                # replay did change the experts used

    # -1 = route freely (fill: the current router's own top-k on the replayed hidden state)
    partial = forced.clone()
    partial[:, -3:] = -1
    partial[~valid] = -1
    with forced_hf_routes(hf_model, partial):
        ref_partial, _ = hf_token_logprobs(hf_model, batch)
    lp_partial, _ = tr.logprobs(batch, routes=partial)
    assert max_abs_valid(lp_partial, ref_partial, batch) <= 1e-5
    with pytest.raises(ValueError):
        tr.logprobs(batch, routes=forced[:, :, :1])


def test_router_gets_gradient_under_replay(hf_model, batch):
    """Under replay the router's gradient flows through the replayed experts' weights, and equals HF's."""
    tr = make_trainer(hf_model)
    other = copy.deepcopy(hf_model)
    with torch.no_grad():
        for r in moe_routers(other):
            r.weight.mul_(-1.0)
    forced = hf_record_routes(other, batch)
    mask = batch["completion_mask"][:, 1:].float()
    rank = tr._local                          # the in-process rank: its backward of sum(logp * mask), replayed
    rank.ddp.train()
    rank._run(batch, list(range(batch["input_ids"].shape[0])), forced, 1.0, seed=mask)
    ref = copy.deepcopy(hf_model)
    from compass.lm.policy_forward import token_logprobs
    with forced_hf_routes(ref, forced):
        ref_lp, _ = token_logprobs(ref, batch["input_ids"], batch["attention_mask"])
        (ref_lp * mask).sum().backward()
    for router, hf_router in zip(rank.routers, moe_routers(ref)):
        grad = router.weight.main_grad        # megatron's DDP keeps gradients in its buffer
        assert float(grad.abs().sum()) > 1e-3
        assert torch.allclose(grad, hf_router.weight.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("loss", ["ppo_clip_token_mean", "espo"])
def test_update_matches_torch_reference(hf_model, batch, loss):
    """Same loss, gradient norm and new weights as ``trainer_torch.policy_step`` on the HF model.

    Gradients agree to ~3e-7 absolute; AdamW's first step is ``lr * g / (|g| + eps)``, so an
    element whose gradient is itself ~1e-7 can move differently by up to ~lr: at lr 1e-4 that is a
    handful of the 137k elements, hence max <= 1e-5 and all but 1e-4 of them within 1e-7."""
    from compass.rl.trainer.torch_trainer import policy_step
    cfg = rl_cfg(lr=1e-4, loss={"kind": loss})
    tr = make_trainer(hf_model, lr=1e-4, loss={"kind": loss})
    adv = per_token(torch.tensor([1.0, -0.5, 0.25, -1.0]), batch)
    old_logp, _ = tr.logprobs(batch)
    m = tr.update(batch, adv, old_logp, cfg)
    assert m["updated"] == 1.0 and m["grad_norm"] > 0 and m["routes_replayed"] == 0.0

    ref = copy.deepcopy(hf_model)
    opt = torch.optim.AdamW(ref.parameters(), lr=cfg.trainer.lr, weight_decay=cfg.trainer.weight_decay)
    rm = policy_step(ref, opt, batch, adv, cfg)
    assert abs(m["loss"] - rm["loss"]) < 1e-5 and abs(m["grad_norm"] - rm["grad_norm"]) < 1e-4 * rm["grad_norm"]
    ref_sd, out = ref.state_dict(), tr.hf_state_dict()
    moved = max(float((ref_sd[k] - hf_model.state_dict()[k]).abs().max()) for k in ref_sd)
    assert moved > 0.5 * cfg.trainer.lr                                              # the step did move the weights
    diff = torch.cat([(out[k] - ref_sd[k]).abs().flatten() for k in ref_sd])
    assert float(diff.max()) <= 1e-5, float(diff.max())
    assert float((diff > 1e-7).float().mean()) <= 1e-4


def test_update_matches_torch_trainer_with_replay_and_token_advantages(hf_model, batch):
    """Two steps of the megatron and torch trainers, both replaying a perturbed model's routes, with
    per-token advantages and DAPO clip-higher: same metrics and weights."""
    from compass.rl.trainer.base import TRAINER_BACKENDS
    import compass.rl.trainer.torch_trainer  # noqa: F401
    other = copy.deepcopy(hf_model)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for r in moe_routers(other):
            r.weight.add_(torch.randn(r.weight.shape, generator=g) * 0.5)
    routes = hf_record_routes(other, batch)
    routes[:, -2:] = -1
    clip_higher = {"kind": "ppo_clip_token_mean", "clip_eps_high": 0.28}
    cfg = rl_cfg(lr=1e-4, loss=clip_higher)
    mg = make_trainer(hf_model, lr=1e-4, loss=clip_higher)
    ref = TRAINER_BACKENDS["torch"](copy.deepcopy(hf_model), cfg)
    L1 = batch["input_ids"].shape[1] - 1
    for adv in (torch.linspace(-1, 1, 4).unsqueeze(1) * torch.linspace(0.5, 1.5, L1).unsqueeze(0),
                per_token(torch.tensor([0.7, -0.2, -1.0, 0.4]), batch)):
        old_m, _ = mg.logprobs(batch, routes=routes)
        old_t, _ = ref.logprobs(batch, routes=routes)
        assert max_abs_valid(old_m, old_t, batch) <= 1e-5
        m = mg.update(batch, adv, old_m, cfg, routes=routes)
        r = ref.update(batch, adv, old_t, cfg, routes=routes)
        assert m["updated"] == r["updated"] == 1.0 and m["routes_replayed"] == 1.0
        assert m["token_advantages"] == 1.0                   # the loss took the [B, T] advantages
        for k in ("loss", "entropy", "adv_abs_token_mean", "clip_frac", "approx_kl"):
            assert abs(m[k] - r[k]) <= 1e-5, k
        assert abs(m["grad_norm"] - r["grad_norm"]) <= 1e-4 * r["grad_norm"]
    out, ref_sd = mg.hf_state_dict(), ref.hf_state_dict()
    diff = torch.cat([(out[k] - ref_sd[k]).abs().flatten() for k in ref_sd])
    assert float(diff.max()) <= 2e-5 and float((diff > 1e-7).float().mean()) <= 1e-4
    assert mg.steps == ref.steps == 2


def test_update_edge_cases(hf_model, batch, monkeypatch):
    from compass.rl.algos import losses
    tr = make_trainer(hf_model)
    old_logp, _ = tr.logprobs(batch)
    before = tr.hf_state_dict()
    m0 = tr.update(batch, per_token(torch.zeros(4), batch), old_logp, rl_cfg())          # no signal: no step
    assert m0["updated"] == 0.0 and m0["grad_norm"] == 0.0 and tr.steps == 0
    assert all(torch.equal(before[k], v) for k, v in tr.hf_state_dict().items())
    # a loss that takes one advantage per sequence gets the per-sequence mean of token advantages: it stands in
    # for the configured kind's registry entry (a config can only name a kind it knows)
    seen = []

    def seq_only(logp, old_logp, advantages, mask, *, entropy=None, vocab_size=None, clip_eps=0.2,
                 clip_eps_high=None):
        if advantages.dim() != 1:
            raise ValueError("seq_only: advantages must be [B]")
        seen.append(advantages.clone())
        return losses.ppo_clip_token_mean(logp, old_logp, per_token(advantages, {"completion_mask": mask}, 0),
                                          mask, clip_eps=clip_eps)

    cfg = rl_cfg()
    monkeypatch.setitem(losses.POLICY_LOSSES, cfg.loss.kind, seq_only)
    monkeypatch.setitem(losses.ADVANTAGE_SHAPES, cfg.loss.kind, "completion")   # as it would be registered
    mask = batch["completion_mask"][:, 1:].float()
    adv_tok = torch.randn(mask.shape, generator=torch.Generator().manual_seed(5))
    m = tr.update(batch, adv_tok, old_logp, cfg)
    assert m["token_advantages"] == 0.0 and m["updated"] == 1.0 and tr.steps == 1
    assert torch.allclose(seen[-1], (adv_tok * mask).sum(1) / mask.sum(1))


def test_resume_exact(hf_model, batch):
    cfg = rl_cfg()
    adv1, adv2 = (per_token(torch.tensor(a), batch) for a in ([1.0, -0.5, 0.25, -1.0], [-0.3, 0.8, -1.0, 0.5]))
    routes = hf_record_routes(hf_model, batch)

    def step(tr, adv):
        old, _ = tr.logprobs(batch, routes=routes)
        tr.update(batch, adv, old, cfg, routes=routes)

    a = make_trainer(hf_model)
    step(a, adv1)
    step(a, adv2)
    b = make_trainer(hf_model)
    step(b, adv1)
    state = b.state_dict()
    c = make_trainer(hf_model)
    c.load_state_dict(state)
    assert c.steps == 1
    step(c, adv2)
    sa, sc = a.hf_state_dict(), c.hf_state_dict()
    assert all(torch.equal(sa[k], sc[k]) for k in sa)
    assert any(not torch.equal(sa[k], hf_model.state_dict()[k]) for k in sa)


def test_a_state_of_the_one_process_trainer_before_ranks_is_refused_by_name(hf_model):
    tr = make_trainer(hf_model)
    state = tr.state_dict()
    old = {"model": state["model"], "optimizer": {"state": {}, "param_groups": []}, "steps": 1}
    with pytest.raises(ValueError, match="no gathered Adam moments"):
        tr.load_state_dict(old)
