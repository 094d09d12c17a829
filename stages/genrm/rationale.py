"""Programmatic rationales for the GenRM warm start: a judgement built from a pair, not from its label.

``type`` is the pair's domain/task, ``rubric`` a short per-domain sentence, and
``eval`` what a judge can read off the two responses themselves: each one's
final answer and whether they agree (``A: 11; B: 10; differ``), then, when a
response shows worked steps ``x op y = z`` (``+ - *`` on integers) in its
``<think>``, a check of each one's steps: ``A ok; B wrong`` (wrong: some step's
stated result is not the operation's result; ``-``: no worked step). Only the final
``<answer>`` carries the label. A model that learns to write the ``eval`` has
learnt to extract and compare answers (agreeing answers are ties in the world's
pairs) and to verify the shown arithmetic; choosing A or B when they differ is
what the GRPO step has to learn.
"""
from __future__ import annotations

import re

from compass.gym.genrm_verdict import judgement_text

RUBRICS = {
    "math": "right answer wins, same answers tie",
    "ecommerce": "right option wins, same option ties",
    "code": "passing code wins, equal code ties",
}
DEFAULT_RUBRIC = "correct answer wins, equal answers tie"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_OPTION = re.compile(r"(?<![A-Za-z])([A-E])(?![A-Za-z])")
_MAX_CHARS = 24
_STEP = re.compile(r"(-?\d+)\s*([-+*])\s*(-?\d+)\s*=\s*(-?\d+)")
_OPS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}


def final_answer(response: str) -> str:
    """The answer a response ends with: after its last ``</think>``, the last number, else the first
    option letter (A-E) standing alone, else the first few characters; ``-`` when empty."""
    tail = (response or "").rsplit("</think>", 1)[-1].strip()
    nums = _NUMBER.findall(tail)
    if nums:
        return nums[-1]
    m = _OPTION.search(tail)
    if m:
        return m.group(1)
    tail = " ".join(tail.replace("<", " ").split())[:_MAX_CHARS]
    return tail or "-"


def step_check(response: str) -> str | None:
    """``ok`` when every worked step ``x op y = z`` in the response's ``<think>`` is right, ``wrong`` when
    one is not, None when it shows no such step."""
    think = response.split("</think>", 1)[0] if "</think>" in (response or "") else ""
    steps = _STEP.findall(think)
    if not steps:
        return None
    return "ok" if all(_OPS[op](int(x), int(y)) == int(z) for x, op, y, z in steps) else "wrong"


def evaluation(response_a: str, response_b: str) -> str:
    a, b = final_answer(response_a), final_answer(response_b)
    out = f"A: {a}; B: {b}; {'same' if a == b else 'differ'}"
    ca, cb = step_check(response_a), step_check(response_b)
    if ca is not None or cb is not None:
        out += f"; A {ca or '-'}; B {cb or '-'}"
    return out


def judge_type(domain: str | None, task: str | None) -> str:
    parts = [p for p in (domain, task) if p]
    return "/".join(parts).replace("<", " ") or "general"


def rationale(row: dict, label: str) -> str:
    """The warm-start target for one pair (``row``: prompt, response_a, response_b, optional domain, task)
    judged ``label``."""
    return judgement_text(judge_type(row.get("domain"), row.get("task")),
                          RUBRICS.get(row.get("domain") or "", DEFAULT_RUBRIC),
                          evaluation(row["response_a"], row["response_b"]), label)
