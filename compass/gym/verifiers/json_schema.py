"""JSON extraction verifier (paper §2.5.3, item 2): validity, required keys, field-level correctness.

Row (``compass gym score json_schema``): ``response``, ``schema`` (JSON
Schema), optional ``schemas`` (extra schema documents, each with an ``$id``,
that the schema refers to), optional ``gold`` (the expected object), optional
``score_range`` ``[lo, hi]`` → adds ``valid``, ``fields`` (field → passed),
``score``, and, when not valid, ``reason`` and ``message``. Spec
``{"type": "json_schema", "schema": ..., "schemas": [...]}``: the reference is
the gold object (JSON text); it returns ``Reward(score, reason)``.

Parsing is tolerant: the final answer (after ``</think>``), else the last
fenced block, else the last balanced ``{...}`` object in the text.

``valid`` is exactly ``jsonschema``'s verdict on the answer object (no error
from ``iter_errors``): every keyword of the draft counts, nested ``required``,
``dependentRequired``, ``dependencies``, ``$ref`` included. The draft is the
one ``$schema`` names; a ``$schema`` that names no known draft but a metaschema
the row carries takes that metaschema's draft (and the schema must be valid
under it); otherwise the newest (2020-12). References resolve in a registry of
what the row carries (the schema with its embedded ``$id`` subschemas and
``$defs``, the ``schemas``, the drafts' own metaschemas) and never over the
network. An answer that is not a JSON object is out of scope (``valid: false``,
reason ``no_json_object``); an invalid object has reason ``schema_violation``
and ``message`` (its first error, with the JSON path). A schema that cannot be
used is a row error: ``invalid_schema``, ``schema_ref_error`` (a reference
that resolves to nothing the row carries, checked up front whatever the
answer), ``bad_field`` (bad ``schemas``); a gold that is not an object:
``bad_gold``.

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
from typing import NamedTuple
from urllib.parse import urldefrag

import jsonschema
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.exceptions import SchemaError
from jsonschema_specifications import REGISTRY as SPECIFICATIONS
from referencing import Registry

from compass.gym.registry import Verifier, register_verifier
from compass.gym.rows import RowError, require, response_of
from compass.gym.score import Reward, final_answer

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


# Extra schema documents a row may carry in ``schemas`` (a bound on the work one row can ask for).
MAX_EXTRA_SCHEMAS = 100
# A custom metaschema may itself name a custom metaschema; a longer chain (or a cycle) ends here.
MAX_META_DEPTH = 8
_LATEST = jsonschema.validators.Draft202012Validator


class _Refusal(NamedTuple):
    """Why a schema cannot be used, cached like a validator so a bad schema is checked only once."""
    message: str
    reason: str


def _known_class(doc):
    """The validator class of the draft ``doc``'s ``$schema`` names; None when it names none we know."""
    if not isinstance(doc, dict) or not isinstance(doc.get("$schema"), str):
        return None
    # an explicit default: jsonschema neither warns nor guesses on an unknown $schema
    return jsonschema.validators.validator_for(doc, default=None)


def _class_for(doc, by_id: dict) -> type:
    """The validator class for ``doc``: the draft its ``$schema`` names; when that is no known draft but a
    metaschema the row carries, that metaschema's class (following its own ``$schema``); else the newest."""
    for _ in range(MAX_META_DEPTH):
        if not isinstance(doc, dict) or not isinstance(doc.get("$schema"), str):
            return _LATEST
        known = _known_class(doc)
        if known is not None:
            return known
        doc = by_id.get(urldefrag(doc["$schema"])[0])
    return _LATEST


def _spec_of(cls) -> referencing.Specification:
    """The referencing rules (how ``$id``, anchors and subschemas are found) of a validator class's draft."""
    return referencing.jsonschema.specification_with(cls.ID_OF(cls.META_SCHEMA),
                                                     default=referencing.jsonschema.DRAFT202012)


def _refs_in(resource, resolver, seen: set):
    """(ref, resolver) for every ``$ref``/``$dynamicRef``/``$recursiveRef`` in ``resource`` and its
    subschemas, each with the resolver (base URI) it is read against."""
    contents = resource.contents
    if not isinstance(contents, dict) or id(contents) in seen:
        return
    seen.add(id(contents))
    resolver = resolver.in_subresource(resource)
    for key in ("$ref", "$dynamicRef", "$recursiveRef"):
        if isinstance(contents.get(key), str):
            yield contents[key], resolver
    for sub in resource.subresources():
        yield from _refs_in(sub, resolver, seen)


def _unresolvable(ref, error=None) -> RowError:
    if isinstance(error, (referencing.exceptions.PointerToNowhere, referencing.exceptions.NoSuchAnchor)):
        why = "its document has nothing at that pointer or anchor"
    else:
        why = ("no document the row carries has that URI (schemas are never fetched: carry it, with its "
               "$id, in the row's 'schemas')")
    return RowError(f"schema $ref {str(ref)[:200]!r} does not resolve: {why}", "schema_ref_error")


def _check_refs(resources: list, registry: Registry) -> None:
    """Every reference the carried documents make resolves (else RowError ``schema_ref_error``). Checked
    up front so a dangling ``$ref`` fails the row whatever the answer, not only answers that reach it."""
    seen: set = set()
    for resource in resources:
        for ref, resolver in _refs_in(resource, registry.resolver_with_root(resource), seen):
            try:
                resolver.lookup(ref)
            except referencing.exceptions.Unresolvable as e:
                raise _unresolvable(ref, e) from None


def _build(schema, extras: list):
    """The validator for ``schema`` whose registry holds every document the row carries (the schema with
    its embedded ``$id`` subschemas and ``$defs``, the ``schemas``, the drafts' own metaschemas), or the
    ``_Refusal`` saying why there is none."""
    if not all(isinstance(doc, dict) for doc in extras):
        return _Refusal("every entry of 'schemas' must be a schema object with an $id", "bad_field")
    # metaschemas are looked up by the URI a $schema names (draft 4 spells $id "id")
    by_id = {urldefrag(uri)[0]: doc for doc in extras
             if isinstance(uri := doc.get("$id", doc.get("id")), str)}
    docs = [schema, *extras]
    classes = [_class_for(doc, by_id) for doc in docs]
    for i, (doc, cls) in enumerate(zip(docs, classes)):
        try:
            cls.check_schema(doc)
        except SchemaError as e:
            where = "schema" if i == 0 else f"schemas[{i - 1}]"
            return _Refusal(f"invalid {where}: {_path(e.absolute_path)}: {e.message[:200]}", "invalid_schema")
        except RecursionError:
            return _Refusal("schema nests too deeply to check", "invalid_schema")
    resources = [_spec_of(cls).create_resource(doc) for doc, cls in zip(docs, classes)]
    for i, resource in enumerate(resources[1:]):
        if not resource.id():
            return _Refusal(f"schemas[{i}] has no $id: nothing could refer to it", "bad_field")
    # Registry() never retrieves (its retrieve raises NoSuchResource), so an unknown URI is an error, not a
    # download; the drafts' metaschemas come from jsonschema_specifications' local files. The root is in
    # it too (under its $id, or "" without one) so that a carried document can refer back to it.
    registry = SPECIFICATIONS.combine(Registry().with_resources((r.id() or "", r) for r in resources)).crawl()
    try:
        _check_refs(resources, registry)
        meta = None if _known_class(schema) is not None or not isinstance(schema, dict) \
            else by_id.get(urldefrag(str(schema.get("$schema", "")))[0])
        if meta is not None:       # a carried custom metaschema: the schema must also be valid under it
            for err in classes[0](meta, registry=registry).iter_errors(schema):
                return _Refusal(f"invalid schema under its metaschema: {_path(err.absolute_path)}: "
                                f"{err.message[:200]}", "invalid_schema")
    except RowError as e:
        return _Refusal(str(e), e.reason)
    except referencing.exceptions.Unresolvable as e:     # a ref inside the custom metaschema
        return _Refusal(str(_unresolvable(getattr(e, "ref", e), e)), "schema_ref_error")
    return classes[0](schema, registry=registry)


@lru_cache(maxsize=256)
def _validator(key: str):
    schema, extras = json.loads(key)
    try:
        return _build(schema, extras)
    except RecursionError:            # references that loop, or a schema nested past Python's stack
        return _Refusal("schema nests too deeply or its references loop without end", "schema_ref_error")


def validator_for(schema, schemas=None) -> "jsonschema.protocols.Validator":
    """A cached ``jsonschema`` validator for ``schema`` (an object or a boolean schema) that resolves
    references to the documents in ``schemas`` by their ``$id``; RowError (``invalid_schema``,
    ``schema_ref_error``, ``bad_field``) when there can be none."""
    if not isinstance(schema, (dict, bool)):
        raise RowError(f"schema must be a JSON object, got {type(schema).__name__}")
    if schemas is None:
        schemas = []
    if not isinstance(schemas, list):
        raise RowError(f"field 'schemas' must be a list of schema objects, got {type(schemas).__name__}")
    if len(schemas) > MAX_EXTRA_SCHEMAS:
        raise RowError(f"field 'schemas' holds {len(schemas)} documents (at most {MAX_EXTRA_SCHEMAS})")
    try:
        key = json.dumps([schema, schemas], sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise RowError(f"schema is not plain JSON ({e})", "invalid_schema") from None
    except RecursionError:
        raise RowError("schema nests too deeply to read", "invalid_schema") from None
    built = _validator(key)
    if isinstance(built, _Refusal):
        raise RowError(built.message, built.reason)
    return built


def _path(parts) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def _errors(validator, value) -> list:
    """Every schema violation of ``value``; a reference that only fails at validation time (a
    ``$dynamicRef`` resolved in the answer's dynamic scope) or loops forever is RowError ``schema_ref_error``."""
    try:
        return list(validator.iter_errors(value))
    except referencing.exceptions.Unresolvable as e:
        raise _unresolvable(getattr(e, "ref", e), getattr(e, "_wrapped", e)) from None
    except RecursionError:
        raise RowError("schema references loop without end (or nest past the stack)", "schema_ref_error") from None


def validate(value, schema, schemas=None) -> list[str]:
    """Schema violations of ``value`` (empty when valid), each prefixed with its JSON path."""
    return sorted(f"{_path(e.absolute_path)}: {e.message}" for e in _errors(validator_for(schema, schemas), value))


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


def _checked_fields(schema, gold) -> list[str]:
    if isinstance(gold, dict):
        return list(gold)
    if not isinstance(schema, dict):                 # a boolean schema names no fields
        return []
    # only a draft-4+ list of names counts (draft 3 spelled required as a boolean on each property)
    required = schema.get("required")
    if isinstance(required, list) and required:
        return [f for f in required if isinstance(f, str)]
    properties = schema.get("properties")
    return list(properties) if isinstance(properties, dict) else []


def json_score(answer_text: str, schema, gold=None, schemas=None) -> dict:
    """``valid`` (bool: exactly what ``jsonschema`` says of the answer object), ``fields`` (field → passed),
    the dense ``score`` in [0, 1] (see module doc) and, when not valid, ``reason`` and ``message``."""
    validator = validator_for(schema, schemas)
    answer = parse_json_answer(answer_text)
    if not isinstance(answer, dict):
        # an extraction answer is an object; a bare array or scalar is out of scope, whatever the schema says
        what = "no JSON in the final answer" if answer is None else f"the answer is a JSON {_json_kind(answer)}"
        return {"valid": False, "fields": {}, "score": 0.0, "reason": "no_json_object",
                "message": f"{what}: an extraction answer is a JSON object"}
    errors = _errors(validator, answer)
    checked = _checked_fields(schema, gold)
    bad_fields, whole_ok = set(), True
    for err in errors:
        if err.absolute_path:
            bad_fields.add(err.absolute_path[0])
        elif err.validator == "required" and _missing(err, answer) <= set(checked):
            continue                      # a missing checked field fails its own check below
        else:
            # unexpected keys, object-level constraints, and a field required elsewhere (allOf, if/then)
            # that no field check covers: without this an invalid answer could still score 1
            whole_ok = False
    fields = {f: (f in answer and f not in bad_fields
                  and (not isinstance(gold, dict) or same_value(answer[f], gold[f])))
              for f in checked}
    passed = sum(fields.values()) + (1 if whole_ok else 0)
    out = {"valid": not errors, "fields": fields, "score": passed / (len(fields) + 1)}
    if errors:
        first = errors[0]
        out.update(reason="schema_violation", message=f"{_path(first.absolute_path)}: {first.message[:300]}")
    return out


def _missing(err, answer: dict) -> set:
    """The field names a ``required`` error is about: those of its list the answer lacks."""
    names = err.validator_value if isinstance(err.validator_value, list) else []
    return {n for n in names if isinstance(n, str) and n not in answer} or {None}


def _json_kind(value) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


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


def _gold_object(gold) -> None:
    if gold is not None and not isinstance(gold, dict):
        raise RowError(f"field 'gold' must be an object, got {type(gold).__name__}", "bad_gold")


def score_row(row: dict) -> dict:
    response = response_of(row)
    schema = require(row, "schema", (dict, bool))
    gold = row.get("gold")
    _gold_object(gold)
    out = json_score(final_answer(response), schema, gold, row.get("schemas"))
    out["score"] = rescale(out["score"], row.get("score_range"))
    return out


def score_spec(spec: dict, response: str, reference: str) -> Reward:
    """The dense score against the gold object in ``reference``, with the row form's reasons: ``bad_gold``,
    the schema's (``invalid_schema``, ``schema_ref_error``, ``bad_field``) at 0, and the answer's
    (``no_json_object``, ``schema_violation``) beside its score."""
    gold = parse_json_answer(reference)
    if not isinstance(gold, dict):
        return Reward(0.0, "bad_gold")
    try:
        out = json_score(final_answer(response), spec.get("schema", {"type": "object"}), gold, spec.get("schemas"))
    except RowError as e:
        return Reward(0.0, e.reason)
    return Reward(out["score"], out.get("reason"))


VERIFIER = register_verifier(Verifier("json_schema", spec=score_spec, row=score_row,
                                      defaults={"valid": False, "fields": {}}, error_score=_range_floor))
