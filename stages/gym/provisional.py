"""The world's spec verifiers' entry point, and exact math answers.

One entry point, ``score(verifier, response, reference) -> float`` in [0, 1],
where ``verifier`` is the JSON spec stored in ``prompts.verifier``:

- ``{"type": "math_exact"}``: the final answer's number equals the reference
  exactly (integers, decimals, fractions ``3/4``, negatives, ``1,234``,
  ``\\boxed{..}``), compared as ``fractions.Fraction``; ``0.75`` equals ``3/4``.

The ``mcq`` spec lives with the multilingual extractor in ``stages.gym.mcq``.

The final answer is the text after the last ``</think>``; a response with no
``</think>`` is its own final answer, unless it opened a ``<think>`` that it
never closed: an unfinished thought has no answer (scores 0), so a truncated
trace cannot earn reward from numbers inside its reasoning.

Every other spec type (code, ifeval, tool_call, mcq, json_schema, qa, genrm)
registers itself from its own module (``stages.gym.registry``) behind the same
``score``; the row-level API for ``compass gym score`` is ``stages.gym.rows``.
"""
from __future__ import annotations

import json
import re
from fractions import Fraction
from stages.gym.registry import get_verifier, load_all, register_verifier

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def final_answer(response: str) -> str:
    """The text after the last ``</think>`` (stripped); the whole text when no
    thinking was opened; "" when a ``<think>`` was opened and never closed."""
    if response is None:
        return ""
    if THINK_CLOSE in response:
        return response.rsplit(THINK_CLOSE, 1)[1].strip()
    if THINK_OPEN in response:
        return ""
    return response.strip()


# -- numbers -------------------------------------------------------------------
_NUM = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?|[-+]?\.\d+"
_NUM_RE = re.compile(_NUM)
_NUM_FULL = re.compile(rf"\s*({_NUM})\s*")


def _to_fraction(tok: str) -> Fraction | None:
    tok = tok.replace(",", "").replace(" ", "")
    try:
        if "/" in tok:
            num, den = tok.split("/", 1)
            d = Fraction(den)
            if d == 0:
                return None
            return Fraction(num) / d
        return Fraction(tok)
    except (ValueError, ZeroDivisionError):
        return None


def parse_number(text: str) -> Fraction | None:
    """The number a short answer states, exactly; None when it states none.

    A bare number (``-12``, ``3/4``, ``0.5``, ``1,234``) is read whole; in
    longer text (``the answer is 22.``) the last number is taken.
    """
    if text is None:
        return None
    from stages.gym.math_extract import last_boxed   # math_extract imports this module
    t = text.replace("\u2212", "-").strip()
    boxed = last_boxed(t)
    if boxed is not None:
        t = boxed.strip()
    t = t.strip("$ ").rstrip(".")
    m = _NUM_FULL.fullmatch(t)
    if m:
        return _to_fraction(m.group(1))
    found = _NUM_RE.findall(t)
    return _to_fraction(found[-1]) if found else None


# -- verifiers -----------------------------------------------------------------
@register_verifier("math_exact")
def _math_exact(spec: dict, response: str, reference: str) -> float:
    ref = parse_number(reference)
    got = parse_number(final_answer(response))
    if ref is None or got is None:
        return 0.0
    return 1.0 if got == ref else 0.0


def parse_verifier(verifier: str | dict) -> dict:
    """The verifier spec as a dict with a known ``type``; ValueError otherwise."""
    if isinstance(verifier, dict):
        spec = verifier
    else:
        try:
            spec = json.loads(verifier)
        except (TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"verifier spec is not valid JSON: {verifier!r} ({e})") from None
    if not isinstance(spec, dict) or "type" not in spec:
        raise ValueError(f"verifier spec must be a JSON object with a 'type': {verifier!r}")
    known = load_all()
    if spec["type"] not in known:
        raise ValueError(f"unknown verifier type '{spec['type']}' (known: {', '.join(sorted(known))})")
    return spec


def needs_reference(verifier: str | dict) -> bool:
    """Whether a response can only be judged against a reference answer (False: the spec suffices)."""
    return get_verifier(parse_verifier(verifier)["type"]).needs_reference


def is_judged(verifier: str | dict) -> bool:
    """Whether the verifier is a learned judge (GenRM) rather than rules: it cannot score offline."""
    return get_verifier(parse_verifier(verifier)["type"]).judged


def score(verifier: str | dict, response: str, reference: str) -> float:
    """Reward in [0, 1] of ``response`` against ``reference`` under ``verifier``."""
    spec = parse_verifier(verifier)
    return float(get_verifier(spec["type"]).fn(spec, response or "", reference or ""))
