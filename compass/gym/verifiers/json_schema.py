"""JSON extraction verifier (paper §2.5.3, item 2): validity, required keys, field-level correctness.

Row (``compass gym score json_schema``): ``response``, ``schema`` (JSON
Schema), optional ``gold`` (the expected object), optional ``score_range``
``[lo, hi]`` → adds ``valid`` (parses as an object and validates against the
schema), ``fields`` (field → passed), ``score``. Spec
``{"type": "json_schema", "schema": ...}``: the reference is the gold object
(JSON text).

Parsing is tolerant: the final answer (after ``</think>``), else the last
fenced block, else the last balanced ``{...}`` object in the text. Validation
is ``jsonschema`` (the draft the schema names, else the newest).

The dense score: one check per field (the gold's keys when a gold object is
given, else the schema's required keys, else its properties): the field is
present, has no schema error under it, and equals the gold value (strings
compared after NFKC, case-folding and whitespace collapsing; other values as
typed JSON, ``3`` = ``3.0``, ``true`` ≠ ``1``); plus one check that the object
as a whole validates (unexpected keys, …). Score = passed / checks, 0 when
nothing parses to an object, rescaled to ``score_range`` (default [0, 1]).
"""
from __future__ import annotations

import json
import math
import re
import unicodedata
from functools import lru_cache

import jsonschema
from jsonschema.exceptions import SchemaError

from compass.gym.registry import Verifier, register_verifier
from compass.gym.rows import RowError, require, response_of
from compass.gym.score import final_answer

_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)\n?\s*```", re.DOTALL)
_MISSING = object()
MAX_OBJECT_SCANS = 200          # '{' positions tried when hunting an object in free text


def _loads(text: str):
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _MISSING


def _last_object_in(text: str):
    """The last top-level ``{...}`` in free text that decodes as a JSON object, or _MISSING."""
    decoder, found, pos, tries = json.JSONDecoder(), _MISSING, text.find("{"), 0
    while pos != -1 and tries < MAX_OBJECT_SCANS:
        tries += 1
        try:
            value, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            pos = text.find("{", pos + 1)
            continue
        if isinstance(value, dict):
            found = value
        pos = text.find("{", end)
    return found


def parse_json_answer(text: str):
    """The JSON value an answer states: the whole text, the last fenced block, or the last
    ``{...}`` object in it; None when nothing parses."""
    if not text or not text.strip():
        return None
    value = _loads(text.strip())
    if value is _MISSING:
        fenced = _FENCE.findall(text)
        if fenced:
            value = _loads(fenced[-1].strip())
    if value is _MISSING:
        value = _last_object_in(text)
    return None if value is _MISSING else value


@lru_cache(maxsize=256)
def _validator(schema_json: str):
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except SchemaError as e:
        raise RowError(f"invalid schema: {e.message[:200]}") from None
    return cls(schema)


def validator_for(schema) -> "jsonschema.protocols.Validator":
    """A cached ``jsonschema`` validator; RowError when the schema itself is invalid."""
    if not isinstance(schema, dict):
        raise RowError(f"schema must be a JSON object, got {type(schema).__name__}")
    return _validator(json.dumps(schema, sort_keys=True))


def _path(parts) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def validate(value, schema: dict) -> list[str]:
    """Schema violations of ``value`` (empty when valid), each prefixed with its JSON path."""
    errors = validator_for(schema).iter_errors(value)
    return sorted(f"{_path(e.absolute_path)}: {e.message}" for e in errors)


def _norm(s: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", s).casefold().split())


def same_value(got, gold, fold_text: bool = True) -> bool:
    """Typed JSON equality (``3`` = ``3.0``; ``true`` ≠ ``1``; ``"1"`` ≠ ``1``), recursing into objects and
    arrays; with ``fold_text`` strings also match across case, width and spacing."""
    if isinstance(gold, str) or isinstance(got, str):
        if not (isinstance(got, str) and isinstance(gold, str)):
            return False
        return _norm(got) == _norm(gold) if fold_text else got == gold
    if isinstance(gold, bool) or isinstance(got, bool):
        return isinstance(got, bool) and isinstance(gold, bool) and got == gold
    if isinstance(gold, (int, float)) and isinstance(got, (int, float)):
        return got == gold
    if isinstance(gold, dict):
        return isinstance(got, dict) and got.keys() == gold.keys() and all(
            same_value(got[k], v, fold_text) for k, v in gold.items())
    if isinstance(gold, list):
        return isinstance(got, list) and len(got) == len(gold) and all(
            same_value(a, b, fold_text) for a, b in zip(got, gold))
    return type(got) is type(gold) and got == gold


def _checked_fields(schema: dict, gold) -> list[str]:
    if isinstance(gold, dict):
        return list(gold)
    if schema.get("required"):
        return list(schema["required"])
    return list(schema.get("properties", {}))


def json_score(answer_text: str, schema: dict, gold=None) -> dict:
    """``valid`` (bool), ``fields`` (field → passed) and the dense ``score`` in [0, 1] (see module doc)."""
    validator = validator_for(schema)
    answer = parse_json_answer(answer_text)
    if not isinstance(answer, dict):
        return {"valid": False, "fields": {}, "score": 0.0}
    bad_fields, whole_ok = set(), True
    for err in validator.iter_errors(answer):
        if err.absolute_path:
            bad_fields.add(err.absolute_path[0])
        elif err.validator == "required":
            continue                      # a missing field fails its own check below
        else:
            whole_ok = False              # unexpected keys, object-level constraints
    fields = {f: (f in answer and f not in bad_fields
                  and (not isinstance(gold, dict) or same_value(answer[f], gold[f])))
              for f in _checked_fields(schema, gold)}
    valid = whole_ok and not bad_fields and all(f in answer for f in schema.get("required", []))
    passed = sum(fields.values()) + (1 if whole_ok else 0)
    return {"valid": valid, "fields": fields, "score": passed / (len(fields) + 1)}


def rescale(score: float, score_range) -> float:
    """``score`` in [0, 1] mapped linearly onto ``score_range`` = [lo, hi] (e.g. [-1, 1])."""
    if score_range is None:
        return score
    if (not isinstance(score_range, (list, tuple)) or len(score_range) != 2
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                       for x in score_range)):
        raise RowError("score_range must be [lo, hi] finite numbers")
    lo, hi = score_range
    return lo + (hi - lo) * score


def _range_floor(row: dict) -> float:
    """The score of an unscorable row: the bottom of its score_range (0 without one or with a bad one)."""
    try:
        return rescale(0.0, row.get("score_range"))
    except RowError:
        return 0.0


def score_row(row: dict) -> dict:
    response = response_of(row)
    schema = require(row, "schema", dict)
    gold = row.get("gold")
    if gold is not None and not isinstance(gold, dict):
        raise RowError(f"field 'gold' must be an object, got {type(gold).__name__}")
    out = json_score(final_answer(response), schema, gold)
    out["score"] = rescale(out["score"], row.get("score_range"))
    return out


def score_spec(spec: dict, response: str, reference: str) -> float:
    """The dense score against the gold object in ``reference``."""
    gold = parse_json_answer(reference)
    if not isinstance(gold, dict):
        return 0.0
    try:
        return json_score(final_answer(response), spec.get("schema", {"type": "object"}), gold)["score"]
    except RowError:
        return 0.0


VERIFIER = register_verifier(Verifier("json_schema", spec=score_spec, row=score_row,
                                      defaults={"valid": False, "fields": {}}, error_score=_range_floor))
