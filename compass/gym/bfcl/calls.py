"""Calls as the verifiers run them.

BFCL writes ground truth as Python call strings (``"cd(folder='document')"``, ``"f(p=1/6)"``), which
the sandbox evaluates as BFCL does; a model writes ``<tool_call>{"name", "arguments"}</tool_call>``
blocks, which become ``(name, [], arguments)``: nothing a model writes is ever evaluated as code, the
sandbox only looks the name up and applies the JSON values.
"""
from __future__ import annotations

import ast

from compass.gym.rows import RowError
from compass.gym.verifiers.tool_call import predicted_calls

def gold_call(text) -> str:
    """A ground-truth call string, checked to be one call of a plain (or dotted) name; RowError(bad_gold).
    Its arguments may be expressions (``p=1/6``): BFCL evaluates its ground truth, and so does the
    sandbox, in the namespace of the reference functions."""
    if not isinstance(text, str):
        raise RowError(f"ground-truth call {text!r} is not a string", "bad_gold")
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise RowError(f"ground-truth call {text!r} does not parse: {e.msg}", "bad_gold") from None
    if not isinstance(node, ast.Call) or not all(p.isidentifier() for p in ast.unparse(node.func).split(".")):
        raise RowError(f"ground-truth call {text!r} is not a call of a function name", "bad_gold")
    return text.strip()


def gold_calls(value, what: str = "ground truth") -> list[str]:
    """A list of call strings, each checked by ``gold_call``; RowError(bad_gold) naming the first bad one."""
    if not isinstance(value, list):
        raise RowError(f"the {what} must be a list of call strings", "bad_gold")
    return [gold_call(c) for c in value]


def response_calls(response: str) -> list[tuple[str, list, dict]]:
    """The calls of a response's final answer (its parsable ``<tool_call>`` blocks)."""
    return [(c["name"], [], dict(c["arguments"])) for c in predicted_calls(response)]
