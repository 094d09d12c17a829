"""The RL state for resume: everything a killed run needs to continue as if it never stopped.

One file, ``rl_state.pt``, replaced atomically (write a temp file, then rename),
so a kill during a save leaves the previous state intact.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

STATE_FILE = "rl_state.pt"


def save_state(state_dir: str | Path, state: dict) -> Path:
    d = Path(state_dir)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{STATE_FILE}.tmp-{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, d / STATE_FILE)
    return d / STATE_FILE


def load_state(state_dir: str | Path | None) -> dict | None:
    """The saved state, or None when there is none."""
    if state_dir is None:
        return None
    path = Path(state_dir) / STATE_FILE
    if not path.exists():
        return None
    return torch.load(path, weights_only=False)
