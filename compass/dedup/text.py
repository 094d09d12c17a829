"""Text normalization, tokens and hashes shared by every data_filter check."""
from __future__ import annotations

import hashlib
import re
import unicodedata

# Scripts written without spaces between words (Thai, Chinese, Japanese kana, Hangul): one
# character is one token there, otherwise a whole clause would be one "word" and a single
# changed character would hide a copy from n-gram and shingle overlap.
_UNSPACED = "\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
# Word tokens plus the symbols that carry meaning in arithmetic and questions; other
# punctuation (. , : ; ( ) quotes) is dropped, as usual for n-gram overlap.
_TOKEN = re.compile(rf"[{_UNSPACED}]|[^\W_{_UNSPACED}]+|[+\-*/=<>%^?]")


def normalize(text: str | None) -> str:
    """NFKC, lower case, single spaces: what exact-duplicate detection compares."""
    return " ".join(unicodedata.normalize("NFKC", text or "").lower().split())


def tokens_of(normalized: str) -> list[str]:
    """Tokens of an already normalized text."""
    return _TOKEN.findall(normalized)


def ngram_tokens(text: str | None) -> list[str]:
    """The tokens n-gram overlap and shingles are made of (case, spacing and most punctuation ignored)."""
    return _TOKEN.findall(normalize(text))


def text_hash(*parts: str | None) -> str:
    """SHA-256 (hex) of the normalized parts."""
    return hashlib.sha256("\x1f".join(normalize(p) for p in parts).encode()).hexdigest()


def key_of(*normalized: str) -> int:
    """A 64-bit key of already normalized parts: what the exact-duplicate index stores."""
    digest = hashlib.blake2b("\x1f".join(normalized).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def text_key(*parts: str | None) -> int:
    """``key_of`` the normalized parts."""
    return key_of(*(normalize(p) for p in parts))
