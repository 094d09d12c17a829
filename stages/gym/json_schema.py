"""The JSON-schema extraction verifier (paper §2.5.3, item 2): field-level dense score.

Spec ``{"type": "json_schema", "schema": {...JSON Schema...}}``; the reference
is the gold JSON object as a string. The final answer (text after
``</think>``, optionally inside a ```json fence) must parse as a JSON object
and validate against the schema, else the score is 0; a valid answer scores
the fraction of gold fields it matches (strings compared without regard to
case or surrounding whitespace, everything else exactly).

The validator covers the subset of JSON Schema the world's specs use:
``type`` (one or a list), ``enum``, ``properties``, ``required``,
``additionalProperties: false``, ``items``, ``minimum``/``maximum``,
``minLength``/``maxLength``. Other keywords are ignored, as JSON Schema does
with unknown ones.
"""
from __future__ import annotations

import json
import re
import unicodedata

from stages.gym.provisional import final_answer
from stages.gym.registry import register_verifier

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)\n?\s*```", re.DOTALL)
_MISSING = object()


def parse_json_answer(text: str):
    """The JSON value an answer states (a fenced block's content when fenced); None when it does not parse."""
    if not text:
        return None
    m = _FENCE.search(text)
    body = (m.group(1) if m else text).strip()
    try:
        return json.loads(body)
    except (json.JSONDecodeError, ValueError):
        return None


def _is_type(value, name: str) -> bool:
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "string":
        return isinstance(value, str)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if isinstance(value, bool):  # a bool is no number in JSON
        return False
    if name == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float))
    raise ValueError(f"json_schema: unknown type '{name}'")


def validate(value, schema: dict, path: str = "$") -> list[str]:
    """Schema violations of ``value`` (empty when valid), each with its JSON path."""
    errors: list[str] = []
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_is_type(value, t) for t in names):
            return [f"{path}: expected {'/'.join(names)}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in enum")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: below minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: above maximum {schema['maximum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{path}: shorter than minLength")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: longer than maxLength")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        errors += [f"{path}: missing required '{k}'" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if k in props:
                errors += validate(v, props[k], f"{path}.{k}")
            elif schema.get("additionalProperties", True) is False:
                errors.append(f"{path}: unexpected key '{k}'")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += validate(v, schema["additionalProperties"], f"{path}.{k}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(value):
            errors += validate(v, schema["items"], f"{path}[{i}]")
    return errors


def _norm(s: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", s).casefold().split())


def same_value(got, gold) -> bool:
    if isinstance(gold, str):
        return isinstance(got, str) and _norm(got) == _norm(gold)
    if isinstance(gold, bool) or isinstance(got, bool):
        return got is gold
    return got == gold


def field_score(answer: dict, gold: dict) -> float:
    """The fraction of gold fields the answer matches (1.0 for an empty gold object)."""
    if not gold:
        return 1.0
    return sum(same_value(answer.get(k, _MISSING), v) for k, v in gold.items()) / len(gold)


@register_verifier("json_schema", needs_reference=True)
def _json_schema(spec: dict, response: str, reference: str) -> float:
    answer = parse_json_answer(final_answer(response))
    if not isinstance(answer, dict) or validate(answer, spec.get("schema", {"type": "object"})):
        return 0.0
    gold = parse_json_answer(reference)
    if not isinstance(gold, dict):
        return 0.0
    return field_score(answer, gold)
