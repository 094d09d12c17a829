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
  accepted, as BFCL does), lists item by item (strings standardised), objects key by key.

Else 0, with the first reason found (``wrong_count``, ``wrong_func_name``, ``missing_required``,
``unexpected_param``, ``value_error``; ``no_call`` when nothing parses). Not checked: the
parameter types of the function description (the spec holds only the ground truth; a value of the
wrong type that equals an allowed one by value passes), and BFCL's Java/JavaScript type conversions.
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


def allowed(value, options: list) -> bool:
    """Whether ``value`` equals one of ``options`` (the empty string only marks optional, never matches)."""
    v = _norm(value)
    return any(v == _norm(o) for o in options if o != "")


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


def call_error(call: dict, name: str, params: dict[str, list]) -> str | None:
    """Why ``call`` does not satisfy the expected call, or None."""
    if call["name"] != name:
        return "wrong_func_name"
    args = call["arguments"]
    if any(p not in args and "" not in opts for p, opts in params.items()):
        return "missing_required"
    if any(a not in params for a in args):
        return "unexpected_param"
    if any(not allowed(v, params[a]) for a, v in args.items()):
        return "value_error"
    return None


def check(response: str, gold: list[tuple[str, dict]]) -> tuple[bool, str | None]:
    """(passed, reason): the response's calls against the expected ones, one to one in any order."""
    calls = predicted_calls(response)
    if not calls:
        return False, "no_call"
    if len(calls) != len(gold):
        return False, "wrong_count"
    # bipartite matching by augmenting paths: a call may satisfy several expected ones
    ok = [[call_error(c, n, p) is None for c in calls] for n, p in gold]
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
    reasons = [call_error(c, *gold[first]) for c in calls]
    same_name = [r for r in reasons if r != "wrong_func_name"]
    return False, (same_name[0] if same_name else "wrong_func_name")


def score_spec(spec: dict, response: str, reference: str) -> Reward:
    try:
        gold = ground_truth(reference)
    except RowError as e:
        return Reward(0.0, e.reason)
    passed, reason = check(response, gold)
    return Reward(1.0 if passed else 0.0, reason)


def score_row(row: dict) -> dict:
    passed, reason = check(response_of(row), ground_truth(require(row, "ground_truth")))
    return {"score": float(passed), "passed": passed, "reason": reason}


VERIFIER = register_verifier(Verifier("bfcl_ast", spec=score_spec, row=score_row, defaults={"passed": False}))
