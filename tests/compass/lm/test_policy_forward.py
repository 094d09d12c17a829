"""Chunked LM-head log-probs (``compass.lm.policy_forward.head_logp_entropy``): the same values and
gradients as the whole ``[N, V]`` computation, with never more than a chunk of logits at once."""
from __future__ import annotations

import pytest
import torch

from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
from compass.lm.policy_forward import _logp_entropy, head_logp_entropy, token_logprobs


def _head(n: int = 37, hidden: int = 16, vocab: int = 50, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(hidden, vocab, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(vocab, hidden, generator=g))
    h = torch.randn(n, hidden, generator=g, requires_grad=True)
    t = torch.randint(0, vocab, (n,), generator=g)
    return head, h, t


def _shapes_seen(head):
    seen: list[tuple[int, ...]] = []
    head.register_forward_hook(lambda m, i, o: seen.append(tuple(o.shape)))
    return seen


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunks_equal_the_whole_computation_values_and_gradients(temperature):
    head, h, t = _head()
    lp_full, ent_full = _logp_entropy(head(h).float(), t, temperature)
    (lp_full.sum() + 0.3 * ent_full.sum()).backward()
    g_h, g_w = h.grad.clone(), head.weight.grad.clone()
    h.grad, head.weight.grad = None, None

    seen = _shapes_seen(head)
    chunk_bytes = 5 * 50 * 4                               # 5 rows of a 50-token vocabulary per chunk
    lp, ent = head_logp_entropy(head, h, t, temperature, chunk_bytes=chunk_bytes)
    (lp.sum() + 0.3 * ent.sum()).backward()
    assert lp.shape == ent.shape == (37,) and lp.dtype == ent.dtype == torch.float32
    torch.testing.assert_close(lp, lp_full, rtol=0, atol=1e-5)
    torch.testing.assert_close(ent, ent_full, rtol=0, atol=1e-5)
    torch.testing.assert_close(h.grad, g_h, rtol=0, atol=1e-5)
    torch.testing.assert_close(head.weight.grad, g_w, rtol=0, atol=1e-5)
    # forward: 8 chunks of <= 5 rows; backward recomputes each (checkpointed), never all 37 rows at once
    assert max(s[0] for s in seen) == 5 and len(seen) == 2 * 8
    assert sum(s[0] for s in seen[:8]) == 37


def test_one_chunk_is_the_unchunked_computation_bit_for_bit():
    head, h, t = _head()
    seen = _shapes_seen(head)
    with torch.no_grad():
        lp, ent = head_logp_entropy(head, h, t, 1.0)        # the default budget holds all 37 rows
        lp_full, ent_full = _logp_entropy(head(h).float(), t, 1.0)
    assert torch.equal(lp, lp_full) and torch.equal(ent, ent_full)
    assert seen[0] == (37, 50)


def test_without_gradients_no_chunk_is_checkpointed():
    head, h, t = _head()
    seen = _shapes_seen(head)
    with torch.no_grad():
        lp, _ = head_logp_entropy(head, h, t, 1.0, chunk_bytes=10 * 50 * 4)
    assert not lp.requires_grad and [s[0] for s in seen] == [10, 10, 10, 7]


def test_token_logprobs_of_a_policy_are_the_same_chunked_or_not(monkeypatch):
    """Through the trainer's entry point, on the tiny MoE policy: the completion positions' log-probs and
    entropies with 3-row chunks equal the one-chunk run's."""
    import compass.lm.policy_forward as pf
    tok = build_tokenizer("")
    model = build_model(ModelConfig(), tok, seed=3)
    rows = [tok.encode("1+1=? think 2, so 2"), tok.encode("7*6=? think 42 done")]
    ids = torch.tensor([r[:min(map(len, rows))] for r in rows])
    mask = torch.ones_like(ids)
    only = torch.zeros(ids.shape[0], ids.shape[1] - 1, dtype=torch.bool)
    only[:, 4:] = True
    whole = token_logprobs(model, ids, mask, 1.0, only=only)
    monkeypatch.setattr(pf, "LOGITS_CHUNK_BYTES", 3 * 4 * model.lm_head.weight.shape[0])    # 3 rows a chunk
    seen = _shapes_seen(model.lm_head)
    chunked = token_logprobs(model, ids, mask, 1.0, only=only)
    assert seen and max(s[0] for s in seen) == 3
    for a, b in zip(chunked, whole):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
        assert bool((a[~only] == 0).all())
