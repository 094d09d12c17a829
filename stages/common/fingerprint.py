"""Content fingerprints: stage-run versions and code versions.

A stage run's version is the hash of everything that decides its output:
the stage, its config, its inputs' identities and the code that runs it.
Same fingerprint -> same artifact, so the run is skipped and reused.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
from pathlib import Path

import artifacts_schema
import stages

VERSION_LEN = 16


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def digest(obj) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


# Modules that only orchestrate or report (CLI, logging, progress bars): editing them changes no
# output, so they are not part of any version.
NOT_IN_CODE_VERSION = {"common/stage_cli.py", "common/invoke.py", "common/logs.py", "common/progress.py",
                       "common/store_options.py"}
# Third-party packages whose version can change what a stage writes.
VERSIONED_DEPENDENCIES = ("torch", "transformers", "tokenizers", "safetensors", "mergekit", "pyarrow")


@functools.lru_cache(maxsize=None)
def code_version(*packages: str) -> str:
    """Hash of the sources of ``stages.<package>`` for each package named, of the table
    contract (``artifacts_schema``) and of the versions of VERSIONED_DEPENDENCIES.

    Editing a stage (or a library it names) or upgrading torch/transformers changes its
    versions, so stale artifacts are never reused after such a change.
    """
    root = Path(stages.__file__).parent
    h = hashlib.sha256()
    for pkg in sorted(set(packages)):
        pkg_dir = root / pkg
        if not pkg_dir.is_dir():
            raise ValueError(f"code_version: no package stages/{pkg}")
        for f in sorted(pkg_dir.rglob("*.py")):
            rel = str(f.relative_to(root))
            if rel not in NOT_IN_CODE_VERSION:
                h.update(rel.encode())
                h.update(f.read_bytes())
    schema_dir = Path(artifacts_schema.__file__).parent
    for f in sorted(schema_dir.glob("*.py")):
        h.update(f"artifacts_schema/{f.name}".encode())
        h.update(f.read_bytes())
    for dist in VERSIONED_DEPENDENCIES:
        h.update(f"{dist}=={_dist_version(dist)}".encode())
    return h.hexdigest()[:VERSION_LEN]


def _dist_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


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
