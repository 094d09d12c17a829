"""``bfcl_ast``: BFCL's AST pass/fail on hand-made calls: optional parameters, string standardisation,
numbers by value, parallel calls in any order, and each way to fail."""
from __future__ import annotations

import json

import pytest

from compass.gym.score import judge, parse_verifier

SPEC = parse_verifier({"type": "bfcl_ast"})
AREA = [{"triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}]


def answer(*calls) -> str:
    return "<think>call it</think>" + "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)


def call(name, **args) -> dict:
    return {"name": name, "arguments": args}


def verdict(response, gold) -> tuple[float, str | None]:
    r = judge(SPEC, response, json.dumps(gold))
    return r.score, r.reason


@pytest.mark.parametrize("response, want", [
    (answer(call("triangle_area", base=10, height=5)), (1.0, None)),                  # optional left out
    (answer(call("triangle_area", base=10.0, height=5, unit="Units")), (1.0, None)),  # float 10.0 = 10; case
    (answer(call("triangle_area", base=10, height=6)), (0.0, "value_error")),
    (answer(call("triangle_area", base=10)), (0.0, "missing_required")),
    (answer(call("triangle_area", base=10, height=5, colour="red")), (0.0, "unexpected_param")),
    (answer(call("square_area", base=10, height=5)), (0.0, "wrong_func_name")),
    (answer(call("triangle_area", base=10, height=5), call("triangle_area", base=10, height=5)),
     (0.0, "wrong_count")),
    ("<think>no tools</think>The area is 25.", (0.0, "no_call")),
    (answer(call("triangle_area", base=10, height=5, unit="")), (0.0, "value_error")),  # "" only marks optional
])
def test_simple_call(response, want):
    assert verdict(response, AREA) == want


def test_strings_are_standardised_as_bfcl_does():
    gold = [{"book": {"city": ["New York, NY"], "date": ["2024-04-01"], "tags": [["Quiet room", "view"]]}}]
    ok = answer(call("book", city="new york ny", date="20240401", tags=["quiet_room", "View"]))
    assert verdict(ok, gold) == (1.0, None)
    assert verdict(answer(call("book", city="Boston", date="2024-04-01", tags=["quiet room", "view"])), gold) \
        == (0.0, "value_error")
    assert verdict(answer(call("book", city="New York", date="2024-04-01", tags=["view", "quiet room"])), gold) \
        == (0.0, "value_error")                                   # a list's order counts


def test_parallel_calls_match_in_any_order_one_to_one():
    gold = [{"weather": {"city": ["Paris"]}}, {"weather": {"city": ["Rome"]}}]
    assert verdict(answer(call("weather", city="Rome"), call("weather", city="Paris")), gold) == (1.0, None)
    assert verdict(answer(call("weather", city="Rome"), call("weather", city="Rome")), gold) == (0.0, "value_error")
    # a call that fits both expected ones must not be counted twice
    loose = [{"weather": {"city": ["Paris", "Rome"]}}, {"weather": {"city": ["Paris"]}}]
    assert verdict(answer(call("weather", city="Rome"), call("weather", city="Paris")), loose) == (1.0, None)
    assert verdict(answer(call("weather", city="Paris"), call("weather", city="Paris")), loose) == (1.0, None)


def test_malformed_ground_truth_is_the_datas_fault():
    from compass.gym.reasons import is_verifier_fault
    for bad in ("not json", {"triangle_area": {}}, [{"f": {"x": 1}}], [{"f": {}, "g": {}}]):
        r = judge(SPEC, answer(call("f")), bad if isinstance(bad, str) else json.dumps(bad))
        assert r.score == 0.0 and r.reason == "bad_gold" and is_verifier_fault(r.reason)


def test_row_form():
    from compass.gym.rows import score_row
    row = {"response": answer(call("triangle_area", base=10, height=5)), "ground_truth": AREA}
    out = score_row("bfcl_ast", row)
    assert (out["score"], out["passed"], out.get("reason")) == (1.0, True, None)
    out = score_row("bfcl_ast", {**row, "response": answer(call("triangle_area", base=9, height=5))})
    assert (out["score"], out["passed"], out["reason"]) == (0.0, False, "value_error")
