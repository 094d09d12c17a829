"""Hypothesis profiles for the fuzz tests: bounded (the folder runs in about a minute on 2 cores), and
derandomized under CI=true so a CI failure replays the same examples."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, max_examples=40, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                      HealthCheck.data_too_large])
settings.register_profile("compass-fuzz", **_COMMON)
settings.register_profile("compass-fuzz-ci", derandomize=True, database=None, **_COMMON)
settings.load_profile("compass-fuzz-ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes")
                      else "compass-fuzz")
