"""Samples streamed as they finish (paper §3.2.2), per-prompt budgets, micro-batches, and scoring on arrival."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from compass.lm.model_factory import ModelConfig, build_model
from compass.rl.sampling.prompt_data import RLPrompt
from compass.rl.rollout.base import SamplingParams
from compass.rl.rollout.native import NativeRollout, decode, decode_rows, pack
from compass.rl.rollout.scored import GroupJudge, rollout_and_score
from tests.compass.rl.test_rollout_native import eos_heavy, prefixes, tok  # noqa: F401


@pytest.fixture(scope="module")
def model(tok):
    return eos_heavy(build_model(ModelConfig(), tok, seed=3), tok)


def test_rows_stream_each_once_and_equal_the_whole_decode(model, tok):
    w, ids = pack(model), prefixes(tok)
    sp = SamplingParams(max_new_tokens=24, seed=5)
    whole = decode(w, ids, 3, sp, eos=tok.eos_token_id, record_routes=False)
    seen, batches = {}, 0
    for done in decode_rows(w, ids, 3, sp, eos=tok.eos_token_id, record_routes=False):
        batches += 1
        for b, row in done:
            assert b not in seen
            seen[b] = row
    assert sorted(seen) == list(range(len(ids) * 3))
    assert batches > 1                                      # rows ended at different steps and came apart
    for b, row in enumerate(whole):
        assert seen[b]["ids"] == row["ids"]
        np.testing.assert_array_equal(seen[b]["logprobs"], row["logprobs"])


def test_budgets_cut_each_prompts_rows(model, tok):
    ids = prefixes(tok)
    rows = decode(pack(model), ids, 2, SamplingParams(max_new_tokens=30, seed=1, budgets=(3, 30, 1)),
                  eos=-1, record_routes=False)                           # eos never: every row runs to its budget
    assert [len(r["ids"]) for r in rows] == [3, 3, 30, 30, 1, 1]
    with pytest.raises(ValueError, match="budgets has 2 entries for 3 prompts"):
        decode(pack(model), ids, 2, SamplingParams(budgets=(3, 4)), eos=-1, record_routes=False)


def test_micro_batches_sample_every_row_and_keep_one_batch_results(model, tok):
    ids = prefixes(tok)
    sp = SamplingParams(max_new_tokens=12, seed=2)
    one = NativeRollout(model, tok).generate(ids, 2, sp)
    big = NativeRollout(model, tok, max_batch_rows=64).generate(ids, 2, sp)       # all rows fit: one batch
    assert [[c.ids for c in g] for g in big] == [[c.ids for c in g] for g in one]
    small = NativeRollout(model, tok, max_batch_rows=2).generate(ids, 2, sp)      # one prompt per batch
    assert all(len(g) == 2 and all(c is not None and c.text is not None for c in g) for g in small)
    with pytest.raises(ValueError, match="max_batch_rows"):
        NativeRollout(model, tok, max_batch_rows=0)


class _Judge(GroupJudge):
    """A batched scorer (the GenRM judge's interface): one call per whole group."""

    def __init__(self):
        self.calls = []

    def score_group(self, prompt, texts):
        self.calls.append(len(texts))
        return [float(len(t) % 2) for t in texts]


def test_scored_on_arrival_equals_scored_after(model, tok):
    ids = prefixes(tok)
    v = json.dumps({"type": "test"})
    prompts = [RLPrompt(f"p{i}", "x", "x", v, "math", "a") for i in range(len(ids))]
    score = lambda verifier, response, ref: float(len(response) % 3 == 0)          # noqa: E731
    sp = SamplingParams(max_new_tokens=16, seed=4)
    be = NativeRollout(model, tok)
    after = be.generate(ids, 3, sp)
    want = torch.tensor([[score(None, c.text, None) for c in g] for g in after])
    out = rollout_and_score(be, prompts, ids, 3, sp, score, None)
    assert [[c.ids for c in g] for g in out.groups] == [[c.ids for c in g] for g in after]
    assert torch.equal(out.rewards, want) and out.failures == 0
    assert out.reward_exposed_s == pytest.approx(out.scoring_inline_s + out.reward_tail_s)
    judge = _Judge()
    out = rollout_and_score(be, prompts, ids, 3, sp, judge, None)
    assert judge.calls == [3, 3, 3] and out.rewards.shape == (3, 3)
    # undecoded samples (detokenize=False) are decoded before scoring, to the backend's own text
    raw = NativeRollout(model, tok, detokenize=False)
    out = rollout_and_score(raw, prompts, ids, 3, sp, score, None, tok=tok)
    assert [[c.text for c in g] for g in out.groups] == [[c.text for c in g] for g in after]
    # a predicted order (longest first) changes which row draws which number, not what comes back where
    out = rollout_and_score(be, prompts, ids, 3, sp, score, None, work=[1.0, 5.0, 3.0])
    assert all(len(g) == 3 for g in out.groups)


def test_any_split_samples_the_same_completions(model, tok):
    """Counter-based draws per (seed, stream): one batch, two halves, a reversed order and micro-batches all
    give every (prompt, sample) the same completion."""
    ids = prefixes(tok)
    be = NativeRollout(model, tok)
    sp = SamplingParams(max_new_tokens=14, seed=9)
    whole = [[c.ids for c in g] for g in be.generate(ids, 2, sp)]
    a = be.generate(ids[:1], 2, SamplingParams(max_new_tokens=14, seed=9, streams=(0,)))
    b = be.generate(ids[1:], 2, SamplingParams(max_new_tokens=14, seed=9, streams=(2, 4)))
    assert [[c.ids for c in g] for g in a + b] == whole
    rev = be.generate(ids[::-1], 2, SamplingParams(max_new_tokens=14, seed=9, streams=(4, 2, 0)))
    assert [[c.ids for c in g] for g in rev[::-1]] == whole
    micro = NativeRollout(model, tok, max_batch_rows=2).generate(ids, 2, sp)
    assert [[c.ids for c in g] for g in micro] == whole
    one = be.generate([ids[1]], 1, SamplingParams(max_new_tokens=14, seed=9, streams=(3,)))   # sample 1 of prompt 1
    assert one[0][0].ids == whole[1][1]
    assert [[c.ids for c in g] for g in be.generate(ids, 2, SamplingParams(max_new_tokens=14, seed=10))] != whole


@pytest.mark.parametrize("rollout, message", [
    ({"backend": {"kind": "hf"}, "max_new_tokens_by_task": {"a": 3}}, "max_new_tokens_by_task needs the native backend"),
    ({"backend": {"kind": "vllm"}, "detokenize": "controller"}, "rollout.detokenize 'controller' needs the hf or native"),
])
def test_backend_only_settings_refused_before_anything_starts(model, tok, rollout, message):
    from compass.rl.config import RLConfig
    from compass.rl.engine import train
    with pytest.raises(ValueError, match=message):
        train(model, tok, [], RLConfig(rollout=rollout))
