"""The text helpers other packages import from here (the world's generator uses ``ngram_tokens``).

The checks themselves live in one module each: ``quality`` (malformed rows, reasoning
structure, answers), ``harm``, ``dedup``, ``decontam``; ``screen`` applies them in order.
"""
from __future__ import annotations

from stages.data_filter.text import ngram_tokens, normalize, text_hash, text_key

__all__ = ["ngram_tokens", "normalize", "text_hash", "text_key"]
