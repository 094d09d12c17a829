"""The one registry of Compass-Gym's verifiers: ``VERIFIERS[name] -> Verifier``.

Every verifier is one module, ``compass/gym/verifiers/<name>.py``, that registers
itself under its file's name with both of its forms:

- the spec form, ``spec(spec, response, reference) -> float`` in [0, 1], for the
  ``{"type": name, ...}`` JSON a prompts table stores in its ``verifier`` column
  (``compass.gym.score.score``);
- the row form, ``row(row) -> added fields`` (always with ``score``), for
  ``compass gym score NAME`` and the reward service (``compass.gym.rows``). A
  learned judge must see rows in batches through a loaded checkpoint, so it gives
  ``judge_rows(rows, judge=CKPT, ...)`` instead.

The name is the one tables store, so config, tables, the CLI and the docs all use
it. Looking a verifier up imports every module of ``compass.gym.verifiers`` once;
heavy dependencies (a judge's model) are imported only when used.
"""
from __future__ import annotations

import pkgutil
from dataclasses import dataclass, field
from typing import Callable

from compass.gym import verifiers as _verifier_package
from compass.registry import Registry

# Written as a name prefix so that a stage's code version (compass.runtime.code_version) covers every
# verifier module, which only this registry imports (by name, at run time).
VERIFIER_PREFIX = "compass.gym.verifiers."
VERIFIER_MODULES = tuple(VERIFIER_PREFIX + m.name for m in pkgutil.iter_modules(_verifier_package.__path__))

# Names the CLI and the reward service took before there was one registry: asking for one says what it is now.
RENAMED = {"json": "json_schema", "tool": "tool_call"}

SpecFn = Callable[[dict, str, str], float]
RowFn = Callable[[dict], dict]


@dataclass(frozen=True)
class Verifier:
    """A verifier's two forms and what its callers must know about it.

    ``needs_reference``: the spec alone cannot judge a response (math, mcq);
    False when everything needed is in the spec (unit tests, IFEval rules).
    ``judged``: open-ended; only a learned judge scores it for real, so offline
    checks (data_filter) do not trust a rules score of it.
    ``defaults`` and ``error_score``: the fields and score of a row that cannot be
    scored; the error score is the verifier's minimum (a number, or a function of
    the row), so failing to be scored never pays more than a wrong answer.
    """
    name: str
    spec: SpecFn
    row: RowFn | None = None
    judge_rows: Callable[[list[dict], dict], tuple[list[dict], dict]] | None = None
    defaults: dict = field(default_factory=dict)
    error_score: float | Callable[[dict], float] = 0.0
    needs_reference: bool = True
    judged: bool = False

    @property
    def needs_judge(self) -> bool:
        """Rows are scored by a learned judge loaded from a checkpoint (``--judge CKPT``)."""
        return self.judge_rows is not None

    def score_on_error(self, row) -> float:
        if callable(self.error_score):
            try:
                return float(self.error_score(row))
            except Exception:
                return 0.0
        return float(self.error_score)


VERIFIERS: Registry = Registry("gym verifier", modules=VERIFIER_MODULES)


def register_verifier(verifier: Verifier) -> Verifier:
    """Make ``verifier`` known by its name; a verifier module calls this once."""
    if (verifier.row is None) == (verifier.judge_rows is None):
        raise ValueError(f"verifier '{verifier.name}' needs exactly one row form (row or judge_rows)")
    VERIFIERS.register(verifier.name)(verifier)
    return verifier


def load_all() -> Registry:
    return VERIFIERS.loaded()


def get_verifier(name: str) -> Verifier:
    """The verifier called ``name``; ValueError naming the new name of an old one, or listing the known ones."""
    if name in RENAMED:
        raise ValueError(f"gym verifier '{name}' is now called '{RENAMED[name]}'")
    return load_all().lookup(name)
