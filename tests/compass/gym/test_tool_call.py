"""Tool-use reward, paper eq. (4)-(10), against hand-computed values."""
from __future__ import annotations

import json

import pytest

from compass.gym.score import score
from compass.gym.rows import score_row
from compass.gym.verifiers.tool_call import correctness, format_ok, predicted_calls, tool_reward

GW = {"name": "get_weather", "arguments": {"city": "Paris"}}
CC = {"name": "convert_currency", "arguments": {"amount": 5, "from": "USD", "to": "EUR"}}
GOLD = [GW, CC]                      # S_max = 1 + 2 + (1 + 3) = 7   (eq. 9)


def block(call: dict) -> str:
    return f"<tool_call>{json.dumps(call)}</tool_call>"


def with_args(call: dict, **args) -> dict:
    return {"name": call["name"], "arguments": {**call["arguments"], **args}}


W, C = block(GW), block(CC)


@pytest.mark.parametrize("pred,r_name,r_param,r_value,r_correct", [
    ([GW, CC], 1, 2, 4, 3.0),                                   # R_max = 7 = S_max
    ([CC, GW], 1, 2, 4, 3.0),                                   # order does not matter
    ([with_args(GW, city="Rome"), CC], 1, 2, 3, 6 * 6 / 7 - 3),  # one wrong value: 15/7
    ([with_args(CC, amount="5"), GW], 1, 2, 3, 6 * 6 / 7 - 3),  # "5" is not 5
    ([GW], 0.5, 1, 1, 6 * 2.5 / 7 - 3),                         # a missing call: -6/7
    ([GW, CC, GW], 1, 2, 4, 3.0),                               # a repeated call costs nothing (names equal)
    ([GW, CC, {"name": "get_time", "arguments": {}}], 2 / 3, 2, 4, 6 * (2 / 3 + 6) / 7 - 3),  # 19/7
    ([], 0, 0, 0, -3.0),                                        # nothing called
])
def test_correctness_against_hand_computed_values(pred, r_name, r_param, r_value, r_correct):
    r = correctness(pred, GOLD)
    assert r["S_max"] == 7
    assert r["r_name"] == pytest.approx(r_name)
    assert r["r_param"] == pytest.approx(r_param)
    assert r["r_value"] == pytest.approx(r_value)
    assert r["R_correct"] == pytest.approx(r_correct)


def test_partial_key_overlap():
    gold = [{"name": "f", "arguments": {"a": 1, "b": 2}}]
    pred = [{"name": "f", "arguments": {"a": 1, "c": 3}}]
    r = correctness(pred, gold)
    # r_name 1, key Jaccard |{a}|/|{a,b,c}| = 1/3, one value; S_max = 1 + 1 + 2 = 4
    assert r["R_correct"] == pytest.approx(6 * (1 + 1 / 3 + 1) / 4 - 3)       # 0.5


def test_optimal_assignment_beats_greedy_order():
    gold = [{"name": "search", "arguments": {"q": "a"}}, {"name": "search", "arguments": {"q": "b"}}]
    pred = list(reversed(gold))
    r = correctness(pred, gold)
    assert r["matching"] == [(0, 1), (1, 0)]
    assert r["r_value"] == 2 and r["R_correct"] == pytest.approx(3.0)


def test_assignment_maximises_the_total_where_greedy_does_not():
    # values: g0-p0 2, g0-p1 1, g1-p0 2, g1-p1 0. Gold-order greedy takes g0->p0, then g1->p1: 2 values;
    # the optimum g0->p1, g1->p0 has 3
    gold = [{"name": "f", "arguments": {"a": 1, "b": 2, "c": 0}}, {"name": "f", "arguments": {"a": 5, "b": 2, "c": 9}}]
    pred = [{"name": "f", "arguments": {"a": 1, "b": 2, "c": 9}}, {"name": "f", "arguments": {"a": 1, "b": 7, "c": 7}}]
    r = correctness(pred, gold)
    assert r["matching"] == [(0, 1), (1, 0)]
    assert r["r_value"] == 3 and r["r_param"] == 2
    assert r["R_correct"] == pytest.approx(6 * (1 + 2 + 3) / (1 + 2 + 6) - 3)      # 1.0


def test_only_calls_of_the_same_tool_are_matched():
    # the right arguments under the wrong (here destructive) tool earn nothing beyond eq. (6)
    r = correctness([{"name": "delete_account", "arguments": {"user_id": 7}}],
                    [{"name": "get_user", "arguments": {"user_id": 7}}])
    assert (r["r_name"], r["r_param"], r["r_value"], r["matching"]) == (0, 0, 0, [])
    assert r["R_correct"] == -3.0
    # with one right and one wrong tool, only the right one is paired
    r = correctness([GW, {"name": "convert_money", "arguments": CC["arguments"]}], GOLD)
    assert r["matching"] == [(0, 0)] and r["r_name"] == pytest.approx(1 / 3)
    assert r["R_correct"] == pytest.approx(6 * (1 / 3 + 1 + 1) / 7 - 3)


def test_empty_turns():
    assert correctness([], [])["R_correct"] == 3.0            # no call expected, none made
    assert correctness([GW], [])["R_correct"] == -3.0         # a spurious call
    assert correctness([{"name": "f", "arguments": {}}], [{"name": "f", "arguments": {}}])["R_correct"] == 3.0


def test_values_are_typed_json():
    gold = [{"name": "f", "arguments": {"a": True, "b": 1, "c": [1, {"d": "x"}]}}]
    same = [{"name": "f", "arguments": {"a": True, "b": 1.0, "c": [1, {"d": "x"}]}}]
    other = [{"name": "f", "arguments": {"a": 1, "b": "1", "c": [1, {"d": "y"}]}}]
    assert correctness(same, gold)["r_value"] == 3
    assert correctness(other, gold)["r_value"] == 0


@pytest.mark.parametrize("response,ok", [
    (f"<think>two calls</think>{W}\n{C}", True),
    ("<think>no tool needed</think>It is sunny.", True),          # a text answer
    ("<think>nothing to do</think>", True),                        # an empty run of calls
    (f"{W}{C}", False),                                            # no <think>
    (f"Sure. <think>x</think>{W}", False),                         # text before the thought
    (f"<think>x</think>{W} and done", False),                      # text after the calls
    (f"<think>x</think>Calling: {W}", False),                      # text before the calls
    (f"<think>x</think>{W}<tool_call>{{not json}}</tool_call>", False),
    (f"<think>x</think>{W}<tool_call>{json.dumps(CC)}", False),    # unclosed block
    (f"<think>a</think><think>b</think>{W}", False),
    (f"<think>x{W}", False),                                       # never closed
    ('<think>x</think><tool_call>{"arguments": {}}</tool_call>', False),  # a call without a name
])
def test_format_check(response, ok):
    assert format_ok(response) is ok


def test_calls_inside_an_unfinished_thought_earn_nothing():
    r = tool_reward(f"<think>I will call {W}{C}", GOLD)
    assert (r["format"], r["correct"]) == (0, -3.0)


def test_correctness_reads_parseable_calls_even_when_the_format_fails():
    resp = f"{W}<tool_call>{{oops}}</tool_call>{C}"
    assert [c["name"] for c in predicted_calls(resp)] == ["get_weather", "convert_currency"]
    r = tool_reward(resp, GOLD)
    assert (r["format"], r["correct"], r["score"]) == (0, 3.0, 3.0)


def test_final_reward_is_format_plus_correct():
    r = tool_reward(f"<think>x</think>{W}", GOLD)
    assert r["format"] == 1
    assert r["score"] == pytest.approx(1 + 6 * 2.5 / 7 - 3)


def test_row_contract():
    out = score_row("tool_call", {"response": f"<think>x</think>{W}{C}", "gold_calls": GOLD, "id": 7})
    assert (out["format"], out["correct"], out["score"], out["id"]) == (1, 3.0, 4.0, 7)
    assert "error" not in out
    bad = score_row("tool_call", {"response": W, "gold_calls": [{"arguments": {}}]})
    assert bad["score"] == -3.0 and "gold_calls[0]" in bad["error"] and bad["correct"] == -3.0  # never above wrong
    assert "gold_calls" in score_row("tool_call", {"response": W})["error"]
    assert "response" in score_row("tool_call", {"gold_calls": GOLD})["error"]
    assert score_row("tool_call", {"response": W, "gold_calls": json.dumps(GOLD)})["correct"] == pytest.approx(-6 / 7)


def test_world_spec_verifier_rescales_to_unit_interval():
    spec = '{"type": "tool_call"}'
    ref = json.dumps(GOLD)
    assert score(spec, f"<think>two calls</think>{W}{C}", ref) == pytest.approx(1.0)
    assert score(spec, f"{W}{C}", ref) == pytest.approx(6 / 7)                   # format lost
    assert score(spec, "I would call get_weather.", ref) == pytest.approx(0.0)
    assert score(spec, W, "not json") == 0.0
