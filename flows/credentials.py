"""Store credentials from a Prefect ``Secret`` block: ``store_options: {credentials_block: NAME}``.

The block's value is a JSON object ``{"aws_access_key_id": …, "aws_secret_access_key": …}`` (optionally
``aws_session_token``). It is put into this process's environment, where s3fs looks for credentials, so
the secret never passes through a config, a flow or task parameter, a manifest or a log line (Prefect
stores the block encrypted and shows it obfuscated). Stage subprocesses and local Ray workers inherit it.
"""
from __future__ import annotations

import os

from compass.credentials import BLOCK_KEY

_ENV = {"aws_access_key_id": "AWS_ACCESS_KEY_ID", "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY",
        "aws_session_token": "AWS_SESSION_TOKEN"}


class CredentialsBlockError(ValueError):
    """The named block is missing or does not hold AWS-style credentials."""


def apply_credentials_block(store_options: dict | None) -> None:
    """Load the Secret block that ``store_options`` names (if any) into the environment."""
    name = (store_options or {}).get(BLOCK_KEY)
    if not name:
        return
    from prefect.blocks.system import Secret
    try:
        value = Secret.load(str(name)).get()
    except ValueError as e:  # Prefect: "Unable to find block document named …"
        raise CredentialsBlockError(f"store_options.{BLOCK_KEY}: no Prefect Secret block {name!r} "
                                    f"({' '.join(str(e).split())[:200]})") from None
    if not isinstance(value, dict) or not {"aws_access_key_id", "aws_secret_access_key"} <= set(value):
        raise CredentialsBlockError(f"store_options.{BLOCK_KEY}: Secret block {name!r} must hold a JSON object "
                                    f"with aws_access_key_id and aws_secret_access_key")
    for key, env in _ENV.items():
        if value.get(key):
            os.environ[env] = str(value[key])
