"""The final answer a math response states, as a short string (no parsing of its value).

Order, latest statement first (a model often corrects itself, so the last word counts):

1. the last ``\\boxed{..}`` / ``\\fbox{..}`` (nested braces; ``\\boxed 5`` too);
2. the last explicit statement: "answer is X", "answer: X", "#### X", "A: X" at a line start;
   X is its first math segment (``$..$``) or the text up to the end of the sentence;
3. a short final text that is itself the answer (``\\frac{1}{2}``, ``(1, 2)``);
4. the last ``$..$`` math segment of the text, when it holds a number or is short;
5. the last number (``-1,234.5``, ``3/4``, ``2 1/3``, ``45%``).

Only text after the last ``</think>`` counts (``compass.gym.score.final_answer``): an unclosed
think block has no answer. The word "answer" alone does not start an answer: "to find
the answer, note 5 apples ... so 12" answers 12, not 5.
"""
from __future__ import annotations

import re

from compass.gym.math_answers.parse import parse_answer
from compass.gym.score import final_answer

# Only the end of a long response is searched for numbers and markers first: the answer
# is stated last, and a 4 MB response must not cost seconds of regex.
TAIL_CHARS = 4000

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*")
_MARKER_RE = re.compile(
    r"(?:final\s+answer|answer)\s*(?:is|was|would\s+be|will\s+be|should\s+be|=|:)\s*:?"
    r"|####|(?:^|\n)[ \t]*(?:\*\*)?A(?:\*\*)?[ \t]*:", re.I)
_MATH_SEG_RE = re.compile(r"(?<!\\)\$\$(.+?)(?<!\\)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_NUMBER_RE = re.compile(
    r"(?<![\w.])-?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[ \t]+\d+/\d+(?![\d/]))?"
    r"(?:\s*/\s*\d+(?:\.\d+)?)?\s*(?:\\?%)?|(?<![\w.])-?\.\d+\s*(?:\\?%)?")
_SENTENCE_END = re.compile(r"(?<=[^\d\s])\.(?=\s|$)|(?<=\d)\.(?=\s|$)|\n|;|,\s+(?:so|which|because|since|and)\b"
                           r"|\s+(?:because|since|which|as)\s")
_HAS_DIGIT = re.compile(r"\d")


def last_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` or ``\\fbox{...}``; None when there is none (or it is unclosed)."""
    starts = [m for m in _BOX_RE.finditer(text)] if "box" in text else []
    for m in reversed(starts[-3:]):     # a few: "\\boxed{" repeated unclosed must not cost O(n^2)
        i = m.end()
        if i < len(text) and text[i] == "{":
            depth = 0
            for j in range(i, len(text)):
                c = text[j]
                if c == "{":
                    depth += 1
                elif c == "}":
                    depth -= 1
                    if depth == 0:
                        return text[i + 1:j].strip()
            continue          # unclosed: try an earlier box
        tok = re.match(r"[^\s$]+", text[i:])   # \boxed 5
        if tok:
            return tok.group(0)
    return None


def _after_marker(rest: str) -> str | None:
    """The answer X in the text following "answer is": its math segment or its sentence."""
    rest = rest.lstrip()
    box = last_boxed(rest[:2000]) if "box" in rest[:2000] else None
    seg = _MATH_SEG_RE.match(rest)
    if box is None and seg is None:
        seg = _MATH_SEG_RE.search(rest[:200].split("\n", 1)[0])
    if box is not None:
        return box
    if seg is not None:
        return next(g for g in seg.groups() if g is not None).strip()
    end = _SENTENCE_END.search(rest)
    x = (rest[:end.start()] if end else rest[:200]).strip().strip("*").strip()
    return x or None


def extract_final_answer(text: str | None) -> str | None:
    """The final answer stated by a response, as a string; None when it states none."""
    if not text:
        return None
    final = final_answer(text)
    if not final:
        return None
    box = last_boxed(final)
    if box is not None:
        return box
    tail = final[-TAIL_CHARS:]
    markers = list(_MARKER_RE.finditer(tail))
    if markers:
        x = _after_marker(tail[markers[-1].end():])
        if x:
            if _readable(x):
                return x
            first = _NUMBER_RE.search(x)          # "answer is 12 apples and 3 pears" -> 12
            return first.group(0).strip() if first else x
    short = final.strip().rstrip(".")
    if len(short) <= 60 and "\n" not in short and not re.search(r"[a-zA-Z]{3,}\s+[a-zA-Z]{3,}", short):
        segs = _MATH_SEG_RE.findall(short)
        cand = next((g for g in segs[-1] if g), short).strip() if segs else short.strip()
        if _readable(cand):
            return cand
    segs = list(_MATH_SEG_RE.finditer(tail))
    if segs:
        seg = next(g for g in segs[-1].groups() if g is not None).strip()
        after = tail[segs[-1].end():]
        if not _HAS_DIGIT.search(after) and (_HAS_DIGIT.search(seg) or len(seg) <= 40):
            return seg
    nums = _NUMBER_RE.findall(tail) or (_NUMBER_RE.findall(final) if len(final) > TAIL_CHARS else [])
    return nums[-1].strip() if nums else None


def _readable(x: str) -> bool:
    """Whether ``x`` reads as an answer (mathematics, text, or a malformed number that equals nothing)."""
    a = parse_answer(x)
    return a.tree is not None or a.invalid


def gold_answer(gold: str) -> str:
    """A reference answer as given: its box if boxed, the part after ``####`` in GSM8K style, else itself."""
    box = last_boxed(gold) if "box" in gold else None
    if box is not None:
        return box
    if "####" in gold:
        return gold.rsplit("####", 1)[1].strip()
    return gold.strip()
