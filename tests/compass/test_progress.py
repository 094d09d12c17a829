"""compass.progress: per-step lines leave the console while a bar shows the progress."""
from __future__ import annotations

import logging

from compass.progress import bars_on, step_level


def test_step_lines_are_debug_under_a_bar_and_info_without(monkeypatch):
    monkeypatch.setenv("COMPASS_PROGRESS", "1")
    assert bars_on() and step_level() == logging.DEBUG       # the log file keeps them, the console shows the bar
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    assert not bars_on() and step_level() == logging.INFO    # no bar: the lines are the progress
