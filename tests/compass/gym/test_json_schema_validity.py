"""json_schema's ``valid`` is exactly what jsonschema says of the answer object: one test per gap the
hand-made check had (nested required, dependentRequired, dependencies, $id cross references, custom
metaschemas, remote refs, non-object answers), and the reason codes rows and spec forms carry."""
from __future__ import annotations

import json
import socket
import urllib.request
import warnings

import pytest

from compass.gym.reasons import known
from compass.gym.rows import score_row
from compass.gym.score import Reward, judge

DRAFT7 = "http://json-schema.org/draft-07/schema#"


def row(response, schema, **more) -> dict:
    text = response if isinstance(response, str) else json.dumps(response)
    return score_row("json_schema", {"response": text, "schema": schema, **more})


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """A test that reached for the network would fail here, not hang or pass by luck."""
    def refuse(*a, **k):
        raise AssertionError("the json_schema verifier must never open a connection")
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_required_inside_allof_is_enforced():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "allOf": [{"required": ["b"]}]}
    out = row({"a": 1}, schema)
    assert out["valid"] is False and out["reason"] == "schema_violation"
    assert out["message"] == "$: 'b' is a required property"
    ok = row({"a": 1, "b": 2}, schema)
    assert ok["valid"] is True and "reason" not in ok and "message" not in ok


def test_dependent_required_is_enforced():
    schema = {"type": "object", "dependentRequired": {"card": ["billing_address"]}}
    out = row({"card": "4111"}, schema)
    assert out["valid"] is False and out["reason"] == "schema_violation" and "billing_address" in out["message"]
    assert row({"card": "4111", "billing_address": "x"}, schema)["valid"] is True
    assert row({"name": "no card"}, schema)["valid"] is True


@pytest.mark.parametrize("dependency", [["b"], {"required": ["b"]}])     # draft 7: the list and schema forms
def test_draft7_dependencies_are_enforced(dependency):
    schema = {"$schema": DRAFT7, "type": "object", "dependencies": {"a": dependency}}
    assert row({"a": 1}, schema)["valid"] is False
    assert row({"a": 1, "b": 2}, schema)["valid"] is True and row({"c": 1}, schema)["valid"] is True


def test_nested_errors_name_their_json_path():
    schema = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object",
              "properties": {"price": {"type": "number"}}}}}}
    out = row({"items": [{"price": 1}, {"price": "cheap"}]}, schema)
    assert out["valid"] is False and out["message"] == "$.items[1].price: 'cheap' is not of type 'number'"


PRODUCT = {"$id": "https://schemas.example/product.json", "type": "object", "required": ["name", "price"],
           "properties": {"name": {"type": "string"}, "price": {"$ref": "money.json"},
                          "seller": {"$ref": "https://schemas.example/seller.json#/$defs/id"}}}
MONEY = {"$id": "https://schemas.example/money.json", "type": "object", "required": ["amount", "currency"],
         "properties": {"amount": {"type": "number", "minimum": 0}, "currency": {"enum": ["EUR", "USD"]}}}
SELLER = {"$id": "https://schemas.example/seller.json",
          "$defs": {"id": {"type": "string", "pattern": "^S[0-9]+$"},
                    "product": {"$ref": "product.json"}}}     # refers back: the documents reference each other


def test_schemas_reference_each_other_by_id():
    good = {"name": "Lamp", "price": {"amount": 12.5, "currency": "EUR"}, "seller": "S42"}
    assert row(good, PRODUCT, schemas=[MONEY, SELLER])["valid"] is True
    bad_money = {**good, "price": {"amount": -1, "currency": "EUR"}}
    out = row(bad_money, PRODUCT, schemas=[MONEY, SELLER])
    assert out["valid"] is False and out["message"].startswith("$.price.amount:")
    assert row({**good, "seller": "nobody"}, PRODUCT, schemas=[MONEY, SELLER])["valid"] is False
    # and through the other document's back reference
    wrapper = {"type": "object", "properties": {"p": {"$ref": "https://schemas.example/seller.json#/$defs/product"}}}
    assert row({"p": good}, wrapper, schemas=[MONEY, SELLER, PRODUCT])["valid"] is True
    assert row({"p": {"name": "Lamp"}}, wrapper, schemas=[MONEY, SELLER, PRODUCT])["valid"] is False


def test_embedded_ids_and_defs_resolve_without_schemas():
    schema = {"$id": "https://schemas.example/order.json", "type": "object",
              "properties": {"sku": {"$ref": "#/$defs/sku"}, "qty": {"$ref": "qty.json"}},
              "$defs": {"sku": {"type": "string"}, "qty": {"$id": "qty.json", "type": "integer"}}}
    assert row({"sku": "A1", "qty": 2}, schema)["valid"] is True
    assert row({"sku": "A1", "qty": 2.5}, schema)["valid"] is False


def test_a_missing_referenced_document_is_a_schema_ref_error_whatever_the_answer():
    out = row({"name": "Lamp"}, PRODUCT, schemas=[MONEY])            # SELLER not carried
    assert out["reason"] == "schema_ref_error" and "seller.json" in out["error"] and out["valid"] is False
    # the dangling ref sits in a branch this answer never reaches: still an error, found up front
    schema = {"anyOf": [{"type": "object"}, {"$ref": "https://elsewhere.example/x.json"}]}
    out = row({"a": 1}, schema)
    assert out["reason"] == "schema_ref_error" and "'https://elsewhere.example/x.json'" in out["error"]
    assert "schemas" in out["error"]                                  # says how to fix it


def test_a_remote_ref_is_never_fetched():
    out = row({"a": 1}, {"properties": {"a": {"$ref": "http://json-schema.example/remote.json"}}})
    assert out["reason"] == "schema_ref_error" and out["score"] == 0.0 and out["valid"] is False
    assert "http://json-schema.example/remote.json" in out["error"]


def test_local_pointer_to_nowhere_and_endless_refs_are_schema_ref_errors():
    out = row({"a": 1}, {"properties": {"a": {"$ref": "#/$defs/missing"}}})
    assert out["reason"] == "schema_ref_error" and "#/$defs/missing" in out["error"]
    assert row({"a": 1}, {"$ref": "#"})["reason"] == "schema_ref_error"


def test_the_draft_metaschemas_resolve_locally():
    schema = {"type": "object", "properties": {"s": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}}
    assert row({"s": {"type": "string"}}, schema)["valid"] is True
    assert row({"s": {"type": 3}}, schema)["valid"] is False


@pytest.mark.parametrize("extra,reason", [
    ("not a list", "bad_field"),
    ([{"type": "string"}], "bad_field"),                              # no $id
    ([{"$id": "https://x.example/a", "type": "no-such-type"}], "invalid_schema"),
])
def test_bad_extra_schemas_are_row_errors(extra, reason):
    out = row({"a": 1}, {"type": "object"}, schemas=extra)
    assert out["reason"] == reason and out["valid"] is False and out["error"]


META = {"$id": "https://schemas.example/meta/shop", "$schema": DRAFT7,
        "allOf": [{"$ref": "http://json-schema.org/draft-07/schema#"}], "required": ["title"]}


def test_a_custom_metaschema_not_carried_falls_back_to_the_newest_draft():
    schema = {"$schema": "https://schemas.example/meta/unknown", "type": "object",
              "dependentRequired": {"a": ["b"]}}                     # a 2020-12 keyword: enforced
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                # no "metaschema not found" warning either
        out = row({"a": 1}, schema)
    assert "error" not in out and out["valid"] is False and out["reason"] == "schema_violation"


def test_a_carried_custom_metaschema_picks_its_draft_and_checks_the_schema():
    # the metaschema is a draft-07 one: draft 7 semantics (dependencies), not 2020-12's
    schema = {"$schema": "https://schemas.example/meta/shop", "title": "order", "type": "object",
              "dependencies": {"a": ["b"]}}
    assert row({"a": 1}, schema, schemas=[META])["valid"] is False
    assert row({"a": 1, "b": 2}, schema, schemas=[META])["valid"] is True
    untitled = {k: v for k, v in schema.items() if k != "title"}
    out = row({"a": 1, "b": 2}, untitled, schemas=[META])            # invalid under its own metaschema
    assert out["reason"] == "invalid_schema" and "title" in out["error"]


@pytest.mark.parametrize("response,what", [
    ("[1, 2]", "array"), ('"text"', "string"), ("3", "number"), ("null", "no JSON"), ("no json here", "no JSON"),
])
def test_a_non_object_answer_is_out_of_scope(response, what):
    schema = {"type": ["array", "string", "number", "null"]}          # jsonschema would accept most of these
    out = row(response, schema, score_range=[-1, 1])
    assert out["valid"] is False and out["reason"] == "no_json_object" and what in out["message"]
    assert out["score"] == -1.0 and "error" not in out


def test_boolean_schemas():
    assert row({"a": 1}, True)["valid"] is True
    out = row({"a": 1}, False)
    assert out["valid"] is False and out["reason"] == "schema_violation"


def test_field_checks_do_not_crash_on_odd_schemas():
    draft3 = {"$schema": "http://json-schema.org/draft-03/schema#", "type": "object", "required": True,
              "properties": {"a": {"type": "string", "required": True}}}
    out = row({"a": "x"}, draft3)
    assert out["valid"] is True and out["fields"] == {"a": True}
    assert row({"b": 1}, draft3)["valid"] is False


@pytest.mark.parametrize("spec,response,reference,reason", [
    ({"schema": {"type": "object", "allOf": [{"required": ["b"]}]}}, '{"a": 1}', '{"a": 1}', "schema_violation"),
    ({"schema": {"type": "object"}}, "[1]", '{"a": 1}', "no_json_object"),
    ({"schema": {"type": "object"}}, '{"a": 1}', "not json", "bad_gold"),
    ({"schema": {"type": "no-such-type"}}, '{"a": 1}', '{"a": 1}', "invalid_schema"),
    ({"schema": {"$ref": "https://elsewhere.example/x.json"}}, '{"a": 1}', '{"a": 1}', "schema_ref_error"),
    ({"schema": {"$ref": "money.json"}, "schemas": [MONEY]}, '{"amount": 1, "currency": "EUR"}',
     '{"amount": 1, "currency": "EUR"}', "schema_ref_error"),        # relative to no base: not MONEY's $id
    ({"schema": {"$ref": "https://schemas.example/money.json"}, "schemas": [MONEY]},
     '{"amount": 1, "currency": "EUR"}', '{"amount": 1, "currency": "EUR"}', None),
])
def test_spec_form_reasons(spec, response, reference, reason):
    got = judge({"type": "json_schema", **spec}, response, reference)
    assert isinstance(got, Reward) and got.reason == reason
    assert reason is None or known(reason)
    if reason in ("bad_gold", "invalid_schema", "schema_ref_error", "no_json_object"):
        assert got.score == 0.0
    if reason is None:
        assert got.score == 1.0


def test_format_is_an_annotation_as_the_draft_says():
    schema = {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}}
    assert row({"d": "not a date"}, schema)["valid"] is True


def test_an_invalid_answer_never_scores_one():
    """A field required inside allOf that no field check covers still fails the whole-object check."""
    from compass.gym.verifiers.json_schema import json_score
    schema = {"type": "object", "properties": {"name": {"type": "string"}},
              "allOf": [{"required": ["sku"]}]}
    out = json_score('{"name": "shoe"}', schema, gold={"name": "shoe"})
    assert out["valid"] is False and out["fields"] == {"name": True} and out["score"] == 0.5
    out = json_score('{"name": "shoe", "sku": "A1"}', schema, gold={"name": "shoe"})
    assert out["valid"] is True and out["score"] == 1.0
    # a checked field that is missing fails its own check, not the whole-object one
    req = {"type": "object", "required": ["name", "sku"]}
    assert json_score('{"name": "shoe"}', req)["fields"] == {"name": True, "sku": False}
    assert json_score('{"name": "shoe"}', req)["score"] == 2 / 3
