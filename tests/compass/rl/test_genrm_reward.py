"""GenRM-judged rewards in RL: the judge's verdicts are the rewards the update learns from, and the audit
against the rules verifier counts agreement and advantage flips by hand."""
from __future__ import annotations

import json

import pytest
import torch

from compass.gym.genrm_judge import GenRMJudge
from compass.gym.genrm_verdict import verdict_text
from compass.rl.sampling.prompt_data import RLPrompt
from compass.rl.genrm_reward import GenRMReward, advantage_flips

TITLE = json.dumps({"type": "title_rules", "must_keep": ["Nike"], "max_chars": 60})
MATH = json.dumps({"type": "math_exact"})


def by_length(asks: list[str]) -> list[str]:
    """A judge whose verdict is a fixed rule of Response A's length (the generation the adapter parses):
    even -> A (better), odd -> B; a response of length 3 gets no verdict (malformed)."""
    out = []
    for a in asks:
        resp = a.split("[Response A]\n", 1)[1].split("\n[Response B]", 1)[0]
        out.append("garbled" if len(resp) == 3 else verdict_text("A" if len(resp) % 2 == 0 else "B"))
    return out


def test_advantage_flips_by_hand():
    # model advantages +,-,+,-: sample 0 is wrong and pushed up, sample 1 right and pushed down
    assert advantage_flips([1, 0, 1, 0], [0, 1, 1, 0]) == 2
    assert advantage_flips([1, 1, 1, 1], [1, 0, 0, 0]) == 0          # no spread in the model's rewards: nothing flips
    assert advantage_flips([1, 0, 1, 1], [1, 1, 1, 1]) == 1          # an all-correct group: the one pushed down


def test_judged_group_rewards_reasons_and_audit():
    score = GenRMReward(GenRMJudge(by_length))
    p = RLPrompt("t0", "Rewrite: nike RUNNING shoe", "Nike Running Shoe", TITLE, "ecommerce", "title")
    texts = ["Nike Shoes", "Nike", "abc", "shoe"]          # lengths 10, 4, 3, 4 -> A, A, malformed, A
    rewards = score.score_group(p, texts)
    assert [r.score for r in rewards] == [1.0, 1.0, 0.0, 1.0]
    assert [r.reason for r in rewards] == [None, None, "genrm_malformed", None]
    # the rules verifier: keeps "Nike" -> 1 (first two), else 0
    rules = [float(score.rules(TITLE, t, p.reference).score) for t in texts]
    assert rules[:2] == [1.0, 1.0] and rules[2:] == [0.0, 0.0]
    c = score.counters()
    assert c["genrm_judged_samples"] == 4 and c["genrm_malformed"] == 1
    assert c["genrm_rules_agreement"] == pytest.approx(3 / 4)       # only "shoe" disagrees
    assert c["genrm_advantage_flips"] == advantage_flips([1, 1, 0, 1], rules) == 1
    # an unjudged prompt is the gym verifier's
    m = RLPrompt("m0", "2+2=?", "4", MATH, "math", "arith")
    assert [r.score for r in score.score_group(m, ["4", "5"])] == [1.0, 0.0]
    assert score.counters()["genrm_judged_samples"] == 4


def test_the_judges_rewards_reach_the_update(monkeypatch):
    """Real engine, rollouts and update: every judged sample's reward is the judge's verdict, its advantage is
    computed from those rewards, and the policy moves."""
    from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
    from compass.rl.config import RLConfig
    from compass.rl.engine import train
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    tok = build_tokenizer("")
    model = build_model(ModelConfig(), tok, seed=2)
    before = [p.detach().clone() for p in model.parameters()]
    prompts = [RLPrompt(f"t{i}", f"Rewrite title {i}: nike shoe", "Nike Shoe", TITLE, "ecommerce", "title")
               for i in range(3)]
    score = GenRMReward(GenRMJudge(by_length))
    cfg = RLConfig(steps=2, sampling={"prompts_per_step": 3, "group_size": 4}, rollout={"max_new_tokens": 8})
    res = train(model, tok, prompts, cfg, score_fn=score)
    expect = [1.0 if len(r["response"]) % 2 == 0 and len(r["response"]) != 3 else 0.0 for r in res.rollouts]
    assert [r["reward"] for r in res.rollouts] == expect
    assert {r["reward_reason"] for r in res.rollouts if r["reward"] == 0} <= {"genrm_worse", "genrm_malformed"}
    # GRPO advantages from the judge's rewards: within a group, sign(advantage) = sign(reward - group mean)
    for step in (0, 1):
        for pid in {r["prompt_id"] for r in res.rollouts}:
            g = [r for r in res.rollouts if r["step"] == step and r["prompt_id"] == pid]
            mean = sum(r["reward"] for r in g) / len(g)
            for r in g:
                assert (r["advantage"] > 0) == (r["reward"] > mean) and (r["advantage"] < 0) == (r["reward"] < mean)
    assert any(r["advantage"] != 0 for r in res.rollouts), "the rule should give some group a spread"
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert score.counters()["genrm_judged_samples"] == len(res.rollouts)
