"""``tool_call``: the tool-use reward of paper §2.5.1 eq. (4)-(10), an order-aware format term plus dense correctness.

- row (``compass gym score tool_call``): ``response`` and ``gold_calls`` (a list of
  ``{"name", "arguments"}``, or its JSON) -> ``format`` (0|1), ``correct``
  (R_correct) and ``score`` (R_final, in [-3, 4]; an unscorable row gets -3);
- spec ``{"type": "tool_call"}``, the reference is the gold calls' JSON: R_final
  rescaled to [0, 1].

    R_final   = R_format + R_correct                                   (4)
    R_format  = 1 if the trace is well-formed in the required order    (5)
    r_name    = |N_G ∩ N_P| / |N_G ∪ N_P|                              (6)
    r_param   = Σ_{matched pairs} Jaccard(keys(G_j), keys(P_i))        (7)
    r_value   = Σ_{matched pairs} Σ_{k ∈ keys(G_j)} 1[G_j[k] = P_i[k]] (8)
    S_max     = 1 + |G| + Σ_j |keys(G_j)|                              (9)
    R_correct = 6 · R_max / S_max − 3 ∈ [−3, 3]                       (10)

R_max = r_name + the largest r_param + r_value over one-to-one matchings of
predicted to gold calls, found with ``scipy.optimize.linear_sum_assignment``.
A predicted call can only be matched to a gold call of the same tool (as in
ToolRL's reference code): otherwise calling the wrong tool, even a
destructive one, with the right arguments would earn key and value credit.
r_name stays the set term of eq. (6) over the whole turn; unmatched
predicted calls cost only through it.

Format (eq. 5): ``<think>…</think>`` comes first, then either a (possibly
empty) run of ``<tool_call>{"name": str, "arguments": {...}}</tool_call>``
blocks with only whitespace between them, or a text answer with no tool-call
markup. Correctness reads the calls whose blocks parse in the final answer
(``compass.gym.score.final_answer``: after ``</think>``; nothing when a thought was
never closed), even when the format check fails, so the two terms stay
independent (as in ToolRL).

Conventions for the empty cases the paper leaves open: no gold and no
predicted calls → r_name = 1 (R_correct = 3); two calls that both take no
arguments have key Jaccard 1. Values are equal when they are equal JSON of
the same type (``1`` ≠ ``"1"``, ``true`` ≠ ``1``; ``1`` = ``1.0``).
"""
from __future__ import annotations

import json
import re

import numpy as np
from scipy.optimize import linear_sum_assignment

from compass.gym.registry import Verifier, register_verifier
from compass.gym.rows import RowError, require, response_of
from compass.gym.score import THINK_CLOSE, THINK_OPEN, Reward, final_answer
from compass.gym.verifiers.json_schema import same_value

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(CALL_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE), re.S)
R_CORRECT_MIN, R_CORRECT_MAX = -3.0, 3.0


def as_call(obj) -> dict | None:
    """``obj`` as ``{"name": str, "arguments": dict}`` (``arguments`` may be a JSON string); None if it is not a call."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return {"name": obj["name"], "arguments": args}


def _parse_block(body: str) -> dict | None:
    try:
        return as_call(json.loads(body))
    except (ValueError, RecursionError):
        return None


def predicted_calls(response: str) -> list[dict]:
    """Every call in the response's final answer whose block parses (malformed blocks are skipped)."""
    calls = (_parse_block(body) for body in _BLOCK.findall(final_answer(response)))
    return [c for c in calls if c is not None]


def format_ok(response: str) -> bool:
    """Eq. (5): ``<think>…</think>`` first, then only tool-call blocks that parse, or only text."""
    text = response.strip()
    if not text.startswith(THINK_OPEN) or text.count(THINK_OPEN) != 1 or text.count(THINK_CLOSE) != 1:
        return False
    rest = text.split(THINK_CLOSE, 1)[1].strip()
    if CALL_OPEN not in rest and CALL_CLOSE not in rest:
        return True                                   # an empty run of calls, or a text answer
    pos = 0
    while pos < len(rest):                            # nothing but blocks and whitespace
        m = _BLOCK.match(rest, pos)
        if m is None or _parse_block(m.group(1)) is None:
            return False
        pos = m.end()
        while pos < len(rest) and rest[pos].isspace():
            pos += 1
    return True


def _jaccard(a: set, b: set) -> float:
    return 1.0 if not a and not b else len(a & b) / len(a | b)


def key_jaccard(gold: dict, pred: dict) -> float:
    """Eq. (7) for one pair: Jaccard overlap of the two calls' parameter names."""
    return _jaccard(set(gold["arguments"]), set(pred["arguments"]))


def value_matches(gold: dict, pred: dict) -> int:
    """Eq. (8) for one pair: gold keys whose value the prediction repeats exactly."""
    g, p = gold["arguments"], pred["arguments"]
    return sum(1 for k in g if k in p and same_value(p[k], g[k], fold_text=False))


def correctness(pred: list[dict], gold: list[dict]) -> dict:
    """Eq. (6)-(10) for predicted calls ``pred`` [m] against gold calls ``gold`` [n].

    Returns ``r_name``, ``r_param``, ``r_value`` (of the optimal matching),
    ``R_max``, ``S_max`` and ``R_correct`` in [-3, 3], plus ``matching``: the
    (gold index, predicted index) pairs chosen.
    """
    r_name = _jaccard({c["name"] for c in gold}, {c["name"] for c in pred})      # (6)
    pairs: list[tuple[int, int]] = []
    r_param = r_value = 0.0
    if gold and pred:
        same = np.array([[g["name"] == p["name"] for p in pred] for g in gold])    # [n, m]: pairs allowed
        keys = np.array([[key_jaccard(g, p) for p in pred] for g in gold]) * same
        values = np.array([[value_matches(g, p) for p in pred] for g in gold], dtype=np.float64) * same
        rows, cols = linear_sum_assignment(keys + values, maximize=True)
        pairs = [(int(j), int(i)) for j, i in zip(rows, cols) if same[j, i]]
        r_param = float(keys[rows, cols].sum())                                   # (7)
        r_value = float(values[rows, cols].sum())                                 # (8)
    r_max = r_name + r_param + r_value
    s_max = 1 + len(gold) + sum(len(g["arguments"]) for g in gold)                # (9)
    r_correct = 6.0 * r_max / s_max - 3.0                                        # (10)
    return {"r_name": r_name, "r_param": r_param, "r_value": r_value, "R_max": r_max, "S_max": s_max,
            "R_correct": min(R_CORRECT_MAX, max(R_CORRECT_MIN, r_correct)), "matching": pairs}


def tool_reward(response: str, gold: list[dict]) -> dict:
    """Eq. (4): ``format`` (0|1), ``correct`` (R_correct), ``score`` = format + correct ∈ [-3, 4]."""
    fmt = 1 if format_ok(response) else 0
    corr = correctness(predicted_calls(response), gold)["R_correct"]
    return {"format": fmt, "correct": corr, "score": fmt + corr}


def json_list(value, what: str) -> list:
    """A reference that must be a list (or a JSON string of one); RowError ``bad_gold`` naming ``what``."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise RowError(f"{what} is not valid JSON", "bad_gold") from None
    if not isinstance(value, list):
        raise RowError(f"{what} must be a list of calls, got {type(value).__name__}", "bad_gold")
    return value


def gold_calls(value) -> list[dict]:
    """The gold calls of a row (a list, or a JSON string of one); RowError naming the bad entry."""
    value = json_list(value, "gold_calls")
    calls = []
    for j, g in enumerate(value):
        call = as_call(g)
        if call is None:
            raise RowError(f"gold_calls[{j}] is not a {{'name': str, 'arguments': object}} call", "bad_gold")
        calls.append(call)
    return calls


def score_row(row: dict) -> dict:
    gold = gold_calls(require(row, "gold_calls"))
    return tool_reward(response_of(row), gold)


def score_spec(spec: dict, response: str, reference: str) -> Reward | float:
    """Eq. (4) rescaled from [-3, 4] to [0, 1] (1 = well-formed and all correct)."""
    try:
        gold = gold_calls(reference)
    except RowError as e:
        return Reward(0.0, e.reason)
    r = tool_reward(response, gold)
    return (r["score"] - R_CORRECT_MIN) / (1.0 + R_CORRECT_MAX - R_CORRECT_MIN)


VERIFIER = register_verifier(Verifier("tool_call", spec=score_spec, row=score_row,
                                      defaults={"format": 0, "correct": R_CORRECT_MIN}, error_score=R_CORRECT_MIN))
