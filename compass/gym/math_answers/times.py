"""Clock times: "the meeting ends at 3:15" states a time of day, not the ratio 3:15 or the quotient 3/15.

A stated ``h:mm`` (two-digit minutes, hours up to 24) is a clock time when its sentence says so: an
``a.m.``/``p.m.`` after it, "at" right before it, or a word of time in the sentence ("time", "clock",
"o'clock", "noon", "midnight"). A clock time equals only a gold written as the same time (``3:15``,
``3:15 PM``, ``15:15``); without that context ``h:mm`` stays a ratio (``7:32`` for ``\\frac{7}{32}``).
"""
from __future__ import annotations

import re

_TIME = re.compile(r"([01]?\d|2[0-4]):([0-5]\d)")
_AMPM = re.compile(r"\s*(?:\\(?:text|mathrm)\s*\{\s*)?([ap])\.?\s*m\b\.?", re.I)
_TIME_WORDS = re.compile(r"\b(?:time|clock|o'clock|noon|midnight|a\.m\.|p\.m\.|am|pm)\b", re.I)
_AT = re.compile(r"\bat\s*\$?\s*$", re.I)
_SENTENCE_START = re.compile(r"(?:[.!?]\s|\n)(?=[^.!?\n]*$)")


def _minutes(h: int, m: int, ampm: str | None) -> int:
    if ampm is not None:
        h = h % 12 + (12 if ampm == "p" else 0)
    return (h % 24) * 60 + m


def clock_time(candidate: str, final: str) -> tuple[int, int, str | None] | None:
    """(hours, minutes, "a"/"p"/None) when the answer ``candidate``, stated in the text ``final``, is a clock
    time by its context; None when it is not ``h:mm`` or nothing says it is a time."""
    m = _TIME.fullmatch(candidate.strip().strip("$").strip())
    if m is None:
        return None
    at = final.rfind(m.group(0))
    if at < 0:
        return None
    after = _AMPM.match(final, at + len(m.group(0)))
    ampm = after.group(1).lower() if after else None
    start = _SENTENCE_START.search(final[:at])
    sentence = final[start.end() if start else 0:at + len(m.group(0)) + 12]
    before = final[max(0, at - 20):at].replace("\\boxed{", "").replace("\\(", "")
    if ampm is None and not _AT.search(before) and not _TIME_WORDS.search(sentence):
        return None
    return int(m.group(1)), int(m.group(2)), ampm


def same_time(stated: tuple[int, int, str | None], gold: str) -> bool:
    """Whether the gold is written as the clock time ``stated`` (a gold without a.m./p.m. matches either
    half of the day; ``15:15`` matches ``3:15 p.m.``)."""
    g = re.sub(r"\\text\s*\{([^{}]*)\}|\\mathrm\s*\{([^{}]*)\}", r"\1\2", gold).strip().strip("$").strip()
    m = _TIME.match(g)
    if m is None:
        return False
    after = _AMPM.fullmatch(g[m.end():]) if g[m.end():].strip() else None
    if g[m.end():].strip() and after is None:
        return False
    g_ampm = after.group(1).lower() if after else None
    h, mins, ampm = stated
    gh, gm = int(m.group(1)), int(m.group(2))
    if g_ampm is None or ampm is None:
        return (h, mins) == (gh, gm) or _minutes(h, mins, ampm) == _minutes(gh, gm, g_ampm)
    return _minutes(h, mins, ampm) == _minutes(gh, gm, g_ampm)
