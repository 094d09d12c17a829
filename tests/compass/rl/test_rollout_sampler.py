"""Evaluation through the rollout backends: greedy is the same tokens whichever backend, in-process or on
Ray workers, and vLLM's greedy picks the model's most likely token at every step."""
from __future__ import annotations

import pytest

from compass.lm.chat import sample
from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
from compass.rl.rollout.sampler import open_sampler

pytestmark = pytest.mark.ray      # starts a local Ray (tests/conftest.py)

PROMPTS = ["2+2=?", "Name a colour.", "Rewrite: nike RUNNING shoe", "7*6=?"]


@pytest.fixture(scope="module")
def model_tok():
    tok = build_tokenizer("")
    cfg = ModelConfig(num_experts=4, experts_per_token=2, expert_size=32)
    return build_model(cfg, tok, seed=5).eval(), tok


def test_native_greedy_matches_transformers_greedy(model_tok):
    model, tok = model_tok
    with open_sampler("native", model, tok) as native:
        a = native(model, tok, PROMPTS, n=1, max_new_tokens=12, temperature=0.0, seed=0)
    b = sample(model, tok, PROMPTS, n=1, max_new_tokens=12, temperature=0.0, seed=0)
    assert [x[0]["ids"] for x in a] == [x[0]["ids"] for x in b]
    assert [x[0]["text"] for x in a] == [x[0]["text"] for x in b]
    assert native.backend == "native"
    with open_sampler("auto", model, tok) as auto:
        assert auto.backend == "native"
    with open_sampler("hf", model, tok) as hf:
        assert hf is sample


def test_greedy_on_ray_workers_is_the_in_process_greedy(model_tok):
    """Two actors, each with a copy of the checkpoint and half the prompts: native and hf (transformers'
    generate inside the rollout backend) both give the tokens of in-process greedy."""
    model, tok = model_tok
    ref = sample(model, tok, PROMPTS, n=1, max_new_tokens=12, temperature=0.0, seed=0)
    for backend in ("native", "hf"):
        with open_sampler(backend, model, tok, workers=2) as gen:
            got = gen(model, tok, PROMPTS, n=1, max_new_tokens=12, temperature=0.0, seed=0)
            assert gen.workers == 2 and gen.backend == backend
        assert [x[0]["ids"] for x in got] == [x[0]["ids"] for x in ref], backend
        assert [x[0]["text"] for x in got] == [x[0]["text"] for x in ref], backend


def test_native_sampling_gives_n_seeded_samples(model_tok):
    model, tok = model_tok
    with open_sampler("native", model, tok) as native:
        a = native(model, tok, PROMPTS[:2], n=3, max_new_tokens=8, temperature=1.0, seed=7)
        assert [len(g) for g in a] == [3, 3]
        assert a == native(model, tok, PROMPTS[:2], n=3, max_new_tokens=8, temperature=1.0, seed=7)
    assert all(0 < len(c["ids"]) <= 8 for g in a for c in g)


def test_unknown_backend_is_a_clear_error(model_tok):
    with pytest.raises(ValueError, match="evaluation backend must be one of auto, native, hf, vllm"):
        with open_sampler("sglang", *model_tok):
            pass
    with pytest.raises(ValueError, match="workers must be >= 0"):
        with open_sampler("native", *model_tok, workers=-1):
            pass
