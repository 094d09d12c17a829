"""Decimal commas: the other reading of a number written ``1,22`` or ``1.234,5``, and when it is allowed.

The parser reads numbers the English way: ``1,234`` is 1234 and ``1.5`` is one and a half. Much of
the world writes 1.22 as ``1,22`` and 1234.5 as ``1.234,5`` or ``1 234,5``. Such a comma could also
separate two items (``-2,1`` is a MATH list of two solutions), so the text alone cannot always say
which it is. This module gives the decimal-comma reading of a text; ``comma_readings`` says which
readings to try, letting the gold's form decide where the answer's own form cannot:

- ``1,234`` and ``12,345,678`` (a comma then exactly three digits, in a number starting 1-9) look
  English: thousands. They are read as decimal commas only when the gold writes a decimal point
  (gold ``1.234``) or a decimal comma of its own (gold ``2,5``), and the response is not English
  prose ("so the answer is 1,500" against a gold ``1.5`` is fifteen hundred, a wrong answer).
- ``1,22``, ``1000,99``, ``3,14159`` (1-2 or 4+ digits after the comma), ``0,125`` (a lone zero before
  it), ``1.234,5`` / ``1 234,5`` (dot- or space-grouped thousands before it) can only be decimal
  commas if they are one number: they get both readings, the list one and the decimal one.
- The decimal reading applies to a text that is one number (one comma, no brackets), or to a text
  that separates its items with ``;`` (then every comma between digits is decimal: ``(1,5; 2)``).

Pure functions on strings; no parsing here.
"""
from __future__ import annotations

import re

_DIGIT_COMMA = re.compile(r"\d,\d")
_LATEX_COMMA = re.compile(r"\{,\}")                 # 1{,}5: LaTeX's way to write a comma between digits
# a number whose comma may be decimal: integer part plain or grouped by dots/spaces, then ,digits
_COMMA_NUMBER = re.compile(r"(?<![\d.,])(\d{1,3}(?:\.\d{3})+|\d{1,3}(?:[ \u00a0\u202f]\d{3})+|\d+),(\d+)(?![\d,])")
# English thousands: 1-9 first, then one or more ,ddd groups, an optional .decimals
_ENGLISH_THOUSANDS = re.compile(r"(?<![\d.,])[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?(?![\d,])")
_DECIMAL_POINT = re.compile(r"(?<![\d.])\d*\.\d+(?![\d.])")
_BRACKETS = re.compile(r"[()\[\]{}]|\\[{}]")


def _plain(text: str) -> str:
    return _LATEX_COMMA.sub(",", text)


def _one_number_or_semicolons(text: str) -> bool:
    """Whether commas in ``text`` are free to be decimal: one comma and no brackets, or ``;`` separators
    with every comma between digits."""
    if ";" in text:
        return text.count(",") == len(_DIGIT_COMMA.findall(text))
    return text.count(",") == 1 and not _BRACKETS.search(text)


def decimal_comma_reading(text: str) -> str | None:
    """``text`` with its commas read as decimal commas (``1.234,5`` -> ``1234.5``), or None when it has none
    that may be one."""
    text = _plain(text)
    if not _DIGIT_COMMA.search(text) or not _one_number_or_semicolons(text):
        return None
    out = _COMMA_NUMBER.sub(lambda m: re.sub(r"[. \u00a0\u202f]", "", m.group(1)) + "." + m.group(2), text)
    return out if out != text else None


def only_english_thousands(text: str) -> bool:
    """Whether every comma between digits in ``text`` belongs to an English-looking thousands number."""
    text = _plain(text)
    grouped = sum(m.group(0).count(",") for m in _ENGLISH_THOUSANDS.finditer(text))
    return grouped == len(_DIGIT_COMMA.findall(text))


def writes_decimal_point(text: str) -> bool:
    """Whether ``text`` writes a decimal with a point and no comma between digits (``1.234``, ``0.5``)."""
    return bool(_DECIMAL_POINT.search(text)) and not _DIGIT_COMMA.search(_plain(text))


# English words a response in another language does not use; two different ones mark English prose
_ENGLISH_WORDS = re.compile(r"\b(the|is|are|so|thus|therefore|answer|we|of|and|which|gives|total|hence|get)\b",
                            re.I)


def writes_english(text: str) -> bool:
    """Whether ``text`` is English prose (two different common English words): its ``1,500`` is 1500."""
    return len({w.lower() for w in _ENGLISH_WORDS.findall(text[-2000:])}) >= 2


def comma_readings(gold: str, answer: str, english: bool = False) -> list[tuple[str, str]]:
    """Further (gold, answer) text pairs to compare after the English reading of both failed.

    The gold gets a decimal-comma reading only where its comma cannot be English thousands; the answer
    gets one where its comma cannot be, or where the gold's form (a decimal point or a decimal comma)
    says the writer's convention is the decimal one, unless the response is English prose
    (``english``), where ``1,500`` is fifteen hundred whatever the gold."""
    if "," not in gold and "," not in answer:
        return []
    gold_alt = decimal_comma_reading(gold)
    if gold_alt is not None and only_english_thousands(gold):
        gold_alt = None
    answer_alt = decimal_comma_reading(answer)
    if answer_alt is not None and only_english_thousands(answer):
        if english or (gold_alt is None and not writes_decimal_point(gold)):
            answer_alt = None
    pairs = []
    if answer_alt is not None:
        pairs.append((gold, answer_alt))
    if gold_alt is not None:
        pairs.append((gold_alt, answer))
        if answer_alt is not None:
            pairs.append((gold_alt, answer_alt))
    return pairs
