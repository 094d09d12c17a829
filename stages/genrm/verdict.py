"""The GenRM judging format, shared by the GenRM stage and whoever uses its checkpoint as a judge.

Light on purpose (no torch): a reward function imports it to build the judge
prompt and to parse the verdict a GenRM checkpoint generates.
"""
from __future__ import annotations

import re

VERDICTS = ("A", "B", "TIE")
SWAP = {"A": "B", "B": "A", "TIE": "TIE"}
_VERDICT_RE = re.compile(r"<answer>\s*(A|B|TIE)\s*</answer>")


def judge_prompt(prompt: str, response_a: str, response_b: str) -> str:
    """The user turn a GenRM checkpoint is asked (wrap it with ``stages.common.lm.chat_prefix``)."""
    return (f"Judge which response answers the question better. "
            f"Reply <answer>A</answer>, <answer>B</answer> or <answer>TIE</answer>.\n"
            f"[Question]\n{prompt}\n[Response A]\n{response_a}\n[Response B]\n{response_b}")


def verdict_text(label: str) -> str:
    """The target completion for a label in VERDICTS."""
    return f"<answer>{label}</answer>"


def normalize_label(label) -> str | None:
    """'A' / 'B' / 'TIE' (case and surrounding space ignored), or None for anything else."""
    if not isinstance(label, str):
        return None
    v = label.strip().upper()
    return v if v in VERDICTS else None


def parse_verdict(text: str) -> str | None:
    """The last ``<answer>A|B|TIE</answer>`` in a generated text, or None when there is none."""
    found = _VERDICT_RE.findall(text)
    return found[-1] if found else None
