"""``code`` verifier: run a response's Python program against assert-style unit tests.

Spec: ``{"type": "code", "tests": ["assert f(1) == 2", ...], "timeout_s": 5}``
(optionally ``"early_stop": true``); the reference (the canonical solution) is not
needed. Score = the fraction of tests that pass (dense feedback, as in the paper §2.5).

The program is the last fenced Python block of the final answer (a bare
```` ``` ```` fence when there is no ```` ```python ```` one), else the whole
final answer. It runs in the code sandbox (``stages.gym.sandbox``): a forked,
locked-down child of a warm worker, with its own scratch dir, no network, no
environment, resource limits and a wall-clock limit of ``timeout_s`` for the
whole run; tests that passed before a hang still count.
"""
from __future__ import annotations

import re

from stages.gym.provisional import final_answer
from stages.gym.registry import register_verifier
from stages.gym.rows import RowError
from stages.gym.sandbox import row_timeout, run_tests

_PY_FENCE = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\n(.*?)```", re.S | re.I)
_ANY_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.S)


def extract_program(response: str) -> str:
    """The code to run: the last ```python fence of the final answer, else its last
    bare fence, else the whole final answer ("" when there is no final answer)."""
    answer = final_answer(response)
    for fence in (_PY_FENCE, _ANY_FENCE):
        blocks = fence.findall(answer)
        if blocks:
            return blocks[-1]
    return answer


@register_verifier("code", needs_reference=False)
def _code(spec: dict, response: str, reference: str) -> float:
    tests = spec.get("tests") or []
    if not isinstance(tests, list) or not tests:
        return 0.0
    try:
        timeout = row_timeout(spec)            # the same rule as the row scorer's
    except RowError:
        return 0.0
    result = run_tests(extract_program(response), [str(t) for t in tests], timeout,
                       bool(spec.get("early_stop", False)))
    return result.score
