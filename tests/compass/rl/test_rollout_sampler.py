"""Evaluation through the rollout backends: the native decoder's greedy equals transformers' greedy."""
from __future__ import annotations

import pytest

from compass.lm.chat import sample
from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
from compass.rl.rollout_sampler import sampler

PROMPTS = ["2+2=?", "Name a colour.", "Rewrite: nike RUNNING shoe", "7*6=?"]


@pytest.fixture(scope="module")
def model_tok():
    tok = build_tokenizer("")
    cfg = ModelConfig(num_experts=4, experts_per_token=2, expert_size=32)
    return build_model(cfg, tok, seed=5).eval(), tok


def test_native_greedy_matches_transformers_greedy(model_tok):
    model, tok = model_tok
    native = sampler("native", model, tok)
    a = native(model, tok, PROMPTS, n=1, max_new_tokens=12, temperature=0.0, seed=0)
    b = sample(model, tok, PROMPTS, n=1, max_new_tokens=12, temperature=0.0, seed=0)
    assert [x[0]["ids"] for x in a] == [x[0]["ids"] for x in b]
    assert [x[0]["text"] for x in a] == [x[0]["text"] for x in b]
    assert native.backend == "native" and sampler("auto", model, tok).backend == "native"
    assert sampler("hf", model, tok) is sample


def test_native_sampling_gives_n_seeded_samples(model_tok):
    model, tok = model_tok
    native = sampler("native", model, tok)
    a = native(model, tok, PROMPTS[:2], n=3, max_new_tokens=8, temperature=1.0, seed=7)
    assert [len(g) for g in a] == [3, 3]
    assert a == native(model, tok, PROMPTS[:2], n=3, max_new_tokens=8, temperature=1.0, seed=7)
    assert all(0 < len(c["ids"]) <= 8 for g in a for c in g)


def test_unknown_backend_is_a_clear_error(model_tok):
    with pytest.raises(ValueError, match="evaluation backend must be one of auto, native, hf"):
        sampler("vllm", *model_tok)
