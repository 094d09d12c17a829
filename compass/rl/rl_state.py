"""The RL state for resume: everything a killed run needs to continue as if it never stopped.

One file, ``rl_state.pt``, saved atomically through ``compass.runtime.stage_state``,
so a kill during a save leaves the previous state intact.
"""
from __future__ import annotations

from pathlib import Path

from compass.runtime import stage_state

STATE_FILE = "rl_state.pt"


def save_state(state_dir: str | Path, state: dict) -> Path:
    return stage_state.save_state(state_dir, STATE_FILE, state)


def load_state(state_dir: str | Path | None) -> dict | None:
    """The saved state, or None when there is none."""
    return stage_state.load_state(state_dir, STATE_FILE)
