"""``--store-option KEY=VALUE`` parsing for every command: dotted keys nest, true/false/null and
JSON values are decoded (``use_ssl=false``, ``client_kwargs.region_name=eu``, ``config_kwargs={...}``)."""
from __future__ import annotations

import json


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
    return out
