"""``--store-option KEY=VALUE`` parsing for every command, and one line for a store client's failure
(``backend_error_line``). Dotted keys nest, true/false/null and
JSON values are decoded (``use_ssl=false``, ``client_kwargs.region_name=eu``, ``config_kwargs={...}``)."""
from __future__ import annotations

import json

from compass.credentials import refuse_credentials


def _decode(value: str):
    low = value.strip().lower()
    if low in ("true", "false", "null", "none"):
        return {"true": True, "false": False}.get(low)
    if value.strip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            pass
    return value


def parse_store_options(items: list[str]) -> dict:
    out: dict = {}
    for it in items:
        key, sep, value = it.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--store-option must be KEY=VALUE, got '{it}'")
        cur = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            nxt = cur.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ValueError(f"--store-option {it}: '{part}' is already set to a value")
            cur = nxt
        cur[parts[-1]] = _decode(value)
    refuse_credentials(out, "--store-option ")
    return out


def backend_errors() -> tuple[type[BaseException], ...]:
    """The exceptions an object store's client raises past fsspec (no credentials, unreachable endpoint,
    refused request): s3fs turns some into OSError, not these."""
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        return ()
    return (BotoCoreError, ClientError)


def backend_error_line(e: BaseException, root: str | None) -> str:
    """One line for a ``backend_errors()`` failure, saying which store and which options would fix it."""
    where = f"store {root}" if root else "the store"
    text = " ".join(str(e).split()) or type(e).__name__
    name = type(e).__name__
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        hint = ("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), name a Prefect Secret block "
                "(--store-option credentials_block=NAME), or --store-option anon=true for a public bucket")
        return f"cannot open {where}: {text}: {hint}"
    if "Connect" in name or "Timeout" in name:
        return f"cannot reach {where}: {text} (check --store-option endpoint_url=…)"
    return f"{where}: {text}"
