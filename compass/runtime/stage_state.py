"""Resumable state of a running stage: what a run killed mid-way (SIGKILL, preemption) needs to go on.

A stage run's state lives outside the artifact store, in one directory per
(output kind, output name, output version) under ``$COMPASS_STATE_DIR``
(default ``.compass/state``). The version is the run's fingerprint, so only a
re-run of the very same stage run (same config, inputs and code) finds it.
Each state file is replaced atomically (temp file, then rename): a kill during
a save leaves the previous state whole. The runner removes the directory once
the run's outputs are committed (they hold everything then), so a kill at any
point before the commit keeps the saved progress.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from pathlib import Path
from typing import Callable, Iterator


def state_root() -> Path:
    return Path(os.environ.get("COMPASS_STATE_DIR", ".compass/state"))


def state_dir_for(writer) -> Path:
    """The state directory of the stage run filling ``writer`` (an ``ArtifactWriter``)."""
    return state_root() / writer.kind / writer.name / writer.version


def save_state(state_dir: str | Path, name: str, state) -> Path:
    """``torch.save`` ``state`` as ``state_dir/name``, atomically."""
    import torch
    d = Path(state_dir)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{name}.tmp-{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, d / name)
    return d / name


def load_state(state_dir: str | Path | None, name: str):
    """The saved state, or None when there is none."""
    if state_dir is None:
        return None
    path = Path(state_dir) / name
    if not path.exists():
        return None
    import torch
    return torch.load(path, weights_only=False)


def clear_state(state_dir: str | Path | None) -> None:
    if state_dir is not None:
        shutil.rmtree(state_dir, ignore_errors=True)


@contextlib.contextmanager
def run_lock(key: str, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold this machine's exclusive lock on one stage run version (``key``) while the run computes it.

    Two processes running the very same version at once (two pipeline runs of one config) would share
    its state directory and interleave their saves; with the lock the second waits, then finds the first's
    outputs committed and reuses them. ``flock`` is released by the kernel when its holder dies, so a
    killed run never leaves the lock held. The state is per machine, and so is the lock: runs on other
    machines meet only at the store's commit, which takes one winner (``ArtifactWriter.commit``)."""
    d = state_root() / ".locks"
    d.mkdir(parents=True, exist_ok=True)
    with open(d / f"{key}.lock", "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
