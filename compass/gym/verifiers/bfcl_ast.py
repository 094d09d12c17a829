"""``bfcl_ast``: a tool-call answer checked the way BFCL's AST category checks it (binary).

The reference is BFCL's ground truth: a JSON list with one object per expected call,
``{"<function>": {"<param>": [allowed value, ...], ...}}``; an allowed ``""`` marks the parameter
optional. The response's calls are the parsable ``<tool_call>{"name", "arguments"}</tool_call>``
blocks of its final answer (as ``tool_call`` reads them). Score 1 when the calls and the expected
ones pair up one to one, in any order (BFCL's parallel categories; one call in the simple ones),
each pair with

- the same function name;
- every non-optional parameter present, and no parameter the ground truth does not list;
- every value allowed: strings compared after BFCL's standardisation (spaces and ``,./-_*^``
  removed, lower case, ``'`` as ``"``), numbers by value (an integer where a float is expected is
  accepted, as BFCL does), lists item by item (strings standardised), objects key by key against
  BFCL's allowed values per key (``{"min": [300000], "max": [400000, ""]}``: a key whose list holds
  ``""`` may be left out).

When the spec carries the function descriptions (``"functions"``: BFCL's ``function`` field, the
JSON schemas offered to the model), each call is also checked against its function's description as
BFCL's Python checker does: parameters it marks required are present, no parameter it does not
describe, and each value has the described type (``type_error``): ``string``, ``integer``,
``float`` (an integer accepted), ``boolean``, ``array``/``tuple`` (list; items of the described
item type, one level deep), ``dict``, ``any`` (string); a value of the type the ground truth's
allowed values have is accepted too (BFCL's "variable" case, a name where a value was described).

Else 0, with the first reason found (``wrong_count``, ``wrong_func_name``, ``missing_required``,
``unexpected_param``, ``type_error``, ``value_error``; ``no_call`` when nothing parses). Not
checked: BFCL's Java/JavaScript type conversions.
The ``tool_call`` verifier is the dense RL reward (paper eq. 4-10); this one is the benchmark's pass/fail.
"""
from __future__ import annotations

import json
import re

from compass.gym.registry import Verifier, register_verifier
from compass.gym.rows import RowError, require, response_of
from compass.gym.score import Reward
from compass.gym.verifiers.tool_call import json_list, predicted_calls

_STRIP = re.compile(r"[ ,./\-_*^]")


def standardize(s: str) -> str:
    return _STRIP.sub("", s).lower().replace("'", '"')


def _norm(v):
    """A value in comparable form: standardised strings, numbers as floats, containers item by item."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, (int, float)):
        return ("num", float(v))
    if isinstance(v, str):
        return ("str", standardize(v))
    if isinstance(v, list):
        return ("list", tuple(_norm(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted((k, _norm(x)) for k, x in v.items())))
    return ("other", json.dumps(v, sort_keys=True))


def _is_allowed_dict(option) -> bool:
    """A dict whose values are lists of allowed values: BFCL's form for an object parameter."""
    return isinstance(option, dict) and bool(option) and all(isinstance(x, list) for x in option.values())


def _dict_fits(value, option: dict) -> bool:
    """An object value against BFCL's ``{key: [allowed, ...]}``: each key known and allowed, the absent
    ones optional (their list holds "")."""
    if not isinstance(value, dict):
        return False
    if any(k not in option or not allowed(x, option[k]) for k, x in value.items()):
        return False
    return all(k in value or "" in opts for k, opts in option.items())


def _fits(value, option) -> bool:
    if _is_allowed_dict(option):
        return _dict_fits(value, option)
    if isinstance(option, list) and option and all(_is_allowed_dict(o) for o in option):
        return isinstance(value, list) and len(value) == len(option) and \
            all(_dict_fits(v, o) for v, o in zip(value, option))     # a list of objects, item by item
    return _norm(value) == _norm(option)


def allowed(value, options: list) -> bool:
    """Whether ``value`` equals one of ``options`` (the empty string only marks optional, never matches);
    an object (or a list of objects) is matched key by key against allowed values per key, as BFCL does."""
    return any(_fits(value, o) for o in options if o != "")


def ground_truth(value) -> list[tuple[str, dict[str, list]]]:
    """BFCL ground truth (a list, or its JSON) as (function, {param: allowed values}); RowError if malformed."""
    value = json_list(value, "the ground truth")
    calls = []
    for j, g in enumerate(value):
        if not (isinstance(g, dict) and len(g) == 1):
            raise RowError(f"ground truth [{j}] is not a one-key object {{function: {{param: [values]}}}}", "bad_gold")
        (name, params), = g.items()
        if not isinstance(params, dict) or not all(isinstance(v, list) for v in params.values()):
            raise RowError(f"ground truth [{j}] ({name}): each parameter needs a list of allowed values", "bad_gold")
        calls.append((name, params))
    return calls


# BFCL's Python reading of a description's types (tuple arrives as a JSON list; "any" is read as text)
PY_TYPES = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list,
            "dict": dict, "any": str}


def _options_type(options: list):
    """The type of the first allowed value ("" marks optional, not a value); None when there is none."""
    return next((type(o) for o in options if o != ""), None)


def _item_ok(item, item_type: type, option: list) -> bool:
    return type(item) is item_type or type(item) is _options_type(option)


def type_ok(value, options: list, schema: dict) -> bool:
    """Whether ``value`` has the type ``schema`` describes (BFCL's Python type check, one level deep)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    expected = PY_TYPES.get(kind)
    if expected is None:                      # a type BFCL's Python checker does not know: not checked
        return True
    if kind == "float" and type(value) is int:
        value = float(value)
    if type(value) is expected:
        items = schema.get("items")
        item_type = PY_TYPES.get(items.get("type")) if kind in ("array", "tuple") and isinstance(items, dict) else None
        if item_type is None:
            return True
        # items pass against some allowed value that is a list (an allowed value that is not a list passes)
        if any(not isinstance(o, list) or all(_item_ok(x, item_type, o) for x in value) for o in options):
            return True
        return False
    return type(value) is _options_type(options)   # a variable's name where a value was described


def descriptions(functions) -> dict[str, dict]:
    """Function name -> its parameters schema, from BFCL's ``function`` field (a list or one object)."""
    if isinstance(functions, str):
        try:
            functions = json.loads(functions)
        except ValueError as e:
            raise RowError(f"'functions' is not JSON: {e}", "bad_spec") from None
    if isinstance(functions, dict):
        functions = [functions]
    if not isinstance(functions, list):
        raise RowError("'functions' must be a list of function descriptions", "bad_spec")
    out = {}
    for f in functions:
        if isinstance(f, dict) and isinstance(f.get("name"), str):
            out[f["name"]] = f.get("parameters") or {}
    return out


def call_error(call: dict, name: str, params: dict[str, list], described: dict | None = None) -> str | None:
    """Why ``call`` does not satisfy the expected call (and its description, when given), or None."""
    if call["name"] != name:
        return "wrong_func_name"
    args = call["arguments"]
    schema = (described or {}).get(name)
    required = (schema or {}).get("required")
    required = required if isinstance(required, list) else []
    if any(p not in args and "" not in opts for p, opts in params.items()) or any(p not in args for p in required):
        return "missing_required"
    props = (schema or {}).get("properties")
    if any(a not in params for a in args) or (isinstance(props, dict) and any(a not in props for a in args)):
        return "unexpected_param"
    if isinstance(props, dict) and any(not type_ok(v, params[a], props[a]) for a, v in args.items()):
        return "type_error"
    if any(not allowed(v, params[a]) for a, v in args.items()):
        return "value_error"
    return None


def check(response: str, gold: list[tuple[str, dict]], described: dict | None = None) -> tuple[bool, str | None]:
    """(passed, reason): the response's calls against the expected ones, one to one in any order."""
    calls = predicted_calls(response)
    if not calls:
        return False, "no_call"
    if len(calls) != len(gold):
        return False, "wrong_count"
    # bipartite matching by augmenting paths: a call may satisfy several expected ones
    ok = [[call_error(c, n, p, described) is None for c in calls] for n, p in gold]
    match: dict[int, int] = {}                     # call index -> gold index

    def augment(g: int, seen: set) -> bool:
        for c, fits in enumerate(ok[g]):
            if fits and c not in seen:
                seen.add(c)
                if c not in match or augment(match[c], seen):
                    match[c] = g
                    return True
        return False
    if all(augment(g, set()) for g in range(len(gold))):
        return True, None
    first = next(g for g in range(len(gold)) if g not in match.values())
    reasons = [call_error(c, *gold[first], described) for c in calls]
    same_name = [r for r in reasons if r != "wrong_func_name"]
    return False, (same_name[0] if same_name else "wrong_func_name")


def score_spec(spec: dict, response: str, reference: str) -> Reward:
    try:
        gold = ground_truth(reference)
        described = descriptions(spec["functions"]) if spec.get("functions") is not None else None
    except RowError as e:
        return Reward(0.0, e.reason)
    passed, reason = check(response, gold, described)
    return Reward(1.0 if passed else 0.0, reason)


def score_row(row: dict) -> dict:
    described = descriptions(row["functions"]) if row.get("functions") is not None else None
    passed, reason = check(response_of(row), ground_truth(require(row, "ground_truth")), described)
    return {"score": float(passed), "passed": passed, "reason": reason}


VERIFIER = register_verifier(Verifier("bfcl_ast", spec=score_spec, row=score_row, defaults={"passed": False}))
