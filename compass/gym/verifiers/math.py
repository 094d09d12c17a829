"""``math``: the final answer is mathematically equal to the reference (MATH-style LaTeX answers).

- spec ``{"type": "math"}`` (optional ``timeout_s``), the reference is the answer;
  imported MATH-style sets use it, while the world's arithmetic stays ``math_exact``;
- row (``compass gym score math``): ``response`` and ``gold`` (strings) -> ``correct``
  (bool) and ``score`` (1.0 / 0.0); a row without them is a RowError.

The decision is ``compass.gym.math_answers.equal.math_equal``.
"""
from __future__ import annotations

from compass.gym.math_answers.equal import DEFAULT_TIMEOUT_S, math_equal
from compass.gym.registry import Verifier, register_verifier
from compass.gym.rows import gold_of, response_of


def score_spec(spec: dict, response: str, reference: str) -> float:
    return 1.0 if math_equal(response, reference, timeout_s=float(spec.get("timeout_s", DEFAULT_TIMEOUT_S))) else 0.0


def score_row(row: dict) -> dict:
    ok = math_equal(response_of(row), gold_of(row))
    return {"correct": ok, "score": 1.0 if ok else 0.0}


VERIFIER = register_verifier(Verifier("math", spec=score_spec, row=score_row, defaults={"correct": False}))
