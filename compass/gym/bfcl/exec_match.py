"""BFCL's executable checker, as rules on results (no imports: runs inside the sandbox too).

A model call passes when its result matches the result of the ground-truth call, by the kind the
answer file names per call:
- ``exact_match``: equal (a tuple result counts as a list);
- ``real_time_match``: both numbers, the model's within ±20% of the expected (BFCL's allowed
  difference, 0.2; results that change with time, as live exchange rates do);
- ``structural_match``: the same type; a dict with the same keys, a list of the same length.
Several calls (the multiple and parallel categories) must be as many as the expected ones; each
expected call, in order, takes the first model call not yet taken whose result matches (BFCL's
greedy pairing, kept so that scores agree with its checker).
"""

REAL_TIME_ALLOWED_DIFFERENCE = 0.2


def _as_list(v):
    return list(v) if isinstance(v, tuple) else v


def result_error(got, expected, kind: str):
    """Why ``got`` does not match ``expected`` under ``kind``, or None."""
    got, expected = _as_list(got), _as_list(expected)
    if kind == "exact_match":
        return None if got == expected else "wrong_result"
    if kind == "real_time_match":
        numbers = (int, float)
        if type(got) not in numbers or type(expected) not in numbers:   # bool is not a number here
            return "wrong_result"
        low, high = expected * (1 - REAL_TIME_ALLOWED_DIFFERENCE), expected * (1 + REAL_TIME_ALLOWED_DIFFERENCE)
        return None if low <= got <= high else "wrong_result"
    if kind == "structural_match":
        if type(got) is not type(expected):
            return "wrong_result_type"
        if isinstance(got, dict) and set(got) != set(expected):
            return "wrong_result_type"
        if isinstance(got, list) and len(got) != len(expected):
            return "wrong_result_type"
        return None
    raise ValueError(f"unknown execution_result_type {kind!r}")


def match_results(model: list, expected: list, kinds: list):
    """(passed, reason) for model results against the expected ones.

    ``model``: per model call ``(ok, result_or_error_text)``; ``expected``: the expected results;
    ``kinds``: one match kind per expected result."""
    if len(model) != len(expected):
        return False, "wrong_count"
    taken = set()
    for want, kind in zip(expected, kinds):
        first_error = None
        for i, (ok, got) in enumerate(model):
            if i in taken:
                continue
            error = result_error(got, want, kind) if ok else "execution_error"
            if error is None:
                taken.add(i)
                break
            first_error = first_error or error
        else:
            return False, first_error or "wrong_result"
    return True, None
