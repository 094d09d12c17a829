"""The GenRM judging format, shared by the GenRM stage and whoever uses its checkpoint as a judge.

A judgement (paper §2.5.2) is a structured reasoning chain ending in a ternary verdict::

    <type>…</type><rubric>…</rubric><eval>…</eval><answer>A|B|TIE</answer>

``parse_judgement`` checks that structure (format ok or not) and extracts the
verdict; ``parse_verdict`` only looks for the last ``<answer>`` (what the gym's
judge adapter scores: a verdict without the chain still counts there).
Light on purpose (no torch): a reward function imports it to build the judge
prompt and to parse the verdict a GenRM checkpoint generates.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

VERDICTS = ("A", "B", "TIE")
SWAP = {"A": "B", "B": "A", "TIE": "TIE"}
_VERDICT_RE = re.compile(r"<answer>\s*(A|B|TIE)\s*</answer>")
# the whole structure, in order, nothing but white space around the fields
_STRUCTURE_RE = re.compile(r"^\s*<type>(?P<type>[^<]*)</type>\s*<rubric>(?P<rubric>[^<]*)</rubric>\s*"
                           r"<eval>(?P<eval>[^<]*)</eval>\s*<answer>\s*(?P<answer>A|B|TIE)\s*</answer>\s*$", re.S)


def judge_prompt(prompt: str, response_a: str, response_b: str) -> str:
    """The user turn a GenRM checkpoint is asked (wrap it with ``compass.lm.chat.chat_prefix``)."""
    return (f"Judge which response answers the question better. "
            f"Reply <type>, <rubric>, <eval>, then <answer>A</answer>, <answer>B</answer> or <answer>TIE</answer>.\n"
            f"[Question]\n{prompt}\n[Response A]\n{response_a}\n[Response B]\n{response_b}")


def verdict_text(label: str) -> str:
    """The bare verdict for a label in VERDICTS."""
    return f"<answer>{label}</answer>"


def judgement_text(kind: str, rubric: str, evaluation: str, label: str) -> str:
    """A full structured judgement (the warm start's target); the fields must not contain ``<``."""
    for name, v in (("type", kind), ("rubric", rubric), ("eval", evaluation)):
        if "<" in v:
            raise ValueError(f"judgement field {name} must not contain '<': {v!r}")
    return f"<type>{kind}</type><rubric>{rubric}</rubric><eval>{evaluation}</eval>{verdict_text(label)}"


@dataclass(frozen=True)
class Judgement:
    verdict: str | None      # the last <answer>A|B|TIE</answer>, None when there is none
    format_ok: bool          # the whole text is <type>…</type><rubric>…</rubric><eval>…</eval><answer>…</answer>
    fields: dict | None = None


def parse_judgement(text: str) -> Judgement:
    """Structure check and verdict of one generated judgement."""
    m = _STRUCTURE_RE.match(text or "")
    if m:
        return Judgement(m["answer"], True, {k: m[k] for k in ("type", "rubric", "eval")})
    return Judgement(parse_verdict(text or ""), False)


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
