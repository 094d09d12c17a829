"""Content fingerprints: stage-run versions and file checksums (code versions: compass.runtime.code_version).

A stage run's version is the hash of everything that decides its output:
the stage, its config, its inputs' identities and the code that runs it.
Same fingerprint -> same artifact, so the run is skipped and reused.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

VERSION_LEN = 16


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def digest(obj) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


def run_version(stage: str, config: dict, inputs: dict[str, tuple[str, str, str]],
                outputs: dict[str, str], code: str) -> str:
    """Version of one stage run. ``inputs``: slot -> (kind, name, version)."""
    return digest({"stage": stage, "config": config, "inputs": inputs,
                   "outputs": outputs, "code": code})[:VERSION_LEN]


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()
