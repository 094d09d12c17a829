"""The row form of the verifiers: ``compass gym score VERIFIER IN.jsonl OUT.jsonl``, a row in, the row out with fields added.

A verifier's row form (``compass.gym.registry``) reads the input fields it
documents and returns the fields it adds, always including ``score``. It
raises ``RowError("short reason")`` for a row it cannot score; ``score_row``
then adds ``error``, the verifier's ``defaults`` and its ``error_score`` (its
minimum: 0 for most, -3 for tool_call), so one bad row never stops a file or the
reward service and failing to be scored never pays more than a wrong answer.
"""
from __future__ import annotations

from compass.gym.registry import Verifier, get_verifier

# Longest response a row may carry; longer ones are scored as failures, not parsed.
MAX_RESPONSE_CHARS = 4_000_000


class RowError(ValueError):
    """A row the verifier cannot score: the message goes to the row's ``error``, ``reason`` (a short code
    from ``compass.gym.reasons``, e.g. ``missing_field``, ``invalid_schema``) to its ``reason``."""

    def __init__(self, message: str, reason: str = "bad_field"):
        super().__init__(message)
        self.reason = reason


def get_scorer(name: str) -> Verifier:
    """The verifier ``name`` if it scores rows one at a time; ValueError for an unknown name or a learned
    judge (which scores a whole file with a checkpoint: ``compass gym score NAME --judge CKPT``)."""
    verifier = get_verifier(name)
    if verifier.row is None:
        raise ValueError(f"gym verifier '{name}' is a learned judge: it scores a file at a time with --judge CKPT")
    return verifier


def require(row: dict, key: str, kind: type | tuple[type, ...] | None = None):
    """``row[key]``, or RowError naming the missing or mistyped field."""
    if key not in row or row[key] is None:
        raise RowError(f"missing field '{key}'", "missing_field")
    value = row[key]
    if kind is not None and not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "|".join(k.__name__ for k in kind)
        raise RowError(f"field '{key}' must be {names}, got {type(value).__name__}")
    return value


def response_of(row: dict) -> str:
    """The row's ``response`` as text, or RowError when missing, not text, or too long to score."""
    text = require(row, "response", str)
    if len(text) > MAX_RESPONSE_CHARS:
        raise RowError(f"response too long ({len(text)} chars > {MAX_RESPONSE_CHARS})", "response_too_long")
    return text


def gold_of(row: dict) -> str:
    """The row's non-empty ``gold`` text, or RowError."""
    gold = require(row, "gold", str)
    if not gold.strip():
        raise RowError("empty field 'gold'", "missing_field")
    return gold


def score_fields(name: str, row) -> dict:
    """The fields verifier ``name`` adds to ``row``: its own fields and ``score``, plus ``error`` (None when
    scored). An unscorable row gets the verifier's defaults, its error score, ``error`` (the message) and
    ``reason`` (its code, ``compass.gym.reasons``).

    An unknown ``name`` raises ValueError (a usage error, not a row error).
    """
    scorer = get_scorer(name)
    try:
        if not isinstance(row, dict):
            raise RowError(f"row must be a JSON object, got {type(row).__name__}", "not_an_object")
        added = scorer.row(row)
        if "score" not in added:
            raise RowError("verifier returned no score", "internal")
        return {**added, "score": float(added["score"]), "error": None}
    except RowError as e:
        message, reason = str(e) or "unscorable row", e.reason
    except Exception as e:   # a verifier bug on odd input must not stop a file or the service
        message, reason = f"internal: {type(e).__name__}: {str(e)[:200]}", "internal"
    return {**scorer.defaults, "score": scorer.score_on_error(row if isinstance(row, dict) else {}),
            "error": message, "reason": reason}


def merge_fields(row: dict, fields: dict) -> dict:
    """``row`` with ``fields`` written over it (a stale ``correct`` or ``error`` from an earlier run is
    replaced); ``error`` and ``reason`` appear only when there is one."""
    out = {**row, **fields}
    for key in ("error", "reason"):
        if out.get(key) is None:
            out.pop(key, None)
    return out


def score_row(name: str, row: dict) -> dict:
    """``row`` plus the fields verifier ``name`` adds (see ``score_fields``); a non-object row becomes
    ``{"error": ..., "score": ...}``."""
    fields = score_fields(name, row)
    return merge_fields(row if isinstance(row, dict) else {}, fields)
