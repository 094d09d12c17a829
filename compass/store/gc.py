"""Garbage collection of a store: what no reader can see, once it is old enough."""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from artifacts_schema import MANIFEST_FILE
from compass.store.artifact import Artifact
from compass.store.layout import (
    DEFAULT_GRACE_S,
    LATEST_FILE,
    ArtifactError,
    _attempt_age_s,
    _created_age_s,
    _idle_s,
)

if TYPE_CHECKING:
    from compass.store.store import ArtifactStore


def collect_garbage(self: "ArtifactStore", *, grace_s: float = DEFAULT_GRACE_S, prune: bool = False,
                    dry_run: bool = False) -> list[dict]:
    """Remove what no reader can see: versions that never committed and the
    payloads of attempts that lost a commit race or crashed, once older than
    ``grace_s``. With ``prune``, also committed versions that no ``LATEST``
    alias reaches through lineage."""
    if not self.is_local:
        self.fs.invalidate_cache()
    removed = []

    def rm(path: str, why: str):
        removed.append({"path": path, "reason": why})
        if not dry_run:
            self.fs.rm(path, recursive=True)

    def rm_empty(path: str, why: str):
        # Not recursive: a writer that just created its payload dir here keeps it.
        if dry_run:
            removed.append({"path": path, "reason": why})
            return
        with contextlib.suppress(OSError):
            self.fs.rmdir(path)
            removed.append({"path": path, "reason": why})

    keep: set[str] | None = None
    if prune:
        keep = set()
        for latest in self.fs.glob(self._p("*", "*", LATEST_FILE)):
            k, n = latest[len(self.root_path) + 1:].split("/")[:2]
            with contextlib.suppress(ArtifactError):
                _collect(self, self.get(k, n), keep)
    for vdir in sorted(self.fs.glob(self._p("*", "*", "*"))):
        k, n, v = vdir[len(self.root_path) + 1:].split("/")[:3]
        if v.startswith(f"{LATEST_FILE}.tmp-") and self.is_local and _idle_s(vdir) >= grace_s:
            rm(vdir, "alias update that did not finish")  # a crash between write and rename
            continue
        if v == LATEST_FILE or not self.fs.isdir(vdir):
            continue
        m = self._read_manifest(k, n, v)
        entries = self._entries(vdir)
        if m is None:
            if not entries:
                if self.is_local:
                    rm_empty(vdir, "never committed")
            elif all(_entry_age_s(self, vdir, e) >= grace_s for e in entries):
                rm(vdir, "never committed")
            continue
        if keep is not None and self.uri(k, n, v) not in keep and _created_age_s(m) >= grace_s:
            # The grace period protects a version committed a moment ago whose
            # LATEST alias is not written yet.
            rm(vdir, "not reachable from any LATEST alias")
            continue
        for e in entries:
            if e == MANIFEST_FILE or e == m.payload_dir:
                continue
            if _entry_age_s(self, vdir, e) >= grace_s:
                rm(f"{vdir}/{e}", "payload of an attempt that did not commit")
    return removed


def _entry_age_s(self: "ArtifactStore", vdir: str, entry: str) -> float:
    """Age of an attempt's payload dir or temp manifest: from its name (when it was started or,
    on object stores, uploaded) and, locally, from its last write, whichever is younger."""
    age = _attempt_age_s(entry.split("tmp-")[-1] if "tmp-" in entry else entry)
    if self.is_local:
        with contextlib.suppress(OSError):
            age = min(age, _idle_s(f"{vdir}/{entry}"))
    return age

def _collect(self: "ArtifactStore", art: "Artifact", keep: set[str]) -> None:
    if art.uri in keep:
        return
    keep.add(art.uri)
    for ref in art.manifest.inputs:
        with contextlib.suppress(ArtifactError):
            _collect(self, Artifact.open_uri(ref.uri, self), keep)
