"""``math``: the final answer is mathematically equal to the reference (MATH-style LaTeX answers).

- spec ``{"type": "math"}`` (optional ``timeout_s``), the reference is the answer;
  imported MATH-style sets use it, while the world's arithmetic stays ``math_exact``. It returns
  ``Reward(score, reason)``: ``no_answer`` when the response states no final answer, ``bad_gold``
  when the reference cannot be read as one, ``unparsed_final_statement`` when what it states cannot;
- row (``compass gym score math``): ``response`` and ``gold`` (text, or a number such as ``42`` or
  ``0.5``, which is written as text first) -> ``correct`` (bool) and ``score`` (1.0 / 0.0), plus
  ``reason`` ``no_answer`` when the response states none, or ``unparsed_final_statement`` with
  ``answer`` (the statement) when what it states could not be read as mathematics or text (a zero
  that may be the verifier's false negative); a row without them, or whose gold is unreadable or a
  bool, is a RowError.

The decision is ``compass.gym.math_answers.equal.judge_math``.
"""
from __future__ import annotations

import math
from decimal import Decimal

from compass.gym.math_answers.equal import DEFAULT_TIMEOUT_S, judge_math
from compass.gym.registry import Verifier, register_verifier
from compass.gym.rows import RowError, gold_of, response_of
from compass.gym.score import Reward


def number_as_text(value: int | float) -> str:
    """A numeric gold as the text a model would write: ``42``, ``0.5``, ``0.00001`` (never ``1e-05``)."""
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        raise RowError(f"field 'gold' must be a finite number, got {value!r}", "bad_gold")
    if value.is_integer():
        return str(int(value))
    return format(Decimal(repr(value)), "f")      # repr: the shortest text that reads back as this float


def gold_text(row: dict) -> str:
    """The row's gold as text: a str as it is, an int or float written out (a bool is refused: True is not 1)."""
    gold = row.get("gold")
    if isinstance(gold, (int, float)) and not isinstance(gold, bool):
        return number_as_text(gold)
    return gold_of(row)


def score_spec(spec: dict, response: str, reference: str) -> Reward:
    verdict = judge_math(response, reference, timeout_s=float(spec.get("timeout_s", DEFAULT_TIMEOUT_S)))
    return Reward(1.0 if verdict.equal else 0.0, verdict.reason)


def score_row(row: dict) -> dict:
    verdict = judge_math(response_of(row), gold_text(row))
    if verdict.reason == "bad_gold":
        raise RowError("field 'gold' cannot be read as an answer", "bad_gold")
    out = {"correct": verdict.equal, "score": 1.0 if verdict.equal else 0.0}
    if verdict.reason is not None:
        out["reason"] = verdict.reason
    if verdict.answer is not None:
        out["answer"] = verdict.answer
    return out


VERIFIER = register_verifier(Verifier("math", spec=score_spec, row=score_row, defaults={"correct": False}))
