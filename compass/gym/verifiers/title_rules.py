"""``title_rules``: a rewritten product title checked by the rules its spec states.

Spec ``{"type": "title_rules", "criteria": [...], "must_keep": [...], "banned": [...],
"max_chars": N}``. The task is open-ended, so the verifier counts as judged: the
criteria are for a learned judge (``genrm``, paper §2.5.2), and offline checks
(data_filter) do not trust a rules score. The rules:

- content: the share of ``must_keep`` phrases the answer contains (brand,
  product noun), case-insensitively;
- style, each 0 or 1: no stuffing (a kept phrase at most once, no other word
  repeated, no ``banned`` phrase), no shouting (no ALL-CAPS word of 3+
  letters unless a kept phrase spells it so), fits (one line, at most
  ``max_chars`` characters);

score = content x mean(style), so dropping the brand costs half and keeping
the spam costs a third or more. A spec without any of these rules is
scored by exact match with the reference. An empty answer scores 0.

Row (``compass gym score title_rules``): ``response``, optional ``reference`` and the
spec's rules (``must_keep``, ``banned``: lists of strings; ``max_chars``: an integer)
-> ``score``.
"""
from __future__ import annotations

import re
import unicodedata

from compass.gym.registry import Verifier, register_verifier
from compass.gym.rows import RowError, require, response_of
from compass.gym.score import Reward, final_answer

_PUNCT = "\"'.,:;!?()[]{}【】「」|/-–—*★"
_LATIN_CHARS = r"A-Za-z\u00C0-\u024F\u1E00-\u1EFF"
_LATIN = re.compile(rf"[{_LATIN_CHARS}]")
_LATIN_WORD = re.compile(rf"[{_LATIN_CHARS}]+")   # shouting is a Latin-script thing
RULE_KEYS = ("must_keep", "banned", "max_chars")


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def _find(text: str, phrase: str) -> list[int]:
    """Start offsets of ``phrase`` in ``text`` (both folded); Latin phrases only as whole words
    (``HOT`` is not in ``hotel``), scripts written without spaces anywhere."""
    if not phrase:
        return []
    edge = rf"(?<![{_LATIN_CHARS}0-9])" if _LATIN.match(phrase[0]) else ""
    tail = rf"(?![{_LATIN_CHARS}0-9])" if _LATIN.match(phrase[-1]) else ""
    return [m.start() for m in re.finditer(edge + re.escape(phrase) + tail, text)]


def _words(text: str) -> list[str]:
    """Whitespace-separated words of 3+ characters, punctuation stripped (Thai and Chinese
    titles separate their phrases by spaces too)."""
    return [w for w in (t.strip(_PUNCT) for t in text.split()) if len(w) >= 3]


def _no_stuffing(text: str, keep: list[str], banned: list[str]) -> bool:
    t = _fold(text)
    if any(_find(t, _fold(b)) for b in banned):
        return False
    kept_words = set()
    for phrase in (_fold(p) for p in keep):
        hits = _find(t, phrase)
        if len(hits) > 1:
            return False
        if hits:  # a kept phrase may repeat a word inside itself ("Tai nghe chụp tai")
            t = t[:hits[0]] + " " + t[hits[0] + len(phrase):]
        kept_words |= set(_words(phrase))
    rest = _words(t)
    return len(rest) == len(set(rest)) and not set(rest) & kept_words


def _no_shouting(text: str, keep: list[str]) -> bool:
    allowed = {w for p in keep for w in _LATIN_WORD.findall(p)}   # "USB Flash Drive" may say USB
    return not any(len(w) >= 3 and w.isupper() and w not in allowed for w in _LATIN_WORD.findall(text))


def title_rules_score(spec: dict, text: str) -> float:
    keep = list(spec.get("must_keep", []))
    content = sum(bool(_find(_fold(text), _fold(p))) for p in keep) / len(keep) if keep else 1.0
    max_chars = spec.get("max_chars")
    fits = "\n" not in text and (max_chars is None or len(text) <= int(max_chars))
    style = [_no_stuffing(text, keep, list(spec.get("banned", []))), _no_shouting(text, keep), fits]
    return content * sum(style) / len(style)


def score_spec(spec: dict, response: str, reference: str) -> Reward | float:
    text = final_answer(response)
    if not text:
        return Reward(0.0, "no_answer")
    if not any(k in spec for k in RULE_KEYS):
        return 1.0 if " ".join(text.split()) == " ".join((reference or "").split()) and reference else 0.0
    return title_rules_score(spec, text)


def _row_rules(row: dict) -> dict:
    """The rules a row states, type-checked (a row stands for its spec)."""
    rules = {}
    for key in ("must_keep", "banned"):
        if row.get(key) is not None:
            value = require(row, key, list)
            if not all(isinstance(p, str) for p in value):
                raise RowError(f"field '{key}' must be a list of strings")
            rules[key] = value
    if row.get("max_chars") is not None:
        max_chars = require(row, "max_chars", int)
        if isinstance(max_chars, bool) or max_chars < 1:
            raise RowError(f"field 'max_chars' must be a positive integer, got {max_chars!r}")
        rules["max_chars"] = max_chars
    return rules


def score_row(row: dict) -> dict:
    response = response_of(row)
    reference = row.get("reference")
    if reference is not None and not isinstance(reference, str):
        raise RowError(f"field 'reference' must be str, got {type(reference).__name__}")
    return {"score": score_spec(_row_rules(row), response, reference or "")}


VERIFIER = register_verifier(Verifier("title_rules", spec=score_spec, row=score_row, needs_reference=False,
                                      judged=True))
