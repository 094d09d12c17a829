"""Names, errors and clocks shared by the artifact store, its reader, its writer and its gc."""
from __future__ import annotations

import contextlib
import os
import secrets
import time
from datetime import datetime
from pathlib import Path

from artifacts_schema import Manifest

LATEST_FILE = "LATEST"
ATTEMPT_MARKER = ".attempt"   # in a local payload dir while its writer works; not a payload file
DEFAULT_GRACE_S = 24 * 3600.0  # gc leaves uncommitted payloads younger than this alone
PAYLOAD_PREFIX = "data-"
TABLE_FILE = "data.parquet"


class ArtifactError(Exception):
    """Base class for store errors; the message names the artifact."""


class ArtifactNotFound(ArtifactError):
    pass


class ArtifactCorrupt(ArtifactError):
    pass


def _new_attempt() -> str:
    return f"{PAYLOAD_PREFIX}{int(time.time())}-{secrets.token_hex(4)}"


def _created_age_s(m: Manifest) -> float:
    try:
        return time.time() - datetime.fromisoformat(m.created_at).timestamp()
    except ValueError:
        return float("inf")


def _s3_error(exc: BaseException) -> tuple[str, int | None]:
    """(error code, HTTP status) of a botocore error, also when s3fs wrapped it in an OSError."""
    seen = 0
    e: BaseException | None = exc
    while e is not None and seen < 8:
        resp = getattr(e, "response", None)
        if isinstance(resp, dict):
            return (str(resp.get("Error", {}).get("Code", "")),
                    resp.get("ResponseMetadata", {}).get("HTTPStatusCode"))
        e = e.__cause__ or e.__context__
        seen += 1
    return "", None


def _attempt_age_s(attempt: str) -> float:
    """Seconds since a payload directory (or temp manifest) was started."""
    try:
        return time.time() - int(attempt.split("-")[1])
    except (IndexError, ValueError):
        return float("inf")


def _idle_s(path: str) -> float:
    """Seconds since anything under a local path was last written: a writer at work is never idle long."""
    newest = os.lstat(path).st_mtime
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            with contextlib.suppress(OSError):
                newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
    return time.time() - newest


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p
