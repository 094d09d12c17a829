"""Progress bars for long loops, quiet when output is not a terminal and not asked for."""
from __future__ import annotations

import os
import sys

from tqdm.auto import tqdm


def progress(iterable=None, *, total: int | None = None, desc: str = "", unit: str = "it"):
    """A tqdm bar on stderr; COMPASS_PROGRESS=0 turns bars off (e.g. in CI logs)."""
    enabled = os.environ.get("COMPASS_PROGRESS", "1") != "0"
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=not enabled, file=sys.stderr,
                mininterval=1.0, dynamic_ncols=True, leave=False)


def transfer_progress(desc: str):
    """An fsspec callback showing files moved to or from an object store (checkpoints can be GBs)."""
    from fsspec.callbacks import NoOpCallback, TqdmCallback
    if os.environ.get("COMPASS_PROGRESS", "1") == "0":
        return NoOpCallback()
    return TqdmCallback(tqdm_kwargs={"desc": desc, "unit": "file", "leave": False, "file": sys.stderr,
                                     "mininterval": 1.0, "dynamic_ncols": True})
