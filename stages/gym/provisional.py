"""Provisional Compass-Gym verifiers: exact math answers and multiple choice.

One entry point, ``score(verifier, response, reference) -> float`` in [0, 1],
where ``verifier`` is the JSON spec stored in ``prompts.verifier``:

- ``{"type": "math_exact"}``: the final answer's number equals the reference
  exactly (integers, decimals, fractions ``3/4``, negatives, ``1,234``,
  ``\\boxed{..}``), compared as ``fractions.Fraction``; ``0.75`` equals ``3/4``.
- ``{"type": "mcq"}`` (optionally ``"options": "ABCDE"``, default ``"ABCD"``):
  the option letter named by the final answer equals the reference letter.

The final answer is the text after the last ``</think>``; a response with no
``</think>`` is its own final answer, unless it opened a ``<think>`` that it
never closed: an unfinished thought has no answer (scores 0), so a truncated
trace cannot earn reward from numbers inside its reasoning.

The full gym (ARCHITECTURE §4) adds symbolic equivalence, code, IFEval, tool
use, JSON extraction and the GenRM judge behind the same ``score``.
"""
from __future__ import annotations

import json
import re
import unicodedata
from fractions import Fraction
from stages.gym.registry import get_verifier, load_all, register_verifier

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def final_answer(response: str) -> str:
    """The text after the last ``</think>`` (stripped); the whole text when no
    thinking was opened; "" when a ``<think>`` was opened and never closed."""
    if response is None:
        return ""
    if THINK_CLOSE in response:
        return response.rsplit(THINK_CLOSE, 1)[1].strip()
    if THINK_OPEN in response:
        return ""
    return response.strip()


# -- numbers -------------------------------------------------------------------
_NUM = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?|[-+]?\.\d+"
_NUM_RE = re.compile(_NUM)
_NUM_FULL = re.compile(rf"\s*({_NUM})\s*")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def _to_fraction(tok: str) -> Fraction | None:
    tok = tok.replace(",", "").replace(" ", "")
    try:
        if "/" in tok:
            num, den = tok.split("/", 1)
            d = Fraction(den)
            if d == 0:
                return None
            return Fraction(num) / d
        return Fraction(tok)
    except (ValueError, ZeroDivisionError):
        return None


def parse_number(text: str) -> Fraction | None:
    """The number a short answer states, exactly; None when it states none.

    A bare number (``-12``, ``3/4``, ``0.5``, ``1,234``) is read whole; in
    longer text (``the answer is 22.``) the last number is taken.
    """
    if text is None:
        return None
    t = text.replace("\u2212", "-").strip()
    boxed = _BOXED.findall(t)
    if boxed:
        t = boxed[-1].strip()
    t = t.strip("$ ").rstrip(".")
    m = _NUM_FULL.fullmatch(t)
    if m:
        return _to_fraction(m.group(1))
    found = _NUM_RE.findall(t)
    return _to_fraction(found[-1]) if found else None


# -- multiple choice -----------------------------------------------------------
# "The (correct) answer is B" in the world's languages (en, zh-TW, id, vi, th, pt, ms):
# an answer word, an optional "correct", an optional "is", an optional article or
# "option/letter" word, then the letter ("A resposta correta é a B", "คำตอบคือข้อ B").
_ANSWER_WORDS = ("answer", "option", "choice", "答案", "選項", "jawaban(?:nya)?", "jawapan(?:nya)?", "pilihan",
                 "đáp án", "lựa chọn", "คำตอบ", "ตัวเลือก", "resposta", "alternativa", "opção")
_CORRECT_WORDS = ("correct", "yang benar", "yang betul", "yang tepat", "đúng", "ที่ถูกต้อง", "ที่ถูก",
                  "correta", "certa")
_IS_WORDS = ("is", "是", "為", "为", "adalah", "ialah", "là", "คือ", "é")
_BEFORE_LETTER = ("letra", "option", "[ao]")


def _any(words: tuple[str, ...]) -> str:
    return "(?:" + "|".join(words) + ")"


# NFKC like the text it reads (it splits Thai "ำ" in two)
_SAID = unicodedata.normalize(
    "NFKC", rf"{_any(_ANSWER_WORDS)}\s*(?:{_any(_CORRECT_WORDS)}\s*)?(?:{_any(_IS_WORDS)}\s*)?"
            rf"[:]?\s*(?:{_any(_BEFORE_LETTER)}\s+|ข้อ\s*)?[\(\[]?\s*")


def extract_choice(text: str, options: str = "ABCD") -> str | None:
    """The option letter an answer names: ``B``, ``(B)``, ``B. Shoes``,
    ``answer is B``, ``Jawaban: B``, ``答案是 B``, ``Đáp án là B``, ``คำตอบคือ B``,
    ``A resposta é B``, ``Jawapannya ialah B``; None when there is none or it is ambiguous."""
    if not text:
        return None
    t = unicodedata.normalize("NFKC", text).strip()   # full-width "（Ｂ）" and "：" read as "(B)", ":"
    letters = re.escape(options)
    not_letter = r"(?![A-Za-z])"
    m = re.fullmatch(rf"[\(\[]?\s*([{letters}{letters.lower()}])\s*[\)\]]?\s*[.:]?", t)
    if m:
        return m.group(1).upper()
    said = re.findall(rf"{_SAID}([{letters}]){not_letter}", t, flags=re.IGNORECASE)
    said = [s.upper() for s in said if s.upper() in options]
    if said:
        return said[-1]
    paren = set(re.findall(rf"\(([{letters}])\)", t))
    if len(paren) > 1:  # "(A) or (B)": no single answer
        return None
    m = re.match(rf"[\(\[]?([{letters}])(?:[\)\]]|[.:](?=\s|$))", t)
    if m:
        return m.group(1)
    return paren.pop() if paren else None


# -- verifiers -----------------------------------------------------------------
@register_verifier("math_exact")
def _math_exact(spec: dict, response: str, reference: str) -> float:
    ref = parse_number(reference)
    got = parse_number(final_answer(response))
    if ref is None or got is None:
        return 0.0
    return 1.0 if got == ref else 0.0


@register_verifier("mcq")
def _mcq(spec: dict, response: str, reference: str) -> float:
    options = str(spec.get("options", "ABCD")).upper()
    ref = (reference or "").strip().strip('"').strip().upper()
    if len(ref) != 1 or ref not in options:
        return 0.0
    got = extract_choice(final_answer(response), options)
    return 1.0 if got == ref else 0.0


def parse_verifier(verifier: str | dict) -> dict:
    """The verifier spec as a dict with a known ``type``; ValueError otherwise."""
    if isinstance(verifier, dict):
        spec = verifier
    else:
        try:
            spec = json.loads(verifier)
        except (TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"verifier spec is not valid JSON: {verifier!r} ({e})") from None
    if not isinstance(spec, dict) or "type" not in spec:
        raise ValueError(f"verifier spec must be a JSON object with a 'type': {verifier!r}")
    known = load_all()
    if spec["type"] not in known:
        raise ValueError(f"unknown verifier type '{spec['type']}' (known: {', '.join(sorted(known))})")
    return spec


def needs_reference(verifier: str | dict) -> bool:
    """Whether a response can only be judged against a reference answer (False: the spec suffices)."""
    return get_verifier(parse_verifier(verifier)["type"]).needs_reference


def is_judged(verifier: str | dict) -> bool:
    """Whether the verifier is a learned judge (GenRM) rather than rules: it cannot score offline."""
    return get_verifier(parse_verifier(verifier)["type"]).judged


def score(verifier: str | dict, response: str, reference: str) -> float:
    """Reward in [0, 1] of ``response`` against ``reference`` under ``verifier``."""
    spec = parse_verifier(verifier)
    return float(get_verifier(spec["type"]).fn(spec, response or "", reference or ""))
