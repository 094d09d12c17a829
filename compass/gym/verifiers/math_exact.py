"""``math_exact``: the final answer's number equals the reference exactly.

Numbers are integers, decimals, fractions ``3/4``, negatives, ``1,234`` or
``\\boxed{..}``, compared as ``fractions.Fraction``, so ``0.75`` equals ``3/4``.
Symbolic answers (LaTeX, intervals) are the ``math`` verifier's.

- spec ``{"type": "math_exact"}``, the reference is the number;
- row (``compass gym score math_exact``): ``response`` and ``gold`` (text, or a number such as ``42``,
  written as text first; a bool is refused) -> ``correct`` (bool) and ``score`` (1.0 / 0.0).
"""
from __future__ import annotations

import re
from fractions import Fraction

from compass.gym.math_answers.extract import last_boxed
from compass.gym.registry import Verifier, register_verifier
from compass.gym.rows import RowError, response_of
from compass.gym.score import Reward, final_answer
from compass.gym.verifiers.math import gold_text

_NUM = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?|[-+]?\.\d+"
_NUM_RE = re.compile(_NUM)
_NUM_FULL = re.compile(rf"\s*({_NUM})\s*")


def _to_fraction(tok: str) -> Fraction | None:
    tok = tok.replace(",", "").replace(" ", "")
    try:
        if "/" in tok:
            num, den = tok.split("/", 1)
            d = Fraction(den)
            if d == 0:
                return None
            return Fraction(num) / d
        return Fraction(tok)
    except (ValueError, ZeroDivisionError):
        return None


def parse_number(text: str) -> Fraction | None:
    """The number a short answer states, exactly; None when it states none.

    A bare number (``-12``, ``3/4``, ``0.5``, ``1,234``) is read whole; in
    longer text (``the answer is 22.``) the last number is taken.
    """
    if text is None:
        return None
    t = text.replace("\u2212", "-").strip()
    boxed = last_boxed(t)
    if boxed is not None:
        t = boxed.strip()
    t = t.strip("$ ").rstrip(".")
    m = _NUM_FULL.fullmatch(t)
    if m:
        return _to_fraction(m.group(1))
    found = _NUM_RE.findall(t)
    return _to_fraction(found[-1]) if found else None


def judge_numbers(response: str, reference: str) -> Reward:
    """1.0 when the final answer's number equals the reference's; 0.0 with ``bad_gold`` when the reference
    states no number, with ``no_answer`` when the response states none."""
    ref = parse_number(reference)
    if ref is None:
        return Reward(0.0, "bad_gold")
    got = parse_number(final_answer(response))
    if got is None:
        return Reward(0.0, "no_answer")
    return Reward(1.0 if got == ref else 0.0)


def numbers_equal(response: str, reference: str) -> bool:
    return judge_numbers(response, reference).score == 1.0


def score_spec(spec: dict, response: str, reference: str) -> Reward:
    return judge_numbers(response, reference)


def score_row(row: dict) -> dict:
    out = judge_numbers(response_of(row), gold_text(row))
    if out.reason == "bad_gold":
        raise RowError("gold states no number", "bad_gold")
    return {"correct": out.score == 1.0, "score": out.score, **({"reason": out.reason} if out.reason else {})}


VERIFIER = register_verifier(Verifier("math_exact", spec=score_spec, row=score_row, defaults={"correct": False}))
