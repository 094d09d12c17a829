"""The e-commerce verifiers: JSON-schema extraction (field-level score) and the GenRM rules fallback."""
from __future__ import annotations

import json

import pytest

from compass.gym.verifiers.json_schema import parse_json_answer, validate
from compass.gym.score import is_judged, needs_reference, score
from compass.gym.rows import score_row

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["brand", "color", "quantity"],
          "properties": {"brand": {"type": "string"}, "color": {"type": "string", "enum": ["Black", "Red"]},
                         "quantity": {"type": "integer", "minimum": 1}}}
SPEC = json.dumps({"type": "json_schema", "schema": SCHEMA})
GOLD = json.dumps({"brand": "Lumio", "color": "Black", "quantity": 3})


# 4 checks: brand, color, quantity (the gold's fields) and the object as a whole
@pytest.mark.parametrize("response,expected", [
    ('{"brand": "Lumio", "color": "Black", "quantity": 3}', 1.0),
    ('{"quantity": 3, "color": "Black", "brand": "Lumio"}', 1.0),                 # key order is free
    ('```json\n{"brand": "Lumio", "color": "Black", "quantity": 3}\n```', 1.0),    # fenced
    ('```\n{"brand": "Lumio", "color": "Black", "quantity": 3}\n```', 1.0),
    ('Here it is:\n```json\n{"brand": "Lumio", "color": "Black", "quantity": 3}\n```\nDone.', 1.0),
    ('Sure! {"brand": "Lumio", "color": "Black", "quantity": 3} hope it helps', 1.0),  # inline object
    ('<think>brand first</think>{"brand": "Lumio", "color": "Black", "quantity": 3}', 1.0),
    ('{"brand": " lumio ", "color": "Black", "quantity": 3.0}', 1.0),             # case, spaces, 3.0 == 3
    ('{"brand": "Lumio", "color": "Red", "quantity": 3}', 3 / 4),                 # one field wrong
    ('{"brand": "Zenta", "color": "Red", "quantity": 4}', 1 / 4),                 # valid, every field wrong
    ('{"brand": "Lumio", "color": "Black"}', 3 / 4),                              # missing required
    ('{"brand": "Lumio", "color": "Black", "quantity": "3"}', 3 / 4),             # wrong type
    ('{"brand": "Lumio", "color": "Blue", "quantity": 3}', 3 / 4),                # not in enum (and not gold)
    ('{"brand": "Lumio", "color": "Black", "quantity": 0}', 3 / 4),               # below minimum
    ('{"brand": "Lumio", "color": "Black", "quantity": true}', 3 / 4),            # a bool is no integer
    ('{"brand": "Lumio", "color": "Black", "quantity": 3, "size": "M"}', 3 / 4),  # additionalProperties
    ('{"brand": "Lumio", "color": "Black", "quantity": 3', 0.0),                  # invalid JSON
    ('["Lumio", "Black", 3]', 0.0),                                               # not an object
    ('The brand is Lumio.', 0.0),
    ('<think>{"brand": "Lumio", "color": "Black", "quantity": 3}', 0.0),          # unfinished thought
    ('', 0.0),
])
def test_json_schema_scores(response, expected):
    assert score(SPEC, response, GOLD) == pytest.approx(expected)


def test_json_schema_reference_and_schema_edge_cases():
    assert score(SPEC, GOLD, "not json") == 0.0
    assert score(json.dumps({"type": "json_schema"}), '{"a": 1, "b": "x"}', '{"a": 1, "b": "y"}') == pytest.approx(2 / 3)
    assert score(json.dumps({"type": "json_schema"}), '{"a": 1}', "{}") == 1.0
    assert needs_reference(SPEC) and not is_judged(SPEC)


def test_validate_reports_paths():
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}},
                                               "note": {"type": ["string", "null"], "maxLength": 3}}}
    assert validate({"tags": ["a", "b"], "note": None}, schema) == []
    assert validate({"tags": ["a", 2]}, schema) == ["$.tags[1]: 2 is not of type 'string'"]
    assert validate({"note": "long"}, schema) == ["$.note: 'long' is too long"]
    assert parse_json_answer("  {\"a\": 1}  ") == {"a": 1} and parse_json_answer("{a: 1}") is None


def test_row_contract_valid_fields_and_range():
    row = {"response": '{"brand": "Lumio", "color": "Red"}', "schema": SCHEMA, "gold": json.loads(GOLD), "k": 1}
    out = score_row("json_schema", row)
    assert out["valid"] is False and out["k"] == 1                                   # quantity is required
    assert out["fields"] == {"brand": True, "color": False, "quantity": False}
    assert out["score"] == pytest.approx(2 / 4)
    assert score_row("json_schema", {**row, "score_range": [-1, 1]})["score"] == pytest.approx(0.0)
    ok = score_row("json_schema", {"response": GOLD, "schema": SCHEMA})                    # no gold: required keys
    assert ok["valid"] is True and ok["score"] == 1.0
    no_gold_bad = score_row("json_schema", {"response": '{"brand": 7}', "schema": SCHEMA})
    assert no_gold_bad["fields"] == {"brand": False, "color": False, "quantity": False}
    assert no_gold_bad["score"] == pytest.approx(1 / 4)


@pytest.mark.parametrize("row,needle", [
    ({"schema": SCHEMA}, "response"),
    ({"response": "{}"}, "schema"),
    ({"response": "{}", "schema": "object"}, "schema"),
    ({"response": "{}", "schema": {"type": "no-such-type"}}, "invalid schema"),
    ({"response": "{}", "schema": SCHEMA, "gold": [1]}, "gold"),
    ({"response": "{}", "schema": SCHEMA, "score_range": [0]}, "score_range"),
])
def test_row_contract_errors(row, needle):
    out = score_row("json_schema", row)
    assert out["score"] == 0.0 and needle in out["error"] and out["valid"] is False


def test_an_unscorable_row_scores_the_bottom_of_its_range():
    out = score_row("json_schema", {"schema": SCHEMA, "score_range": [-1, 1]})            # no response
    assert out["score"] == -1.0 and "response" in out["error"]
    assert "finite" in score_row("json_schema", {"response": "{}", "schema": SCHEMA,
                                          "score_range": [float("nan"), 1]})["error"]


def test_hostile_json_input_is_scored_not_crashed():
    deep = "[" * 100_000 + "]" * 100_000
    assert score_row("json_schema", {"response": deep, "schema": SCHEMA})["score"] == 0.0
    braces = "{" * 3_000_000                                # 3 MB of opening braces: scored, 0
    out = score_row("json_schema", {"response": braces, "schema": SCHEMA})
    assert out["score"] == 0.0 and "error" not in out
    huge = score_row("json_schema", {"response": "x" * 10_000_000, "schema": SCHEMA})   # 10 MB: refused by name
    assert huge["score"] == 0.0 and "too long" in huge["error"]



# -- title_rules (the offline stand-in for the GenRM judge) ---------------------------------------
TITLE = json.dumps({"type": "title_rules", "criteria": ["keeps the brand"], "must_keep": ["Lumio", "Wireless Earbuds"],
                    "banned": ["HOT SALE", "FREE SHIPPING"], "max_chars": 50})


@pytest.mark.parametrize("response,expected", [
    ("Lumio Premium Wireless Earbuds X2 Black", 1.0),
    ("Lumio Wireless Earbuds X2", 1.0),
    ("Wireless Earbuds Lumio, Black", 1.0),
    ("<think>drop the spam</think>Lumio Wireless Earbuds X2", 1.0),
    ("Premium Wireless Earbuds X2 Black", 0.5),                                  # brand dropped
    ("Lumio", 0.5),                                                              # noun dropped
    ("LUMIO PREMIUM WIRELESS EARBUDS X2", 2 / 3),                                # shouting
    ("Lumio Wireless Earbuds X2 Hot Sale", 2 / 3),                               # spam kept
    ("Lumio Wireless Earbuds X2 wireless earbuds", 2 / 3),                       # noun stuffed
    ("Lumio Wireless Earbuds Bluetooth Bluetooth", 2 / 3),                       # a word repeated
    ("Lumio Wireless Earbuds X2 Wireless", 2 / 3),                               # part of the noun again
    ("Lumio Wireless Earbuds X2 with a very long tail of words", 2 / 3),         # too long
    ("Lumio Wireless Earbuds\nX2", 2 / 3),                                       # two lines
    ("Lumio Wireless Earbuds for hotel rooms", 1.0),                             # "hot" is not "HOT SALE"
    ("", 0.0),
])
def test_title_rules(response, expected):
    assert score(TITLE, response, "Lumio Premium Wireless Earbuds X2 Black") == pytest.approx(expected)


def test_title_rules_is_judged_needs_no_reference_and_handles_unspaced_scripts():
    assert is_judged(TITLE) and not needs_reference(TITLE)
    zh = json.dumps({"type": "title_rules", "must_keep": ["Lumio", "USB隨身碟"], "banned": ["熱銷"], "max_chars": 70})
    assert score(zh, "Lumio 高級USB隨身碟 X2", "") == 1.0                      # USB may be capitals, glued noun
    assert score(zh, "Lumio 高級USB隨身碟 X2 【熱銷】", "") == pytest.approx(2 / 3)
    assert score(zh, "Lumio USB隨身碟 USB隨身碟", "") == pytest.approx(2 / 3)
    bare = json.dumps({"type": "title_rules", "criteria": ["reads naturally"]})   # no rules: exact match only
    assert score(bare, " Lumio  Earbuds ", "Lumio Earbuds") == 1.0 and score(bare, "Lumio", "Lumio Earbuds") == 0.0
