"""Compass-Gym math verifier: does a response's final answer equal the reference answer?

Public API::

    math_equal(response, gold, timeout_s=2.0) -> bool
    extract_final_answer(text) -> str | None
    answers_equal(answer, gold, timeout_s=2.0) -> bool     # two bare answers, no extraction

Row scorer ``math`` (``compass gym score math``): input ``response`` and ``gold`` (strings),
adds ``correct`` (bool) and ``score`` (1.0 / 0.0); a row without them is a RowError.

Pipeline: ``math_extract`` picks the final answer (last box, else last "answer is X" /
"#### X", else the last number); ``math_parse`` normalises LaTeX and parses both answers
into small trees (cached); ``math_compare`` decides with Fractions, then numeric
evaluation, then sympy in a killable worker (``math_sympy``) under ``timeout_s``.

Percent: a response "28%" means 0.28; a reference "10\\%" accepts 10 or 0.1 (MATH
answers a "what percent" question with the number; math-verify reads % as /100).
"""
from __future__ import annotations

from stages.gym.math_compare import Comparer
from stages.gym.math_extract import extract_final_answer, gold_answer
from stages.gym.math_parse import parse_answer, text_key
from stages.gym.provisional import final_answer
from stages.gym.registry import register_verifier
from stages.gym.rows import RowError, register_scorer, require, response_of

__all__ = ["math_equal", "answers_equal", "extract_final_answer", "score_math_row"]

DEFAULT_TIMEOUT_S = 2.0


def answers_equal(answer: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S, symbolic: bool = True) -> bool:
    """Whether two bare final answers are mathematically equal (``answer`` is read as the response's)."""
    return Comparer(timeout_s, symbolic).answers(parse_answer(gold_answer(gold)), parse_answer(answer))


def math_equal(response: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S, symbolic: bool = True) -> bool:
    """Whether the final answer of ``response`` equals the reference answer ``gold``."""
    if not isinstance(response, str) or not isinstance(gold, str):
        return False
    gold = gold_answer(gold)
    final = final_answer(response)
    if final and len(final) <= 2 * len(gold) + 20 and text_key(final) == text_key(gold):
        return True                       # the reference copied verbatim, even where it is prose
    answer = extract_final_answer(response)
    if answer is None:
        return False
    return answers_equal(answer, gold, timeout_s, symbolic)


@register_scorer("math", defaults={"correct": False})
def score_math_row(row: dict) -> dict:
    response = response_of(row)
    gold = require(row, "gold", str)
    if not gold.strip():
        raise RowError("empty field 'gold'")
    ok = math_equal(response, gold)
    return {"correct": ok, "score": 1.0 if ok else 0.0}


@register_verifier("math", needs_reference=True)
def _math_spec(spec: dict, response: str, reference: str) -> float:
    """``{"type": "math"}``: symbolic final-answer equivalence with the reference (MATH-style LaTeX answers);
    ``math_exact`` stays the world's exact-number check."""
    return 1.0 if math_equal(response, reference, timeout_s=float(spec.get("timeout_s", DEFAULT_TIMEOUT_S))) else 0.0
