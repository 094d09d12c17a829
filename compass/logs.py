"""Logging for the command-line entry points: a quiet console, a full log file.

Console (stderr): records of our own loggers (``compass`` and below) from INFO (``COMPASS_LOG_LEVEL``),
everybody else's (mergekit, which logs on the root logger, transformers, Ray, datasets,
urllib3/botocore, Prefect's own run chatter) only from WARNING. So ``compass run`` shows the stage
table, progress bars, each stage's few result lines and every warning. ``verbose`` (``--verbose``
on ``compass run`` / ``compass stage``, or ``COMPASS_VERBOSE=1``) lets third-party INFO through too.

Log file (``log_file``, a new one per run under ``$COMPASS_LOG_DIR``, default ``.compass/logs``:
:func:`new_log_file`): every record, ours from DEBUG, third parties' from INFO, whatever the console
shows.

Three libraries print through their own stderr handler: Ray (logger ``ray``, set up when ``ray`` is
imported) and transformers (logger ``transformers``) stop propagation, datasets holds its logger at
WARNING. They are adopted: their handler is removed, their level cleared and their records propagate
to ours, so the same rules hold for them
(transformers' verbosity goes to INFO for the log file unless TRANSFORMERS_VERBOSITY is set). A
library imported later is adopted as its import finishes (a small import hook, installed here).
HTTP clients' per-request lines (httpx, httpcore: Prefect's API calls) stay at WARNING everywhere.

Inside a Prefect run, records of ``compass`` also reach the run's logs: flows/ names it in
PREFECT_LOGGING_EXTRA_LOGGERS, and Prefect attaches its API handler to that logger.
"""
from __future__ import annotations

import importlib.abc
import logging
import os
import sys
import time
from pathlib import Path

from compass.credentials import redact
from compass.import_hook import spec_from_other_finders

OURS = "compass"
FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
# Per-request INFO lines of Prefect's HTTP client: kept out of the log file too.
CHATTY = ("httpx", "httpcore")
# Libraries with their own stderr handler (and their own level) that we route through ours.
ADOPTED = ("ray", "transformers", "datasets")

class RedactingFormatter(logging.Formatter):
    """The usual format, with every secret the environment holds (``compass.credentials.SECRET_ENV``)
    replaced by ``***``: a library that prints its configuration or a request cannot put one in a log."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class ConsoleFilter(logging.Filter):
    """Our records from the handler's level; third parties' only from WARNING unless verbose."""

    def __init__(self, verbose: bool = False):
        super().__init__()
        self.verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        if self.verbose or record.levelno >= logging.WARNING:
            return True
        return record.name == OURS or record.name.startswith(OURS + ".")


def _marked(handler: logging.Handler) -> logging.Handler:
    handler._compass = True                       # ours: replaced, not duplicated, by a new setup
    return handler


def new_log_file(kind: str = "run") -> Path:
    """A fresh log file path ``$COMPASS_LOG_DIR/<kind>-<time>-<pid>.log`` (directory created)."""
    d = Path(os.environ.get("COMPASS_LOG_DIR", ".compass/logs"))
    d.mkdir(parents=True, exist_ok=True)
    return (d / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log").resolve()


def setup_logging(*, verbose: bool | None = None, log_file: str | Path | None = None) -> Path | None:
    """Configure the root logger: the console handler (stderr, :class:`ConsoleFilter`) and, with
    ``log_file``, a file handler that takes everything. Calling it again replaces both.
    Returns the log file's path (None without one)."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when transformers is imported
    if verbose is None:
        verbose = os.environ.get("COMPASS_VERBOSE", "0") not in ("", "0", "false")
    root = logging.getLogger()
    for h in [h for h in root.handlers if getattr(h, "_compass", False)]:
        root.removeHandler(h)
        h.close()
    fmt = RedactingFormatter(FORMAT)
    console = _marked(logging.StreamHandler(sys.stderr))
    console.setLevel(os.environ.get("COMPASS_LOG_LEVEL", "INFO").upper())
    console.addFilter(ConsoleFilter(verbose))
    console.setFormatter(fmt)
    root.addHandler(console)
    path = None
    if log_file is not None:
        path = Path(log_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = _marked(logging.FileHandler(path, encoding="utf-8"))
        fh.setFormatter(fmt)
        root.addHandler(fh)
    # which records are made at all: third parties' INFO (for the file), ours down to DEBUG
    # when a file takes them, else down to the console's level
    root.setLevel(logging.INFO)
    logging.getLogger(OURS).setLevel(logging.DEBUG if path is not None else console.level)
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in ADOPTED:
        if name in sys.modules:
            adopt(name)
    if not any(isinstance(f, _AdoptOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AdoptOnImport())
    return path


def adopt(name: str) -> None:
    """Route library ``name``'s logger through the root handlers instead of its own stderr handler."""
    logger = logging.getLogger(name)
    for h in list(logger.handlers):
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
            logger.removeHandler(h)
    logger.propagate = True
    tlog = sys.modules.get("transformers.utils.logging") if name == "transformers" else None
    if tlog is None:
        logger.setLevel(logging.NOTSET)     # e.g. datasets holds itself at WARNING: its INFO for the log file
    else:
        tlog.disable_default_handler()      # its own handler, should transformers set it up again
        tlog.enable_propagation()
        if "TRANSFORMERS_VERBOSITY" not in os.environ:
            tlog.set_verbosity_info()       # its INFO for the log file; the console filter holds it back


class _AdoptOnImport(importlib.abc.MetaPathFinder):
    """Adopts an :data:`ADOPTED` library's logger right after its top-level import finishes."""

    def find_spec(self, name, path=None, target=None):
        if name not in ADOPTED:
            return None
        spec = spec_from_other_finders(self, name, path, target)
        if spec is None:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_then_adopt(module):
            exec_module(module)
            adopt(name)

        loader.exec_module = exec_then_adopt        # this loader instance serves this one module
        return spec
