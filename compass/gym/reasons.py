"""Why a reward is what it is: the reason codes rows and rewards carry, and whose fault each one is.

Every row a verifier cannot score carries ``error`` (a message for people) and ``reason`` (a code for
counting); a code row whose program did not pass carries ``reason`` and ``message`` too. The RL engine
counts reasons per step (``reward_errors_by_reason``) and the reward audit asks of each all-fail group
whether the answers were wrong or the verifier failed: the codes below that are the verifier's (or its
input's) fault make that call.

A code may carry a detail after a colon (``sandbox_refused:os.system``, ``runtime_error:NameError``);
``base(code)`` is the part before it.
"""
from __future__ import annotations

# The row or spec cannot be judged: the data's fault, not the response's.
INPUT_FAULTS = frozenset({
    "missing_field",      # a field the verifier needs is absent or empty
    "bad_field",          # a field has the wrong type or value
    "bad_gold",           # the reference cannot be read or is not among the choices
    "bad_spec",           # the verifier spec is not valid JSON, names an unknown type, lacks its tests
    "invalid_schema",     # a JSON Schema that is not one under its metaschema
    "schema_ref_error",   # a $ref the schema's own registry cannot resolve
    "not_an_object",      # a row that is not a JSON object
})
# The verifier itself failed: a bug, a hang, a dead worker, a sandbox that would not start.
VERIFIER_FAULTS = frozenset({
    "internal",           # the verifier raised on this input
    "verifier_timeout",   # the verifier took longer than the service allows
    "verifier_crash",     # the scoring process died twice on this row
    "sandbox_infra",      # the code sandbox could not run the program (not the program's doing)
    "genrm_malformed",    # the GenRM judge gave no well-formed verdict (or the pair did not fit its context)
    "unparsed_final_statement",   # math: the stated answer could not be read; the zero may be a false negative
})
# The response earned its score: these say why it is low, they are not the verifier's fault.
RESPONSE_CAUSES = frozenset({
    "response_too_long", "no_answer", "no_program", "syntax_error", "runtime_error", "test_failed",
    "timeout", "memory_limit", "cpu_limit", "output_limit", "crash", "sandbox_refused",
    "no_json_object", "schema_violation",
    "genrm_worse",        # the GenRM judge found the reference better
    # bfcl_ast: the calls do not match BFCL's ground truth
    "no_call", "wrong_count", "wrong_func_name", "missing_required", "unexpected_param", "value_error",
    "type_error",         # bfcl_ast: a value of another type than the function description's
    # bfcl_exec: the calls ran, their results do not match the ground truth's
    "execution_error", "wrong_result", "wrong_result_type",
    # bfcl_multi_turn: the conversation's calls left another state or other results
    "wrong_turn_count", "empty_turn", "state_mismatch", "response_mismatch",
})


def base(code: str) -> str:
    """``sandbox_refused:os.system`` -> ``sandbox_refused``."""
    return code.split(":", 1)[0]


def is_verifier_fault(code: str | None) -> bool:
    """Whether a reward with this reason says nothing about the answer (the data or the verifier failed)."""
    return code is not None and base(code) in INPUT_FAULTS | VERIFIER_FAULTS


def known(code: str) -> bool:
    return base(code) in INPUT_FAULTS | VERIFIER_FAULTS | RESPONSE_CAUSES
