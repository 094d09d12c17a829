"""The verifiers by name: ``VERIFIERS[type] -> Verifier`` for the ``type`` of a verifier spec.

Each verifier lives in its own module and registers itself with
``@register_verifier("name")``; ``VERIFIER_MODULES`` lists those modules so
that looking a verifier up loads them all (and nothing heavier than needed
is imported until a spec is scored).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from stages.common.named_registry import Registry

# Modules that register verifiers; add a new verifier's module here.
VERIFIER_MODULES = (
    "stages.gym.provisional",
    "stages.gym.mcq",
    "stages.gym.math_equiv",
    "stages.gym.json_schema",
    "stages.gym.title_judge",
    "stages.gym.code_tests",
    "stages.gym.ifeval_rules",
    "stages.gym.tool_reward",
    "stages.gym.qa_match",
)


@dataclass(frozen=True)
class Verifier:
    """``fn(spec, response, reference) -> score in [0, 1]``.

    ``needs_reference``: the spec alone cannot judge a response (math, mcq);
    False when everything needed is in the spec (unit tests, IFEval rules).
    ``judged``: open-ended; scored by a learned judge (GenRM), not by rules.
    """
    name: str
    fn: Callable[[dict, str, str], float]
    needs_reference: bool = True
    judged: bool = False


VERIFIERS: Registry = Registry("verifier", modules=VERIFIER_MODULES)


def register_verifier(name: str, needs_reference: bool = True, judged: bool = False):
    """Decorator: make ``fn(spec, response, reference)`` the verifier for specs of ``type`` ``name``."""
    def deco(fn):
        VERIFIERS.register(name)(Verifier(name, fn, needs_reference, judged))
        return fn
    return deco


def load_all() -> Registry:
    return VERIFIERS.loaded()


def get_verifier(name: str) -> Verifier:
    return load_all().lookup(name)
