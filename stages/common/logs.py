"""Logging for command-line entry points. Stages log to ``logging.getLogger("compass.<stage>")``;
inside a Prefect run the same records also reach the run's logs (PREFECT_LOGGING_EXTRA_LOGGERS)."""
from __future__ import annotations

import logging
import os


def setup_logging() -> None:
    """Our own logs at INFO (COMPASS_LOG_LEVEL); third-party chatter (HTTP requests, per-load bars) off."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when transformers is imported
    logging.basicConfig(level=os.environ.get("COMPASS_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for noisy in ("httpx", "httpcore", "urllib3", "botocore", "aiobotocore", "s3fs"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
