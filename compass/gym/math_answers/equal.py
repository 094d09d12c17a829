"""Does a response's final answer equal the reference answer? The ``math`` verifier's decision.

Public API::

    math_equal(response, gold, timeout_s=2.0) -> bool
    extract_final_answer(text) -> str | None
    answers_equal(answer, gold, timeout_s=2.0) -> bool     # two bare answers, no extraction

Pipeline: ``extract`` picks the final answer (last box, else last "answer is X" /
"#### X", else the last number); ``parse`` normalises LaTeX and parses both answers
into small trees (cached); ``compare`` decides with Fractions, then numeric
evaluation, then sympy in a killable worker (``sympy_worker``) under ``timeout_s``.

Percent: a response "28%" means 0.28; a reference "10\\%" accepts 10 or 0.1 (MATH
answers a "what percent" question with the number; math-verify reads % as /100).
"""
from __future__ import annotations

from compass.gym.math_answers.compare import Comparer
from compass.gym.math_answers.extract import extract_final_answer, gold_answer
from compass.gym.math_answers.parse import parse_answer, text_key
from compass.gym.score import final_answer

__all__ = ["math_equal", "answers_equal", "extract_final_answer"]

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
