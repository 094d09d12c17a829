"""Credentials stay out of everything a run records.

A store's credentials come from the environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``AWS_PROFILE``: s3fs reads them itself) or from a Prefect ``Secret`` block named
by ``store_options.credentials_block`` (resolved into that environment by ``flows/credentials.py``).
A config or a ``--store-option`` that holds a credential is refused: the config is a Prefect flow
parameter, printed by ``compass config`` and part of deployments, so a secret there would be stored
and shown. docs/secrets.md says the whole policy.
"""
from __future__ import annotations

import os

# Storage-option keys (any depth, any case) that carry a credential: s3fs, botocore, gcsfs, adlfs names.
CREDENTIAL_KEYS = frozenset({
    "key", "secret", "token", "password", "passwd", "access_key", "secret_key", "session_token",
    "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "security_token", "client_secret",
    "account_key", "sas_token", "connection_string", "credentials"})
# The one option that names where credentials are, not what they are.
BLOCK_KEY = "credentials_block"
# Environment variables whose values are secrets: log records never show them.
SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
REDACTED = "***"


class CredentialsInConfig(ValueError):
    """A credential was written where it would be recorded (a config, a command line)."""


def credential_paths(options, prefix: str = "") -> list[str]:
    """Dotted paths of the credential keys in ``options``."""
    out: list[str] = []
    if isinstance(options, dict):
        for k, v in options.items():
            path = f"{prefix}{k}"
            if str(k).lower() in CREDENTIAL_KEYS and v not in (None, ""):
                out.append(path)
            else:
                out += credential_paths(v, path + ".")
    return out


def refuse_credentials(options: dict, where: str) -> None:
    """CredentialsInConfig naming the first credential key of ``options``; ``where`` prefixes its path
    (``store_options.``, ``--store-option ``)."""
    found = credential_paths(options)
    if found:
        raise CredentialsInConfig(
            f"{where}{found[0]}: credentials are not taken from configs or the command line (they would be "
            f"recorded with the run); set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the "
            f"environment, or save them in a Prefect Secret block and name it: store_options {BLOCK_KEY}: NAME "
            f"(--store-option {BLOCK_KEY}=NAME)")


def fsspec_options(options: dict | None) -> dict:
    """What the filesystem is given: the options less the block name (resolved into the environment)."""
    return {k: v for k, v in (options or {}).items() if k != BLOCK_KEY}


def secret_values() -> list[str]:
    """The secrets this process holds in its environment (long enough to be worth hiding)."""
    return [v for v in (os.environ.get(k) for k in SECRET_ENV) if v and len(v) >= 8]


def redact(text: str, secrets: list[str] | None = None) -> str:
    """``text`` with every known secret value replaced by ``***``."""
    for s in secrets if secrets is not None else secret_values():
        if s in text:
            text = text.replace(s, REDACTED)
    return text
