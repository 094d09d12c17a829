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


# -- type checks from the function description (BFCL's `function` field) -----------------------------
TOOLS = [{"name": "triangle_area", "parameters": {"type": "dict", "required": ["base", "height"], "properties": {
    "base": {"type": "integer"}, "height": {"type": "float"}, "unit": {"type": "string"},
    "sides": {"type": "array", "items": {"type": "integer"}}, "exact": {"type": "boolean"}}}}]
TYPED = [{"triangle_area": {"base": [10], "height": [5.0], "unit": ["units", ""], "sides": [[1, 2], ""],
                            "exact": [True, ""]}}]


def typed(response, gold=TYPED, tools=TOOLS):
    r = judge(parse_verifier({"type": "bfcl_ast", "functions": tools}), response, json.dumps(gold))
    return r.score, r.reason


@pytest.mark.parametrize("args, want", [
    ({"base": 10, "height": 5.0}, (1.0, None)),
    ({"base": 10, "height": 5}, (1.0, None)),                         # an integer where a float is described
    ({"base": 10.0, "height": 5.0}, (0.0, "type_error")),             # a float where an integer is described
    ({"base": "10", "height": 5.0}, (0.0, "type_error")),             # text that reads as the number
    ({"base": 10, "height": 5.0, "exact": 1}, (0.0, "type_error")),   # 1 is not a boolean
    ({"base": 10, "height": 5.0, "sides": [1, 2]}, (1.0, None)),
    # BFCL checks items against allowed values that are lists; an optional parameter's "" passes the type
    # check, so the value check decides
    ({"base": 10, "height": 5.0, "sides": [1, "2"]}, (0.0, "value_error")),
    ({"base": 10, "height": 5.0, "sides": [1, 3]}, (0.0, "value_error")),
])
def test_types_from_the_description(args, want):
    assert typed(answer(call("triangle_area", **args))) == want
    # without the description the value alone decides (10.0 equals 10)
    if want[1] == "type_error" and type(args["base"]) is float:
        assert verdict(answer(call("triangle_area", **args)), TYPED) == (1.0, None)


def test_array_items_have_the_described_item_type():
    gold = [{"triangle_area": {"base": [10], "height": [5.0], "sides": [[1, 2]]}}]
    assert typed(answer(call("triangle_area", base=10, height=5.0, sides=[1, "2"])), gold) == (0.0, "type_error")
    assert typed(answer(call("triangle_area", base=10, height=5.0, sides=[1, 2])), gold) == (1.0, None)


def test_the_description_adds_required_and_known_parameters():
    loose = [{"triangle_area": {"base": [10], "height": [5.0, ""]}}]     # the gold calls height optional
    assert typed(answer(call("triangle_area", base=10)), loose) == (0.0, "missing_required")   # described required
    tools = [{"name": "triangle_area", "parameters": {"properties": {"base": {"type": "integer"}}}}]
    gold = [{"triangle_area": {"base": [10], "colour": ["red", ""]}}]
    assert typed(answer(call("triangle_area", base=10, colour="red")), gold, tools) == (0.0, "unexpected_param")


def test_a_variable_name_where_a_value_is_described_passes_as_bfcl_allows():
    gold = [{"triangle_area": {"base": ["b"], "height": [5.0]}}]          # the ground truth names a variable
    assert typed(answer(call("triangle_area", base="b", height=5.0)), gold) == (1.0, None)


def test_objects_match_per_key_against_allowed_values():
    gold = [{"find": {"budget": [{"min": [300000], "max": [400000, 400000.0], "currency": ["USD", ""]}]}}]
    assert verdict(answer(call("find", budget={"min": 300000, "max": 400000})), gold) == (1.0, None)
    assert verdict(answer(call("find", budget={"min": 300000, "max": 400000, "currency": "usd"})), gold) == (1.0, None)
    assert verdict(answer(call("find", budget={"min": 300000})), gold) == (0.0, "value_error")       # max required
    assert verdict(answer(call("find", budget={"min": 1, "max": 400000})), gold) == (0.0, "value_error")
    assert verdict(answer(call("find", budget={"min": 300000, "max": 400000, "tax": 1})), gold)[0] == 0.0
    rooms = [{"book": {"rooms": [[{"kind": ["single"], "n": [1]}, {"kind": ["double"], "n": [2]}]]}}]
    assert verdict(answer(call("book", rooms=[{"kind": "single", "n": 1}, {"kind": "double", "n": 2}])), rooms) \
        == (1.0, None)
    assert verdict(answer(call("book", rooms=[{"kind": "single", "n": 1}])), rooms) == (0.0, "value_error")


def test_a_description_that_is_not_a_list_is_the_specs_fault():
    assert judge(parse_verifier({"type": "bfcl_ast", "functions": 3}), answer(call("triangle_area", base=10)),
                 json.dumps(TYPED)).reason == "bad_spec"
