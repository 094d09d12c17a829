"""``qa`` verifier: a short answer equals the reference or one of its aliases, after normalization.

Spec ``{"type": "qa", "aliases": ["USA", ...]}``; the reference is the answer.
Normalization: NFKC, casefold, punctuation removed (dashes become spaces), English articles
(a, an, the) dropped, whitespace collapsed; so ``The Nile.`` equals ``nile``.
The whole final answer must be the answer: ``It is Paris`` does not match.
"""
from __future__ import annotations

import unicodedata

from stages.gym.provisional import final_answer
from stages.gym.registry import register_verifier

_ARTICLES = {"a", "an", "the"}


def normalize_answer(text: str) -> str:
    t = unicodedata.normalize("NFKC", text or "").casefold()
    # punctuation is deleted ("U.S.A." -> "usa"), dashes split words ("well-known" -> "well known")
    t = "".join(" " if unicodedata.category(ch) == "Pd" else "" if unicodedata.category(ch).startswith("P") else ch
                for ch in t)
    return " ".join(w for w in t.split() if w not in _ARTICLES)


@register_verifier("qa", needs_reference=True)
def _qa(spec: dict, response: str, reference: str) -> float:
    got = normalize_answer(final_answer(response))
    if not got:
        return 0.0
    accepted = {normalize_answer(a) for a in [reference, *(spec.get("aliases") or [])]} - {""}
    return 1.0 if got in accepted else 0.0
