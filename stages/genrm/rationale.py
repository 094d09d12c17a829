"""Programmatic rationales for the GenRM warm start: a judgement built from a pair, not from its label.

``type`` is the pair's domain/task, ``rubric`` a short per-domain sentence, and
``eval`` what a judge can read off the two responses themselves: each one's
final answer and whether they agree (``A: 11; B: 10; differ``). Only the final
``<answer>`` carries the label. A model that learns to write the ``eval`` has
learnt to extract and compare answers (agreeing answers are ties in the world's
pairs); choosing A or B when they differ is what the GRPO step has to learn.
"""
from __future__ import annotations

import re

from stages.genrm.verdict import judgement_text

RUBRICS = {
    "math": "right answer wins, same answers tie",
    "ecommerce": "right option wins, same option ties",
    "code": "passing code wins, equal code ties",
}
DEFAULT_RUBRIC = "correct answer wins, equal answers tie"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_OPTION = re.compile(r"(?<![A-Za-z])([A-E])(?![A-Za-z])")
_MAX_CHARS = 24


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


def evaluation(response_a: str, response_b: str) -> str:
    a, b = final_answer(response_a), final_answer(response_b)
    return f"A: {a}; B: {b}; {'same' if a == b else 'differ'}"


def judge_type(domain: str | None, task: str | None) -> str:
    parts = [p for p in (domain, task) if p]
    return "/".join(parts).replace("<", " ") or "general"


def rationale(row: dict, label: str) -> str:
    """The warm-start target for one pair (``row``: prompt, response_a, response_b, optional domain, task)
    judged ``label``."""
    return judgement_text(judge_type(row.get("domain"), row.get("task")),
                          RUBRICS.get(row.get("domain") or "", DEFAULT_RUBRIC),
                          evaluation(row["response_a"], row["response_b"]), label)
