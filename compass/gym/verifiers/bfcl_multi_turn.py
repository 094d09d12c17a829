"""``bfcl_multi_turn``: BFCL's multi-turn categories: the model's calls, turn by turn, change the state
of the category's classes (a file system, a trading bot, ...), and after each turn that state and the
results must match what the ground truth's calls produce (binary; rules in ``compass.gym.bfcl.turns``).

- spec ``{"type": "bfcl_multi_turn", "classes_dir": "<dir>", "package": "<dotted>", "timeout_s": 30,
  "long_context": false}``: ``classes_dir`` is the directory of the classes' Python files (BFCL's
  ``func_source_code``), served in the sandbox as modules of ``package`` (default BFCL's own, so its
  files' imports of each other resolve); a relative path is taken from ``$COMPASS_BFCL_DIR`` when set,
  else the working directory. The reference is JSON ``{"ground_truth": [[call, ...] per turn],
  "initial_config": {Class: state}, "involved_classes": [Class, ...]}``.
- row (``compass gym score bfcl_multi_turn``): ``response``, ``ground_truth``, ``initial_config``,
  ``involved_classes``, ``classes_dir`` (optional ``package``, ``timeout_s``, ``long_context``).

The response is the model's side of the conversation: a JSON list with one entry per user turn, each
the text the model wrote in that turn (a string, or a list of strings, one per step after a tool
result); its calls are the ``<tool_call>`` blocks, in order. Reasons: ``wrong_turn_count``,
``empty_turn``, ``state_mismatch``, ``response_mismatch``; ``bad_gold``/``bad_spec`` for the data.
"""
from __future__ import annotations

import json
import os

from compass.gym.bfcl.calls import gold_calls, response_calls
from compass.gym.bfcl.harness import BFCL_PACKAGE, resolve, run_turns
from compass.gym.registry import Verifier, register_verifier
from compass.gym.rows import RowError, require, response_of
from compass.gym.score import Reward

DEFAULT_TIMEOUT_S = 30.0


def _json(value, what: str, reason: str):
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as e:
            raise RowError(f"{what} is not JSON: {e}", reason) from None
    return value


def reference_of(value) -> tuple[list, dict, list]:
    """(per-turn gold calls, initial_config, involved_classes); RowError(bad_gold) naming the field."""
    value = _json(value, "the reference", "bad_gold")
    if not isinstance(value, dict):
        raise RowError("the reference must be an object with ground_truth, initial_config, involved_classes",
                       "bad_gold")
    turns = value.get("ground_truth")
    if not isinstance(turns, list) or not turns:
        raise RowError("ground_truth must be a non-empty list of turns, each a list of call strings", "bad_gold")
    gold = [gold_calls(t, f"ground truth of turn {i}") for i, t in enumerate(turns)]
    config = _json(value.get("initial_config") or {}, "initial_config", "bad_gold")
    classes = _json(value.get("involved_classes"), "involved_classes", "bad_gold")
    if not isinstance(config, dict) or not isinstance(classes, list) or not classes \
            or not all(isinstance(c, str) for c in classes):
        raise RowError("initial_config must be an object and involved_classes a non-empty list of class names",
                       "bad_gold")
    return gold, config, classes


def turn_calls(response) -> list[list] | None:
    """Per turn, the calls of the model's text in that turn; None when the response is not a list of turns."""
    if isinstance(response, str):
        try:
            response = json.loads(response)
        except ValueError:
            return None
    if not isinstance(response, list):
        return None
    out = []
    for turn in response:
        steps = turn if isinstance(turn, list) else [turn]
        if not all(isinstance(s, str) for s in steps):
            return None
        out.append([c for s in steps for c in response_calls(s)])
    return out


def check(response, reference, spec: dict) -> tuple[bool, str | None]:
    gold, config, classes = reference_of(reference)
    where = spec.get("classes_dir")
    if not isinstance(where, str) or not where:
        raise RowError("the spec needs 'classes_dir': the directory of the category's class files", "bad_spec")
    if not os.path.isdir(resolve(where)):
        raise RowError(f"classes_dir {resolve(where)!r} is not a directory", "bad_spec")
    timeout = spec.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 300:
        raise RowError("timeout_s must be a number of seconds in (0, 300]", "bad_spec")
    model = turn_calls(response)                 # the data is sound: now the response
    if model is None or len(model) != len(gold):
        return False, "wrong_turn_count"
    verdict = run_turns(resolve(where), spec.get("package", BFCL_PACKAGE), classes, config, model, gold,
                        bool(spec.get("long_context", False)), float(timeout))
    return bool(verdict["passed"]), verdict.get("reason")


def score_spec(spec: dict, response: str, reference: str) -> Reward:
    try:
        passed, reason = check(response, reference, spec)
    except RowError as e:
        return Reward(0.0, e.reason)
    return Reward(1.0 if passed else 0.0, reason)


def score_row(row: dict) -> dict:
    reference = {k: require(row, k) for k in ("ground_truth", "involved_classes")}
    reference["initial_config"] = row.get("initial_config") or {}
    response = row.get("response")
    if response is None:
        response = response_of(row)
    passed, reason = check(response, reference, row)
    return {"score": float(passed), "passed": passed, "reason": reason}


VERIFIER = register_verifier(Verifier("bfcl_multi_turn", spec=score_spec, row=score_row,
                                      defaults={"passed": False}))
