"""Prefect's API for a command-line run: the server ``PREFECT_API_URL`` names, or Prefect's temporary
(ephemeral) server started with patience.

Prefect waits 20 s for its temporary server by default; on a slow or busy 2-core machine the first start
(imports, a fresh SQLite database and its migrations) can take longer, and the run then died in a
40-line traceback (issue 30). Here the wait comes from Prefect's own setting
``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``, whose default ``flows/__init__.py`` raises to
:data:`DEFAULT_START_TIMEOUT_S`; a server that still has not answered is stopped and started once more
on a fresh port with twice the wait (a machine slow enough to miss once is likely busy still), and if that
fails too the run ends in one line that says what to do.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

TIMEOUT_ENV = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
DEFAULT_START_TIMEOUT_S = 120
ATTEMPTS = 2

log = logging.getLogger("compass.prefect")


class PrefectStartError(RuntimeError):
    """Prefect's temporary API server did not start; the message is one line with what to do."""


def start_timeout_s() -> int:
    raw = os.environ.get(TIMEOUT_ENV, str(DEFAULT_START_TIMEOUT_S))
    try:
        value = int(raw)                        # Prefect's own setting is an int: "1.5" would fail there
    except ValueError:
        raise PrefectStartError(f"{TIMEOUT_ENV}={raw!r} is not a whole number of seconds") from None
    if value <= 0:
        raise PrefectStartError(f"{TIMEOUT_ENV}={raw!r} must be a positive number of seconds")
    return value


def _check_home() -> None:
    """PREFECT_HOME exists as a writable folder (made with its parents if missing): without one the
    temporary server fails to open its SQLite database and hangs rather than exits, so the run would
    wait out every start's timeout before failing."""
    home = Path(os.environ.get("PREFECT_HOME", "~/.prefect")).expanduser()
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PrefectStartError(f"PREFECT_HOME={home} cannot be made ({e.strerror or e}); set PREFECT_HOME to "
                                f"a writable folder") from None
    if not os.access(home, os.W_OK | os.X_OK):
        raise PrefectStartError(f"PREFECT_HOME={home} is not writable; set PREFECT_HOME to a writable folder")


def ensure_prefect_api() -> str:
    """The API URL this process's flows will use; starts Prefect's temporary server when none is set.

    The started server is the one Prefect's own clients reuse for the rest of the process (its
    ``SubprocessASGIServer`` is one instance per process), and Prefect stops it at exit.
    Raises :class:`PrefectStartError` after :data:`ATTEMPTS` starts, the n-th of which waited n times the timeout.
    """
    timeout = start_timeout_s()                 # before Prefect reads (and rejects) a malformed value
    from prefect.settings import PREFECT_API_URL
    url = PREFECT_API_URL.value()
    if url:
        return url
    _check_home()
    from prefect.server.api.server import SubprocessASGIServer
    why = ""
    for attempt in range(1, ATTEMPTS + 1):
        server = SubprocessASGIServer()
        wait = timeout * attempt
        try:
            server.start(timeout=wait)
            return server.api_url
        except Exception as e:  # Prefect raises RuntimeError on a time-out, httpx errors on a bad answer
            code = server.server_process.poll() if server.server_process else None
            why = f"the server process exited with code {code}" if code is not None else \
                f"no answer within {wait} s"
            log.debug("Prefect temporary server, attempt %d: %s", attempt, e)
            server.stop()                       # kills a hung process and forgets the instance: a fresh port next
            if attempt < ATTEMPTS:
                log.warning("Prefect's temporary API server did not start (%s); starting it again "
                            "(attempt %d of %d)", why, attempt + 1, ATTEMPTS)
    raise PrefectStartError(
        f"Prefect's temporary API server did not start ({why}; {ATTEMPTS} tries). On a slow or busy machine "
        f"raise {TIMEOUT_ENV} (now {timeout}), or start a server with `prefect server start` and set "
        f"PREFECT_API_URL=http://127.0.0.1:4200/api")
