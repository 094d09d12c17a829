"""The data filter's checks as plain functions: normalization, dedup, n-gram decontamination, quality.

Each check returns a reason (a short snake_case string) or None; a row gets
the reason of the first check it fails, in this order:

sft_samples rows: ``empty_prompt``, ``empty_response``, ``unclosed_think``
(a ``<think>`` with no ``</think>`` after it), ``stray_think_close`` (a
``</think>`` with no ``<think>``), ``empty_answer`` (nothing after
``</think>``), ``bad_verifier``, ``wrong_answer`` (the final answer does not
verify against the reference, when one is known), ``duplicate`` (same
normalized prompt and response as an earlier row), ``contaminated``.

prompts rows: ``empty_prompt``, ``missing_reference``, ``bad_verifier``,
``duplicate`` (same normalized prompt as an earlier row), ``contaminated``.
"""
from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import defaultdict

from stages.gym.provisional import THINK_CLOSE, THINK_OPEN, final_answer, parse_verifier, score

# Word tokens plus the symbols that carry meaning in arithmetic and questions;
# other punctuation (. , : ; ( ) quotes) is dropped, as usual for n-gram overlap.
_TOKEN = re.compile(r"[^\W_]+|[+\-*/=<>%^?]")


def normalize(text: str | None) -> str:
    """NFKC, lower case, single spaces: what exact-duplicate detection compares."""
    return " ".join(unicodedata.normalize("NFKC", text or "").lower().split())


def text_hash(*parts: str | None) -> str:
    return hashlib.sha256("\x1f".join(normalize(p) for p in parts).encode()).hexdigest()


def ngram_tokens(text: str | None) -> list[str]:
    return _TOKEN.findall(normalize(text))


class Decontaminator:
    """Flags texts that share a word n-gram with an evaluation prompt.

    Eval prompts of at least ``n`` tokens contribute all their n-grams; a
    shorter one contributes itself whole, and a text that contains it (as a
    contiguous token run) matches. An eval n-gram that more than
    ``max_hits`` candidate texts contain is template text (the wording every
    item of a suite shares), not a leak, and is ignored: exact duplicates are
    removed before this check, so a leaked item is counted about once.
    """

    def __init__(self, eval_texts: list[str], n: int, max_hits: int):
        self.n, self.max_hits = n, max_hits
        self.grams: set[tuple[str, ...]] = set()
        self.short: dict[int, set[tuple[str, ...]]] = defaultdict(set)
        for text in eval_texts:
            toks = ngram_tokens(text)
            if not toks:
                continue
            if len(toks) >= n:
                self.grams.update(tuple(toks[k:k + n]) for k in range(len(toks) - n + 1))
            else:
                self.short[len(toks)].add(tuple(toks))
        self.boilerplate: set[tuple[str, ...]] = set()

    def hits(self, text: str) -> set[tuple[str, ...]]:
        toks = ngram_tokens(text)
        found = set()
        if len(toks) >= self.n and self.grams:
            found.update(g for g in (tuple(toks[k:k + self.n]) for k in range(len(toks) - self.n + 1))
                         if g in self.grams)
        for length, grams in self.short.items():
            if length <= len(toks):
                found.update(g for g in (tuple(toks[k:k + length]) for k in range(len(toks) - length + 1))
                             if g in grams)
        return found

    def flag(self, texts: dict[int, str]) -> dict[int, str]:
        """``{row: text}`` -> ``{row: the leaked n-gram, space-joined}`` for contaminated rows."""
        row_hits = {i: self.hits(t) for i, t in texts.items()}
        df: dict[tuple[str, ...], int] = defaultdict(int)
        for hs in row_hits.values():
            for g in hs:
                df[g] += 1
        self.boilerplate |= {g for g, c in df.items() if c > self.max_hits}
        out = {}
        for i, hs in row_hits.items():
            real = sorted(hs - self.boilerplate)
            if real:
                out[i] = " ".join(real[0])
        return out


def think_reason(response: str) -> str | None:
    """Structural check of a reasoning response; None when well formed or not a reasoning response."""
    opened, closed = response.rfind(THINK_OPEN), response.rfind(THINK_CLOSE)
    if opened >= 0 and opened > closed:
        return "unclosed_think"
    if closed >= 0 and THINK_OPEN not in response:
        return "stray_think_close"
    return None


def verifier_reason(verifier: str | None) -> str | None:
    if not verifier:
        return None
    try:
        parse_verifier(verifier)
    except ValueError:
        return "bad_verifier"
    return None


def answer_reason(response: str, reference: str | None, verifier: str | None) -> str | None:
    """``wrong_answer`` when a reference and verifier are known and the answer does not verify."""
    if not reference or not verifier:
        return None
    return None if score(verifier, response, reference) >= 1.0 else "wrong_answer"


def is_reasoning(response: str) -> bool:
    return THINK_OPEN in response


__all__ = ["Decontaminator", "answer_reason", "final_answer", "is_reasoning", "ngram_tokens", "normalize",
           "text_hash", "think_reason", "verifier_reason"]
