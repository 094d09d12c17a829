"""The scoring contract of ``compass gym score VERIFIER IN.jsonl OUT.jsonl``: a row in, the row out with fields added.

Each verifier registers ``fn(row) -> dict`` under its public name (``math``,
``code``, ``ifeval``, ``tool``, ``mcq``, ``json``, ``genrm``) with
``@register_scorer(name, defaults={...})``. ``fn`` reads the input fields it
documents and returns the fields it adds, always including ``score``. It
raises ``RowError("short reason")`` for a row it cannot score; ``score_row``
then adds ``error``, the verifier's ``defaults`` and its ``error_score`` (its
minimum: 0 for most, -3 for tool), so one bad row never stops a file or the
reward service and failing to be scored never pays more than a wrong answer.
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
    defaults: dict = field(default_factory=dict)   # fields of an unscorable row (besides its score)
    # the score of a row that cannot be scored: the verifier's minimum, so that failing to be scored
    # never pays more than a wrong answer (a number, or a function of the row, e.g. its score_range)
    error_score: float | Callable[[dict], float] = 0.0

    def score_on_error(self, row) -> float:
        if callable(self.error_score):
            try:
                return float(self.error_score(row))
            except Exception:
                return 0.0
        return float(self.error_score)


SCORERS: Registry = Registry("gym verifier", modules=SCORER_MODULES)


def register_scorer(name: str, defaults: dict | None = None, error_score: float | Callable[[dict], float] = 0.0):
    """Decorator: ``fn(row) -> added fields`` scores rows for ``compass gym score NAME``."""
    def deco(fn):
        SCORERS.register(name)(Scorer(name, fn, dict(defaults or {}), error_score))
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


def score_fields(name: str, row) -> dict:
    """The fields verifier ``name`` adds to ``row``: its own fields and ``score``, plus ``error`` (None when
    scored). An unscorable row gets the verifier's defaults, its error score and the reason.

    An unknown ``name`` raises ValueError (a usage error, not a row error).
    """
    scorer = get_scorer(name)
    try:
        if not isinstance(row, dict):
            raise RowError(f"row must be a JSON object, got {type(row).__name__}")
        added = scorer.fn(row)
        if "score" not in added:
            raise RowError("verifier returned no score")
        return {**added, "score": float(added["score"]), "error": None}
    except RowError as e:
        reason = str(e) or "unscorable row"
    except Exception as e:   # a verifier bug on odd input must not stop a file or the service
        reason = f"internal: {type(e).__name__}: {str(e)[:200]}"
    return {**scorer.defaults, "score": scorer.score_on_error(row if isinstance(row, dict) else {}),
            "error": reason}


def merge_fields(row: dict, fields: dict) -> dict:
    """``row`` with ``fields`` written over it (a stale ``correct`` or ``error`` from an earlier run is
    replaced); ``error`` appears only when there is one."""
    out = {**row, **fields}
    if out.get("error") is None:
        out.pop("error", None)
    return out


def score_row(name: str, row: dict) -> dict:
    """``row`` plus the fields verifier ``name`` adds (see ``score_fields``); a non-object row becomes
    ``{"error": ..., "score": ...}``."""
    fields = score_fields(name, row)
    return merge_fields(row if isinstance(row, dict) else {}, fields)
