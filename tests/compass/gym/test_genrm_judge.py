"""The GenRM judge adapter: verdict parsing, better-or-equal reward, malformed counts, position swaps."""
from __future__ import annotations

import pytest

from compass.lm.model_config import ModelConfig
from compass.lm.model_factory import build_model, build_tokenizer, save_checkpoint
from compass.gym.genrm_verdict import judge_prompt
from compass.gym.genrm_judge import GenRMJudge, reward_for


def scripted(answers: dict):
    """A judge whose text for each prompt is given: the adapter's logic, not a model, is under test."""
    return lambda prompts: [answers[p] for p in prompts]


def test_reward_is_one_for_better_or_equal():
    assert (reward_for("A"), reward_for("TIE"), reward_for("B"), reward_for(None)) == (1.0, 1.0, 0.0, 0.0)


def test_verdicts_rewards_and_malformed_counts():
    asks = {judge_prompt("q", f"r{i}", "ref"): text for i, text in enumerate([
        "<type>t</type><rubric>r</rubric><eval>e</eval><answer>A</answer>",
        "<answer>B</answer> then <answer>TIE</answer>",          # the last verdict counts
        "<answer>B</answer>",
        "I think A is better",                                     # no tag: malformed
        "<answer>maybe</answer>",
    ])}
    judge = GenRMJudge(scripted(asks))
    out = judge.judge(["q"] * 5, [f"r{i}" for i in range(5)], ["ref"] * 5)
    assert [j.verdict for j in out] == ["A", "TIE", "B", None, None]
    assert [j.reward for j in out] == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert judge.counters() == {"asked": 5, "malformed": 2, "inconsistent": 0, "malformed_rate": 0.4}


def test_swap_check_needs_both_orders_to_agree():
    texts = {
        judge_prompt("q", "good", "ref"): "<answer>A</answer>", judge_prompt("q", "ref", "good"): "<answer>B</answer>",
        judge_prompt("q", "biased", "ref"): "<answer>A</answer>",
        judge_prompt("q", "ref", "biased"): "<answer>A</answer>",      # prefers whatever is first
        judge_prompt("q", "tie", "ref"): "<answer>TIE</answer>",
        judge_prompt("q", "ref", "tie"): "<answer>TIE</answer>",
        judge_prompt("q", "half", "ref"): "<answer>A</answer>", judge_prompt("q", "ref", "half"): "garbage",
    }
    judge = GenRMJudge(scripted(texts), swap_check=True)
    out = judge.judge(["q"] * 4, ["good", "biased", "tie", "half"], ["ref"] * 4)
    assert [j.reward for j in out] == [1.0, 0.0, 1.0, 0.0]
    assert [j.consistent for j in out] == [True, False, True, None]
    assert judge.counters()["inconsistent"] == 1 and judge.counters()["malformed"] == 1


def test_length_mismatch_is_refused():
    with pytest.raises(ValueError, match="differ in length"):
        GenRMJudge(scripted({})).judge(["q"], [], ["r"])


def test_a_real_checkpoint_judges_through_the_rollout_engine(tmp_path):
    # an untrained tiny model: real generation, whatever it writes is parsed and scored; malformed counted
    tok = build_tokenizer(["<answer>A</answer> <answer>B</answer> <answer>TIE</answer> Judge which"] * 20)
    model = build_model(ModelConfig(hidden_size=32, num_layers=1, head_dim=32, intermediate_size=64,
                                    expert_size=32), tok, seed=0)
    save_checkpoint(model, tok, tmp_path / "judge")
    judge = GenRMJudge.from_checkpoint(str(tmp_path / "judge"), max_new_tokens=8)
    out = judge.judge(["What is 2+2?"] * 3, ["4", "5", "four"], ["4"] * 3)
    assert len(out) == 3
    assert all(j.reward == reward_for(j.verdict) for j in out)
    assert judge.counters()["asked"] == 3
    assert judge.counters()["malformed"] == sum(j.verdict is None for j in out)


def test_a_pair_too_long_for_the_judge_is_malformed_not_a_crash(tmp_path):
    tok = build_tokenizer(["<answer>A</answer> <answer>B</answer> Judge which"] * 20)
    model = build_model(ModelConfig(hidden_size=32, num_layers=1, head_dim=32, intermediate_size=64,
                                    expert_size=32, max_positions=128), tok, seed=0)
    save_checkpoint(model, tok, tmp_path / "judge")
    judge = GenRMJudge.from_checkpoint(str(tmp_path / "judge"), max_new_tokens=8)
    out = judge.judge(["q", "q"], ["4", "word " * 5000], ["4", "4"])
    assert out[1].malformed and out[1].reward == 0.0
    assert judge.counters()["asked"] == 2
