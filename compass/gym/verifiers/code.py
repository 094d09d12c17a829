"""``code``: run a response's Python program against assert-style unit tests; score = the pass rate.

- spec ``{"type": "code", "tests": ["assert f(1) == 2", ...], "timeout_s": 5}``
  (optionally ``"early_stop": true``); the reference (the canonical solution) is not
  needed. Dense feedback, as in the paper §2.5: the fraction of tests that pass.
- row (``compass gym score code``): ``response``, ``tests`` (a snippet that raises on
  failure, or a list, one per test), optional ``timeout_s`` and ``early_stop`` ->
  ``passed``, ``total``, ``status`` and ``score`` (the pass rate); a run that did not pass
  every test adds ``reason`` (``syntax_error``, ``runtime_error:NameError``, ``test_failed``,
  ``sandbox_refused:os.system``, ``timeout``, ``memory_limit``, ``no_program``, ...) and
  ``message`` (the first failure: its line, or the test and the exception).

The program is the last fenced Python block of the final answer (a bare
```` ``` ```` fence when there is no ```` ```python ```` one), else the whole
final answer. It runs in the code sandbox (``compass.gym.sandbox``): a forked,
locked-down child of a warm worker, with its own scratch dir, no network, no
environment, resource limits and a wall-clock limit of ``timeout_s`` for the
whole run; tests that passed before a hang still count.
"""
from __future__ import annotations

import re

from compass.gym.registry import Verifier, register_verifier
from compass.gym.rows import RowError, require, response_of
from compass.gym.sandbox.pool import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, Result, run_tests
from compass.gym.score import Reward, final_answer

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


# Sandbox statuses that end a run before every test had its say, as compass.gym.reasons codes.
_STATUS_REASON = {"timeout": "timeout", "memory": "memory_limit", "cpu_limit": "cpu_limit",
                  "output_limit": "output_limit", "crash": "crash", "infra": "sandbox_infra"}


def reason_of(result: Result) -> tuple[str | None, str]:
    """(reason code, message) of a run that did not pass every test; (None, "") when it did.

    The program's own first failure (``syntax_error``, ``runtime_error:NameError``,
    ``sandbox_refused:os.system``, ``test_failed``) comes from the sandbox; a run the sandbox stopped
    (``timeout``, ``memory_limit``, ...) says so, with the tests that passed before it."""
    code, message = result.why
    if result.status == "ok":
        if result.passed == result.total:
            return None, ""
        return code or "test_failed", message or f"{result.total - result.passed} of {result.total} tests failed"
    if result.status == "error":
        return code or "runtime_error", message or "the program raised before any test ran"
    if result.status == "crash" and result.detail == "empty program":
        return "no_program", "no program in the final answer"
    stopped = _STATUS_REASON.get(result.status, result.status)
    tail = f" ({message})" if message else ""
    return stopped, f"{result.status}: {result.detail or 'stopped'} after {result.passed} passing tests{tail}"


def row_timeout(row: dict) -> float:
    """``row['timeout_s']`` (default ``DEFAULT_TIMEOUT_S``); RowError unless a number in (0, MAX_TIMEOUT_S]."""
    value = row.get("timeout_s", DEFAULT_TIMEOUT_S)
    if value is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_TIMEOUT_S:
        raise RowError(f"field 'timeout_s' must be a number in (0, {MAX_TIMEOUT_S:g}], got {value!r}")
    return float(value)


def _row_tests(row: dict) -> list[str]:
    tests = require(row, "tests", (str, list))
    if isinstance(tests, str):
        tests = [tests]
    if not tests:
        raise RowError("field 'tests' is an empty list", "missing_field")
    if not all(isinstance(t, str) for t in tests):
        raise RowError("field 'tests' must be a string or a list of strings")
    return tests


def score_spec(spec: dict, response: str, reference: str) -> Reward:
    tests = spec.get("tests") or []
    if not isinstance(tests, list) or not tests:
        return Reward(0.0, "bad_spec")
    try:
        timeout = row_timeout(spec)            # the same rule as the row form's
    except RowError:
        return Reward(0.0, "bad_spec")
    result = run_tests(extract_program(response), [str(t) for t in tests], timeout,
                       bool(spec.get("early_stop", False)))
    return Reward(result.score, reason_of(result)[0])


def score_row(row: dict) -> dict:
    response = response_of(row)
    tests = _row_tests(row)
    timeout = row_timeout(row)
    early_stop = bool(row.get("early_stop", False))
    res = run_tests(extract_program(response), tests, timeout, early_stop)
    out = {"passed": res.passed, "total": len(tests), "score": res.passed / len(tests), "status": res.status}
    reason, message = reason_of(res)
    if reason is not None:
        out.update(reason=reason, message=message)
    return out


VERIFIER = register_verifier(Verifier("code", spec=score_spec, row=score_row, defaults={"passed": 0, "total": 0},
                                      needs_reference=False))
