"""Content fingerprints: stage-run versions and code versions.

A stage run's version is the hash of everything that decides its output:
the stage, its config, its inputs' identities and the code that runs it.
Same fingerprint -> same artifact, so the run is skipped and reused.
"""
from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import stages

VERSION_LEN = 16


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def digest(obj) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


@functools.lru_cache(maxsize=None)
def code_version(*packages: str) -> str:
    """Hash of the Python sources of ``stages.<package>`` for each package named.

    Editing a stage (or a library it names) changes its versions, so stale
    artifacts are never reused after a code change.
    """
    root = Path(stages.__file__).parent
    h = hashlib.sha256()
    for pkg in sorted(set(packages)):
        pkg_dir = root / pkg
        if not pkg_dir.is_dir():
            raise ValueError(f"code_version: no package stages/{pkg}")
        for f in sorted(pkg_dir.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:VERSION_LEN]


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
