"""``bfcl_exec``: BFCL's executable categories (exec_simple, exec_multiple, exec_parallel,
exec_parallel_multiple): the response's calls are run, with the ground truth's, against the
category's reference functions in the code sandbox, and their results compared (binary).

- spec ``{"type": "bfcl_exec", "functions_file": "<file.py>", "timeout_s": 10}``: ``functions_file`` is the
  Python file of reference functions (BFCL's ``executable_python_function.py`` or your own); a
  relative path is taken from ``$COMPASS_BFCL_DIR`` when set, else the working directory. The
  reference is the category's answer line (or its JSON): ``{"ground_truth": ["f(x=1)", ...],
  "execution_result_type": ["exact_match" | "real_time_match" | "structural_match", ...]}``.
- row (``compass gym score bfcl_exec``): ``response``, ``ground_truth``, ``execution_result_type``,
  ``functions_file`` (optional ``timeout_s``) -> ``passed``, ``score``, ``reason``.

The response's calls are its ``<tool_call>{"name", "arguments"}</tool_call>`` blocks; the rules are
BFCL's (``compass.gym.bfcl.exec_match``). Reasons: ``no_call``, ``wrong_count``, ``execution_error``
(the model's call raised), ``wrong_result``, ``wrong_result_type``; ``bad_gold`` when a ground-truth
call fails here (BFCL's REST-backed functions need the network and API keys the sandbox never has).
"""
from __future__ import annotations

import json
import os

from compass.gym.bfcl.calls import gold_calls, response_calls
from compass.gym.bfcl.harness import resolve, run_exec
from compass.gym.registry import Verifier, register_verifier
from compass.gym.rows import RowError, require, response_of
from compass.gym.score import Reward

KINDS = ("exact_match", "real_time_match", "structural_match")
DEFAULT_TIMEOUT_S = 10.0


def answer_of(value) -> tuple[list, list[str]]:
    """(gold calls, match kinds) from an answer line; RowError(bad_gold) naming what is wrong."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise RowError(f"the reference is not JSON: {e}", "bad_gold") from None
    if not isinstance(value, dict):
        raise RowError("the reference must be an object with ground_truth and execution_result_type", "bad_gold")
    gold = gold_calls(value.get("ground_truth"))
    kinds = value.get("execution_result_type") or ["exact_match"] * len(gold)
    if isinstance(kinds, list) and len(kinds) > len(gold):
        kinds = kinds[:len(gold)]   # extra kinds are ignored, as BFCL does (one of its answers has three for two calls)
    if not isinstance(kinds, list) or len(kinds) != len(gold) or any(k not in KINDS for k in kinds):
        raise RowError(f"execution_result_type must give one of {list(KINDS)} per ground-truth call", "bad_gold")
    return gold, list(kinds)


def check(response: str, gold: list, kinds: list, functions: str, timeout_s: float) -> tuple[bool, str | None]:
    if not os.path.isfile(resolve(functions)):      # the data's fault, whatever the response
        raise RowError(f"functions_file {resolve(functions)!r} is not a file", "bad_spec")
    model = response_calls(response)
    if not model:
        return False, "no_call"
    if len(model) != len(gold):                   # decided before anything runs
        return False, "wrong_count"
    verdict = run_exec(resolve(functions), model, gold, kinds, timeout_s)
    return bool(verdict["passed"]), verdict.get("reason")


def _timeout(d: dict) -> float:
    t = d.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= 300:
        raise RowError("timeout_s must be a number of seconds in (0, 300]", "bad_spec")
    return float(t)


def score_spec(spec: dict, response: str, reference: str) -> Reward:
    functions = spec.get("functions_file")
    if not isinstance(functions, str) or not functions:
        return Reward(0.0, "bad_spec")
    try:
        gold, kinds = answer_of(reference)
        passed, reason = check(response, gold, kinds, functions, _timeout(spec))
    except RowError as e:
        return Reward(0.0, e.reason)
    return Reward(1.0 if passed else 0.0, reason)


def score_row(row: dict) -> dict:
    gold, kinds = answer_of({"ground_truth": require(row, "ground_truth"),
                             "execution_result_type": row.get("execution_result_type")})
    passed, reason = check(response_of(row), gold, kinds, require(row, "functions_file"), _timeout(row))
    return {"score": float(passed), "passed": passed, "reason": reason}


VERIFIER = register_verifier(Verifier("bfcl_exec", spec=score_spec, row=score_row, defaults={"passed": False}))
