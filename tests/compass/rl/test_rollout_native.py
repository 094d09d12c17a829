"""The ``native`` rollout backend (compass/rl/rollout/native.py) against transformers on the same weights."""
from __future__ import annotations

import contextlib
import copy

import numpy as np
import pytest
import torch

from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
from compass.rl.trainer.batch import build_batch, routes_batch
from compass.rl.engine import resolve_rollout_backend
from compass.lm.policy_forward import token_logprobs
from compass.rl.rollout.base import SamplingParams
from compass.rl.rollout.native import NativeRollout, _sample, decode, pack, unsupported
from compass.rl.router_replay import record_routes

PROMPTS = ["What is 12 + 7?", "Name a colour.", "Write the word tea three times, please."]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("")


def prefixes(tok):
    from compass.lm.chat import chat_prefix
    return [tok(chat_prefix(tok, p), add_special_tokens=False)["input_ids"] for p in PROMPTS]


def eos_heavy(model, tok, weight: float = 6.0):
    """Make eos likely where one hidden feature is large, so rows end at many different steps (early exit)."""
    with torch.no_grad():
        model.lm_head.weight[tok.eos_token_id] = 0.0
        model.lm_head.weight[tok.eos_token_id, 0] = weight
    return model


def trainer_view(model, pre, groups, n):
    """The trainer's full forward on the sampled sequences: log-probs, entropies, free routes, batch."""
    comps = [c for g in groups for c in g]
    prefs = [pre[i // n] for i in range(len(comps))]
    batch = build_batch(prefs, [c.ids for c in comps], 0)
    model.eval()
    moe = getattr(model.config, "num_experts", 0) > 0
    with torch.no_grad(), (record_routes(model) if moe else contextlib.nullcontext()) as rec:
        logp, ent = token_logprobs(model, batch["input_ids"], batch["attention_mask"])
    return comps, prefs, batch, logp, ent, rec.routes() if moe else None


def test_log_probs_entropies_and_routes_match_the_trainers_forward(tok):
    model = eos_heavy(build_model(ModelConfig(), tok, seed=3), tok)
    pre = prefixes(tok)
    n = 4
    groups = NativeRollout(model, tok, record_routes=True).generate(pre, n, SamplingParams(max_new_tokens=20, seed=5))
    assert [len(g) for g in groups] == [n] * len(pre)
    comps, prefs, batch, logp, ent, free = trainer_view(model, pre, groups, n)
    lengths = {len(c.ids) for c in comps}
    assert len(lengths) > 2 and any(c.finished for c in comps) and not all(c.finished for c in comps)
    for i, c in enumerate(comps):
        s = len(prefs[i]) - 1
        assert np.allclose(c.logprobs, logp[i, s:s + len(c.ids)].numpy(), atol=2e-5), i
        assert np.allclose(c.entropies, ent[i, s:s + len(c.ids)].numpy(), atol=2e-5), i
        assert c.finished == (c.ids[-1] == tok.eos_token_id)
        assert tok.eos_token_id not in c.ids[:-1]
        assert c.routes.shape == (len(prefs[i]) + len(c.ids), model.config.num_hidden_layers,
                                  model.config.num_experts_per_tok)
    # routes: every position the decoder ran (all but each row's last token) as the full forward routes it
    rb = routes_batch(prefs, comps, batch["input_ids"].shape[1])
    ran = rb[..., 0, 0] >= 0
    for i, (p, c) in enumerate(zip(prefs, comps)):     # recorded up to the last token, which may not have run
        assert bool(ran[i, :len(p) + len(c.ids) - 1].all()) and not bool(ran[i, len(p) + len(c.ids):].any())
    same = (torch.sort(rb, -1).values == torch.sort(free.long(), -1).values).all(-1).all(-1)
    # >= 0.99, not 1: an fp32 near-tie can round apart between the incremental and the full forward's
    # matmul shapes on some CPU kernels; a misaligned position would agree far less often
    assert float(same[ran].float().mean()) >= 0.99


def test_same_seed_same_samples_and_early_exit_changes_nothing(tok):
    model = eos_heavy(build_model(ModelConfig(), tok, seed=4), tok)
    w = pack(model)
    pre = prefixes(tok)
    sp = SamplingParams(max_new_tokens=16, seed=11)
    a = decode(w, pre, 3, sp, eos=tok.eos_token_id, record_routes=True, compact_at=0.0)      # drop rows at once
    b = decode(w, pre, 3, sp, eos=tok.eos_token_id, record_routes=True, compact_at=2.0)      # never drop rows
    c = decode(w, pre, 3, SamplingParams(max_new_tokens=16, seed=12), eos=tok.eos_token_id, record_routes=False)
    assert [r["ids"] for r in a] == [r["ids"] for r in b]
    assert len({len(r["ids"]) for r in a}) > 2                                  # rows did end at different steps
    for ra, rb in zip(a, b):
        assert np.allclose(ra["logprobs"], rb["logprobs"], atol=1e-5)
        # equal routes, but for the eos token itself: a dropped row never runs it, a kept one does
        assert np.array_equal(ra["routes"][:-1], rb["routes"][:-1])
    assert [r["ids"] for r in a] != [r["ids"] for r in c] and c[0]["routes"] is None


def test_inverse_cdf_sampler_draws_the_distribution():
    p = torch.tensor([[0.5, 0.1, 0.0, 0.3, 0.1]]).repeat(40_000, 1)
    draws = _sample(p, torch.rand(40_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    freq = torch.bincount(draws, minlength=5).double() / 40_000
    assert freq[2] == 0
    assert torch.allclose(freq, p[0].double(), atol=0.01), freq


def test_sync_weights_of_a_copy_and_sharing_the_trainers_model(tok):
    model = build_model(ModelConfig(), tok, seed=5)
    pre = prefixes(tok)[:2]
    sp = SamplingParams(max_new_tokens=10, seed=1)
    copy_ro = NativeRollout(model, tok, share=False)
    shared = NativeRollout(model, tok, share=True)
    assert copy_ro.model is not model and shared.model is model
    with torch.no_grad():
        for prm in model.parameters():
            prm.add_(torch.randn_like(prm) * 0.02)
    stale = copy_ro.generate(pre, 2, sp)
    copy_ro.sync_weights({k: v.detach().clone() for k, v in model.state_dict().items()})
    for ro in (copy_ro, shared):               # both now sample from the perturbed weights
        groups = ro.generate(pre, 2, sp)
        comps, prefs, _, logp, _, _ = trainer_view(model, pre, groups, 2)
        for i, c in enumerate(comps):
            s = len(prefs[i]) - 1
            assert np.allclose(c.logprobs, logp[i, s:s + len(c.ids)].numpy(), atol=2e-5)
    comps, prefs, _, logp, _, _ = trainer_view(model, pre, stale, 2)
    assert max(float(np.abs(c.logprobs - logp[i, len(prefs[i]) - 1:len(prefs[i]) - 1 + len(c.ids)].numpy()).max())
               for i, c in enumerate(comps)) > 1e-3


def test_dense_qwen3_and_a_bf16_copy(tok):
    dense = build_model(ModelConfig(arch="qwen3"), tok, seed=6)
    pre = prefixes(tok)
    groups = NativeRollout(dense, tok, record_routes=True).generate(pre, 2, SamplingParams(max_new_tokens=8, seed=2))
    comps, prefs, _, logp, _, _ = trainer_view(dense, pre, groups, 2)
    assert all(c.routes is None for c in comps)
    for i, c in enumerate(comps):
        s = len(prefs[i]) - 1
        assert np.allclose(c.logprobs, logp[i, s:s + len(c.ids)].numpy(), atol=2e-5)
    moe = build_model(ModelConfig(), tok, seed=6)
    bf = NativeRollout(moe, tok, dtype="bfloat16", record_routes=True)
    assert next(bf.model.parameters()).dtype == torch.bfloat16
    groups = bf.generate(pre, 2, SamplingParams(max_new_tokens=8, seed=2))
    comps, prefs, _, logp, _, _ = trainer_view(moe, pre, groups, 2)
    gaps = np.concatenate([np.abs(c.logprobs - logp[i, len(prefs[i]) - 1:len(prefs[i]) - 1 + len(c.ids)].numpy())
                           for i, c in enumerate(comps)])
    assert 1e-5 < gaps.mean() < 0.05          # bf16 rounding: visible, small


def test_unsupported_models_are_named_and_auto_falls_back_to_hf(tok):
    model = build_model(ModelConfig(), tok, seed=7)
    assert unsupported(model.config) is None and resolve_rollout_backend("auto", model) == "native"
    odd = copy.deepcopy(model)
    odd.config.attention_bias = True
    assert unsupported(odd.config) == "attention_bias=True"
    assert resolve_rollout_backend("auto", odd) == "hf" and resolve_rollout_backend("native", odd) == "native"
    with pytest.raises(ValueError, match="attention_bias=True.*use rollout.backend 'hf'"):
        NativeRollout(odd, tok)
    odd.config.model_type = "llama"
    assert "model_type 'llama'" in unsupported(odd.config)
    with pytest.raises(ValueError, match="dtype must be one of"):
        NativeRollout(model, tok, dtype="int8")


def test_shared_prefix_training_forward_matches_transformers_with_gradients(tok):
    """token_logprobs(only=...) runs each distinct prompt once (qwen3_native.shared_prefix_hidden):
    same log-probs, entropies and parameter gradients as transformers' forward of the padded batch, also when a
    completion holds the pad token as a sampled token (its embedding row gets no gradient in either: the row of
    an ``nn.Embedding``'s ``padding_idx``; a sampled pad once put 99.9% of an RL step's gradient norm there)."""
    import compass.lm.policy_forward as pf
    model = build_model(ModelConfig(), tok, seed=9)
    g = torch.Generator().manual_seed(0)
    lo = len(tok.all_special_ids)
    pre = [torch.randint(lo, len(tok), (k,), generator=g).tolist() for k in (7, 3, 11)]
    comps = [torch.randint(lo, len(tok), (k,), generator=g).tolist() for k in (1, 5, 9, 4, 2, 8)]
    comps[2][3] = tok.pad_token_id             # sampled mid-completion: the next tokens read its (zero) embedding
    prefs = [pre[i // 2] for i in range(6)]
    batch = build_batch(prefs, comps, tok.pad_token_id)
    only = batch["completion_mask"][:, 1:]
    model.train()
    assert model.get_input_embeddings().padding_idx == tok.pad_token_id

    def run(shared: bool):
        model.zero_grad()
        if shared:
            logp, ent = token_logprobs(model, batch["input_ids"], batch["attention_mask"], 0.7, only=only)
        else:
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
            logp, ent = pf._logp_entropy(logits.float(), batch["input_ids"][:, 1:], 0.7)
            logp, ent = logp * only, ent * only
        (logp.sum() + 0.3 * ent.sum()).backward()
        return logp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    ref, fast = run(False), run(True)
    assert pf._shared_prefix_logprobs(model, batch["input_ids"], only, 0.7) is not None      # the fast path ran
    assert torch.allclose(ref[0], fast[0], atol=1e-5) and torch.allclose(ref[1], fast[1], atol=1e-5)
    assert (fast[0][~only] == 0).all()
    for name, grad in ref[2].items():
        assert torch.allclose(grad, fast[2][name], atol=1e-5, rtol=1e-4), name
    # hooks on the model (route recording / replay) send the call through transformers instead
    with record_routes(model):
        assert pf._shared_prefix_logprobs(model, batch["input_ids"], only, 0.7) is None


def test_rows_that_fit_count_the_kv_cache_and_the_logits():
    """The GPU's decode batch is sized from free memory: a row costs its KV cache over the full width and its
    step's fp32 logits; the count scales with the memory and never drops below one row."""
    from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
    from compass.rl.rollout.native import pack, row_bytes, rows_that_fit
    tok = build_tokenizer("")
    cfg = ModelConfig(arch="qwen3", num_layers=3, num_kv_heads=1, head_dim=32)
    w = pack(build_model(cfg, tok, seed=0))
    vocab = w.lm_head.shape[1]
    assert row_bytes(w, 100) == 2 * 3 * 1 * 32 * 100 * 4 + 12 * vocab
    assert rows_that_fit(w, 100, 10 * row_bytes(w, 100), fraction=1.0) == 10
    assert rows_that_fit(w, 100, 1000 * row_bytes(w, 100)) == 800
    assert rows_that_fit(w, 100, 1) == 1
