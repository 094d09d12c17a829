"""Progress bars for long loops, quiet when output is not a terminal and not asked for."""
from __future__ import annotations

import logging
import os
import sys

from tqdm.auto import tqdm


def bars_on() -> bool:
    return os.environ.get("COMPASS_PROGRESS", "1") != "0"


def progress(iterable=None, *, total: int | None = None, desc: str = "", unit: str = "it"):
    """A tqdm bar on stderr; COMPASS_PROGRESS=0 turns bars off (e.g. in CI logs)."""
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=not bars_on(), file=sys.stderr,
                mininterval=1.0, dynamic_ncols=True, leave=False)


def step_level() -> int:
    """Log level of a loop's per-step lines: DEBUG (the log file only) while a bar shows the progress,
    INFO (console and Prefect run logs) when bars are off, so progress is still visible somewhere."""
    return logging.DEBUG if bars_on() else logging.INFO


def transfer_progress(desc: str):
    """An fsspec callback showing files moved to or from an object store (checkpoints can be GBs)."""
    from fsspec.callbacks import NoOpCallback, TqdmCallback
    if not bars_on():
        return NoOpCallback()
    return TqdmCallback(tqdm_kwargs={"desc": desc, "unit": "file", "leave": False, "file": sys.stderr,
                                     "mininterval": 1.0, "dynamic_ncols": True})
