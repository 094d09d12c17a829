"""Prefect flows: thin wrappers that call stages. No logic lives here.

Importing this package sets Prefect's defaults for a project-local run:
ephemeral mode (no server to start by hand) unless PREFECT_API_URL is set.
"""
import os
from pathlib import Path

os.environ.setdefault("PREFECT_HOME", str(Path.cwd() / ".prefect"))
# Prefect makes its home without parents (a warning), and its temporary server then cannot open its SQLite
# database and hangs instead of exiting: make the whole path first. A path that cannot be made is
# reported by flows.prefect_api in one line.
try:
    Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)
except OSError:
    pass
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Prefect waits 20 s for its temporary server; a slow or busy machine needs longer (flows/prefect_api.py).
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
# Stage logs use plain logging under "compass"; this sends them to the run's Prefect logs too
# (from INFO: the DEBUG records compass.logs keeps for the run's log file stay out of the API).
os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "compass")
os.environ.setdefault("PREFECT_LOGGING_HANDLERS_API_LEVEL", "INFO")

import logging  # noqa: E402

# Prefect leaves the root logger at WARNING in flow-run processes; stage progress is INFO. Under
# `compass run` / `compass stage`, compass.logs has set the levels already (console and log file).
if logging.getLogger("compass").level == logging.NOTSET:
    logging.getLogger("compass").setLevel(os.environ.get("COMPASS_LOG_LEVEL", "INFO"))
