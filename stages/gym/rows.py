"""The scoring contract of ``compass gym score VERIFIER IN.jsonl OUT.jsonl``: a row in, the row out with fields added.

Each verifier registers ``fn(row) -> dict`` under its public name (``math``,
``code``, ``ifeval``, ``tool``, ``mcq``, ``json``, ``genrm``) with
``@register_scorer(name, defaults={...})``. ``fn`` reads the input fields it
documents and returns the fields it adds, always including ``score``. It
raises ``RowError("short reason")`` for a row it cannot score; ``score_row``
then adds ``error`` and the verifier's ``defaults`` with ``score`` 0, so one
bad row never stops a file or the reward service.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from stages.common.named_registry import Registry

# Modules that register row scorers; add a new verifier's module here.
SCORER_MODULES = (
    "stages.gym.math_equiv",
    "stages.gym.ifeval",
    "stages.gym.sandbox",
    "stages.gym.tool_reward",
    "stages.gym.mcq",
    "stages.gym.json_schema",
)

# Longest response a row may carry; longer ones are scored as failures, not parsed.
MAX_RESPONSE_CHARS = 4_000_000


class RowError(ValueError):
    """A row the verifier cannot score; the message is the short reason written to ``error``."""


@dataclass(frozen=True)
class Scorer:
    name: str
    fn: Callable[[dict], dict]
    defaults: dict = field(default_factory=dict)   # fields of an unscorable row (besides score 0)


SCORERS: Registry = Registry("gym verifier", modules=SCORER_MODULES)


def register_scorer(name: str, defaults: dict | None = None):
    """Decorator: ``fn(row) -> added fields`` scores rows for ``compass gym score NAME``."""
    def deco(fn):
        SCORERS.register(name)(Scorer(name, fn, dict(defaults or {})))
        return fn
    return deco


def get_scorer(name: str) -> Scorer:
    """The scorer registered as ``name``; ValueError listing the known names otherwise."""
    return SCORERS.loaded().lookup(name)


def require(row: dict, key: str, kind: type | tuple[type, ...] | None = None):
    """``row[key]``, or RowError naming the missing or mistyped field."""
    if key not in row or row[key] is None:
        raise RowError(f"missing field '{key}'")
    value = row[key]
    if kind is not None and not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "|".join(k.__name__ for k in kind)
        raise RowError(f"field '{key}' must be {names}, got {type(value).__name__}")
    return value


def response_of(row: dict) -> str:
    """The row's ``response`` as text, or RowError when missing, not text, or too long to score."""
    text = require(row, "response", str)
    if len(text) > MAX_RESPONSE_CHARS:
        raise RowError(f"response too long ({len(text)} chars > {MAX_RESPONSE_CHARS})")
    return text


def score_row(name: str, row: dict) -> dict:
    """``row`` plus the fields verifier ``name`` adds; an unscorable row gets ``error`` and score 0.

    An unknown ``name`` raises ValueError (a usage error, not a row error).
    """
    scorer = get_scorer(name)
    out = dict(row)
    try:
        if not isinstance(row, dict):
            raise RowError(f"row must be a JSON object, got {type(row).__name__}")
        added = scorer.fn(row)
        if "score" not in added:
            raise RowError("verifier returned no score")
        out.update(added)
        out["score"] = float(added["score"])
        out.pop("error", None)
    except RowError as e:
        out.update(scorer.defaults)
        out.update(score=0.0, error=str(e) or "unscorable row")
    except Exception as e:   # a verifier bug on odd input must not stop a file or the service
        out.update(scorer.defaults)
        out.update(score=0.0, error=f"internal: {type(e).__name__}: {str(e)[:200]}")
    return out
