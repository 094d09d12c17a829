"""``tool_call`` verifier: the predicted tool calls against the gold calls of the turn.

Spec ``{"type": "tool_call"}``; the reference is the JSON list of gold calls
``[{"name": ..., "arguments": {...}}, ...]``. The response's final answer
holds one ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` block
per call. When every block parses, score = matched / max(len(gold), len(pred)),
where a predicted call matches a (distinct) gold call with the same name and
exactly equal arguments, in any order; a block that does not parse, or an
unclosed block, scores 0.

This is the provisional reward. The paper's tool-use reward (§2.5.1, eq.
4-10: format term + name/parameter-key/value correctness under an optimal
assignment, scaled to [-3, 3]) replaces it in a later issue.
"""
from __future__ import annotations

import json
import re
from collections import Counter

from stages.gym.provisional import final_answer
from stages.gym.registry import register_verifier

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(CALL_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE), re.S)


def _call(obj) -> dict | None:
    """A call as ``{"name", "arguments"}``, or None when ``obj`` is not one
    (``arguments`` may be a JSON object or a string holding one)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return {"name": obj["name"], "arguments": args}


def parse_calls(text: str) -> list[dict] | None:
    """The calls written in ``text``; None when a block is unclosed or not a JSON call."""
    if text.count(CALL_OPEN) != text.count(CALL_CLOSE):
        return None
    calls = []
    for body in _BLOCK.findall(text):
        try:
            call = _call(json.loads(body))
        except ValueError:
            return None
        if call is None:
            return None
        calls.append(call)
    return calls


def parse_gold(reference: str) -> list[dict] | None:
    try:
        gold = json.loads(reference)
    except (TypeError, ValueError):
        return None
    if not isinstance(gold, list):
        return None
    calls = [_call(g) for g in gold]
    return None if any(c is None for c in calls) else calls


def _key(call: dict) -> str:
    return json.dumps(call, sort_keys=True, ensure_ascii=False)


def match_score(pred: list[dict], gold: list[dict]) -> float:
    """matched / max(len(gold), len(pred)), matching each call at most once."""
    if not pred and not gold:
        return 1.0
    matched = sum((Counter(map(_key, pred)) & Counter(map(_key, gold))).values())
    return matched / max(len(pred), len(gold))


@register_verifier("tool_call", needs_reference=True)
def _tool_call(spec: dict, response: str, reference: str) -> float:
    gold = parse_gold(reference)
    pred = parse_calls(final_answer(response))
    if gold is None or pred is None:
        return 0.0
    return match_score(pred, gold)
