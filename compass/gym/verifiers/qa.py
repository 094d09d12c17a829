"""``qa``: a short answer equals the reference or one of its aliases, after normalization.

- spec ``{"type": "qa", "aliases": ["USA", ...]}``, the reference is the answer;
- row (``compass gym score qa``): ``response``, ``gold`` (the answer) and optional
  ``aliases`` (a list of strings) -> ``correct`` (bool) and ``score`` (1.0 / 0.0).

Normalization: NFKC, casefold, punctuation removed (dashes become spaces), English articles
(a, an, the) dropped, whitespace collapsed; so ``The Nile.`` equals ``nile``.
The whole final answer must be the answer: ``It is Paris`` does not match.
"""
from __future__ import annotations

import unicodedata

from compass.gym.registry import Verifier, register_verifier
from compass.gym.rows import RowError, require, response_of
from compass.gym.score import final_answer

_ARTICLES = {"a", "an", "the"}


def normalize_answer(text: str) -> str:
    t = unicodedata.normalize("NFKC", text or "").casefold()
    # punctuation is deleted ("U.S.A." -> "usa"), dashes split words ("well-known" -> "well known")
    t = "".join(" " if unicodedata.category(ch) == "Pd" else "" if unicodedata.category(ch).startswith("P") else ch
                for ch in t)
    return " ".join(w for w in t.split() if w not in _ARTICLES)


def answers_match(response: str, reference: str, aliases) -> bool:
    got = normalize_answer(final_answer(response))
    if not got:
        return False
    accepted = {normalize_answer(a) for a in [reference, *(aliases or [])]} - {""}
    return got in accepted


def score_spec(spec: dict, response: str, reference: str) -> float:
    return 1.0 if answers_match(response, reference, spec.get("aliases")) else 0.0


def score_row(row: dict) -> dict:
    response = response_of(row)
    gold = require(row, "gold", str)
    aliases = row.get("aliases")
    if aliases is not None and not (isinstance(aliases, list) and all(isinstance(a, str) for a in aliases)):
        raise RowError("field 'aliases' must be a list of strings")
    ok = answers_match(response, gold, aliases)
    return {"correct": ok, "score": 1.0 if ok else 0.0}


VERIFIER = register_verifier(Verifier("qa", spec=score_spec, row=score_row, defaults={"correct": False}))
