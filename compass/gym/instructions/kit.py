"""The instruction table: one ``Rule`` per instruction id, with the kwargs it takes and checks.

A rule is ``fn(text, **kwargs) -> bool`` plus a declaration of its kwargs, so
that a spec that does not fit its id (a missing or unknown key, a wrong type,
a relation IFEval does not know) is an ``InstructionError`` before any text is
looked at. IFEval's own code fills a missing kwarg with a random value, which
suits generating prompts but not grading them; here every declared kwarg is
required unless it has a default. ``None`` means "not given" (IFEval's
Hugging Face layout lists every key of every id, unused ones as null).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

RELATIONS = ("less than", "at least")                            # IFEval's
COMPASS_RELATIONS = RELATIONS + ("at most", "exactly")            # the compass:* rules also take these


class InstructionError(ValueError):
    """An instruction id or kwargs that cannot be checked; the message says why."""


@dataclass(frozen=True)
class Param:
    """One kwarg: ``kind`` names its check in ``_CHECKS``; a param with a ``default`` is optional."""
    kind: str
    default: Any = None


def _int(v, lo: int):
    # JSON has one number type: 3.0 is a fine count, True and "3" are not
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v):
        raise TypeError("an integer")
    if v < lo:
        raise TypeError(f"an integer >= {lo}")
    return int(v)


def _text(v):
    if not isinstance(v, str) or not v.strip():
        raise TypeError("a non-empty string")
    return v


def _texts(v):
    if not isinstance(v, (list, tuple)) or not v or not all(isinstance(x, str) and x.strip() for x in v):
        raise TypeError("a non-empty list of non-empty strings")
    return list(v)


def _letter(v):
    # IFEval swaps anything but a-z for a random letter; IFEval's own data asks for '#' and '!',
    # so any single visible character is counted as itself
    if not isinstance(v, str) or len(v) != 1 or v.isspace():
        raise TypeError("a single character")
    return v.lower()


def _relation(v, allowed=RELATIONS):
    if v not in allowed:
        raise TypeError(f"one of {allowed}")
    return v


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "count": lambda v: _int(v, 0),
    "positive": lambda v: _int(v, 1),
    "text": _text,
    "texts": _texts,
    "relation": _relation,
    "relation+": lambda v: _relation(v, COMPASS_RELATIONS),
    "letter": _letter,
}


@dataclass(frozen=True)
class Rule:
    iid: str
    fn: Callable[..., bool]
    params: dict[str, Param] = field(default_factory=dict)
    validate_more: Callable[[dict], None] | None = None   # cross-kwarg checks (nth <= num, ...)

    def __call__(self, text: str, **kwargs) -> bool:
        """Check ``text`` (strict) with ``kwargs`` checked first."""
        return bool(self.fn(text, **self.bind(kwargs)))

    def bind(self, kwargs: dict | None) -> dict:
        """The kwargs ``fn`` is called with, checked and with defaults filled; InstructionError if they don't fit."""
        if kwargs is None:
            kwargs = {}
        if not isinstance(kwargs, dict):
            raise InstructionError(f"{self.iid}: kwargs must be an object, got {type(kwargs).__name__}")
        given = {k: v for k, v in kwargs.items() if v is not None}
        unknown = sorted(set(given) - set(self.params))
        if unknown:
            raise InstructionError(f"{self.iid}: unexpected kwargs {unknown} (takes {sorted(self.params) or 'none'})")
        out = {}
        for name, p in self.params.items():
            if name not in given:
                if p.default is None:
                    raise InstructionError(f"{self.iid}: missing kwarg '{name}'")
                out[name] = p.default
                continue
            try:
                value = _CHECKS[p.kind](given[name])
            except TypeError as e:
                raise InstructionError(f"{self.iid}: kwarg '{name}' must be {e}, got {given[name]!r}") from None
            out[name] = value
        if self.validate_more:
            try:
                self.validate_more(out)
            except (TypeError, ValueError) as e:
                raise InstructionError(f"{self.iid}: {e}") from None
        return out


RULES: dict[str, Rule] = {}


def rule(iid: str, validate_more: Callable[[dict], None] | None = None, **params: Param):
    """Decorator: register ``fn(text, **kwargs) -> bool`` as the check of instruction ``iid``."""
    def deco(fn):
        if iid in RULES:
            raise ValueError(f"instruction id '{iid}' is registered twice")
        RULES[iid] = Rule(iid, fn, params, validate_more)
        return fn
    return deco


def get_rule(iid) -> Rule:
    if not isinstance(iid, str):
        raise InstructionError(f"instruction id must be a string, got {type(iid).__name__}")
    try:
        return RULES[iid]
    except KeyError:
        raise InstructionError(f"unknown instruction id '{iid}'") from None


def compare(count: int, relation: str, n: int) -> bool:
    """IFEval's 'less than' (count < n) and 'at least' (count >= n); also 'at most' and 'exactly'."""
    if relation == "less than":
        return count < n
    if relation == "at least":
        return count >= n
    if relation == "at most":
        return count <= n
    if relation == "exactly":
        return count == n
    raise InstructionError(f"unknown relation {relation!r}")


# Shorthands for declaring params.
COUNT, POSITIVE, TEXT, TEXTS, RELATION, LETTER = (Param(k) for k in ("count", "positive", "text", "texts", "relation",
                                                                     "letter"))
