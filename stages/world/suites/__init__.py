"""The world's task suites, registered by name: one module per suite.

A suite makes items from ``(rng, item_id, difficulty, language)`` and knows
how its teacher errs (``wrong``: a plausible response that fails the
verifier) and, optionally, another correct response in other words
(``alt``: the second half of a true-tie preference pair). Suites are pure
Python and seeded by the caller's ``random.Random``: the same draws give the
same items, byte for byte.

Add a suite: write ``stages/world/suites/<name>.py`` calling
``register_suite(Suite(...))`` and list the module in ``SUITE_MODULES``.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from compass.registry import Registry
from stages.world.items import Item

LANGUAGES = ("en", "zh-TW", "id", "vi", "th", "pt", "ms")

SUITE_MODULES = (
    "stages.world.suites.arithmetic",
    "stages.world.suites.ecommerce_category",
    "stages.world.suites.ecommerce_relevance",
    "stages.world.suites.ecommerce_brand",
    "stages.world.suites.attribute_json",
    "stages.world.suites.title_rewrite",
    "stages.world.suites.math_word",
    "stages.world.suites.code",
    "stages.world.suites.ifeval",
    "stages.world.suites.tool_use",
    "stages.world.suites.qa",
)


@dataclass(frozen=True)
class Suite:
    name: str
    domain: str
    make: Callable[[random.Random, str, int, str], Item]
    wrong: Callable[[random.Random, Item], str]
    languages: tuple[str, ...] = ("en",)
    reasoning: bool = False      # the teacher thinks (``<think>…</think>`` then the answer)
    alt: Callable[[random.Random, Item], str] | None = None
    description: str = ""


SUITES: Registry = Registry("world suite", modules=SUITE_MODULES)


def register_suite(suite: Suite) -> Suite:
    SUITES.register(suite.name)(suite)
    return suite


def all_suites() -> Registry:
    return SUITES.loaded()


def get_suite(name: str) -> Suite:
    return all_suites().lookup(name)
