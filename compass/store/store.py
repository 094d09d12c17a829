"""Versioned artifact store on any fsspec root (``file://`` or ``s3://``).

Layout: ``{root}/{kind}/{name}/{version}/manifest.json`` plus one payload
directory per write attempt, ``{version}/data-{epoch}-{rand}/``. Writers fill
their own payload directory and then write the manifest, which names that
directory: the manifest is the commit marker. Two writers of one version
never touch each other's files, so whichever manifest a reader sees points at
a complete, checksummed payload. Exactly one manifest wins: locally by a hard
link (atomic create-if-absent), on S3 by a conditional PUT (``If-None-Match: *``).
The loser removes its own payload and returns the winner's artifact; what a
crashed writer leaves behind is invisible to readers and removed by ``gc``.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

import fsspec
from fsspec.implementations.local import LocalFileSystem
from pydantic import ValidationError

from artifacts_schema import MANIFEST_FILE, Manifest
from compass.credentials import fsspec_options
from compass.store.artifact import Artifact
from compass.store.artifact_writer import ArtifactWriter
from compass.store.layout import (  # noqa: F401  (re-exported: the store's public names)
    ATTEMPT_MARKER,
    DEFAULT_GRACE_S,
    LATEST_FILE,
    PAYLOAD_PREFIX,
    TABLE_FILE,
    ArtifactCorrupt,
    ArtifactError,
    ArtifactNotFound,
)


def _bad_relpath(path: str) -> bool:
    """Not a plain relative path inside the version directory (empty, absolute, '..', over-long names)."""
    parts = path.split("/")
    return not path or path.startswith("/") or "\\" in path or \
        any(p in ("", ".", "..") or len(p.encode("utf-8", "surrogatepass")) > 255 for p in parts)


def manifest_problem(m: Manifest, kind: str, name: str, version: str) -> str | None:
    """Why a parsed manifest cannot be the one at ``kind/name/version``: it names another artifact, or
    points at files outside its own version directory (a hand-edited or foreign manifest)."""
    if (m.kind, m.name, m.version) != (kind, name, version):
        return f"it describes {m.kind}/{m.name}/{m.version}"
    if "/" in m.payload_dir or _bad_relpath(m.payload_dir) or m.payload_dir == MANIFEST_FILE:
        return f"payload_dir {m.payload_dir[:80]!r} is not a folder name"
    for f in m.files:
        if _bad_relpath(f.path):
            return f"file path {f.path[:80]!r} leaves the payload folder"
    return None


class ArtifactStore:
    def __init__(self, root: str = "./artifacts", storage_options: dict | None = None,
                 cache_dir: str | Path | None = None, create: bool = True):
        self.storage_options = dict(storage_options or {})
        fs, path = fsspec.core.url_to_fs(root, **fsspec_options(self.storage_options))
        self.fs = fs
        self.is_local = isinstance(fs, LocalFileSystem)
        if self.is_local:
            path = os.path.abspath(path)
            if create:
                os.makedirs(path, exist_ok=True)
            self.root = "file://" + path
        else:
            proto = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
            self.root = f"{proto}://{path.rstrip('/')}"
        self.root_path = path.rstrip("/")
        default_cache = Path(os.environ.get("COMPASS_CACHE", Path.home() / ".cache" / "compass-rl"))
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache / "store"
        self._verified: dict[str, tuple] = {}

    def __repr__(self) -> str:
        return f"ArtifactStore({self.root!r})"

    # -- paths -------------------------------------------------------------
    def _p(self, *parts: str) -> str:
        return "/".join([self.root_path, *parts])

    def uri(self, kind: str, name: str, version: str) -> str:
        return f"{self.root}/{kind}/{name}/{version}"

    def parse_uri(self, uri: str) -> tuple[str, str, str]:
        """``{root}/{kind}/{name}/{version}`` -> (kind, name, version); the root must be this store's."""
        rest = uri.rstrip("/")
        if rest.startswith(self.root + "/"):
            rest = rest[len(self.root) + 1:]
        elif self.is_local and os.path.abspath(rest).startswith(self.root_path + "/"):
            rest = os.path.abspath(rest)[len(self.root_path) + 1:]
        else:
            raise ArtifactNotFound(f"{uri}: not under store root {self.root}")
        parts = rest.split("/")
        if len(parts) != 3:
            raise ArtifactNotFound(f"{uri}: expected {self.root}/KIND/NAME/VERSION")
        return parts[0], parts[1], parts[2]

    # -- reading -----------------------------------------------------------
    def _read_manifest(self, kind: str, name: str, version: str) -> Manifest | None:
        path = self._p(kind, name, version, MANIFEST_FILE)
        try:
            raw = self.fs.cat_file(path)
        except FileNotFoundError:
            return None
        try:
            m = Manifest.model_validate_json(raw)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "the document"
            more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
            raise ArtifactCorrupt(f"{self.uri(kind, name, version)}: unreadable manifest: {where}: "
                                  f"{first['msg']}{more}") from None
        why = manifest_problem(m, kind, name, version)
        if why:
            raise ArtifactCorrupt(f"{self.uri(kind, name, version)}: unreadable manifest: {why}")
        return m

    def exists(self, kind: str, name: str, version: str) -> bool:
        if not self.is_local:
            self.fs.invalidate_cache()
        return self.fs.exists(self._p(kind, name, version, MANIFEST_FILE))

    def latest_version(self, kind: str, name: str) -> str | None:
        try:
            return self.fs.cat_file(self._p(kind, name, LATEST_FILE)).decode().strip() or None
        except FileNotFoundError:
            return None

    def get(self, kind: str, name: str, version: str = "latest") -> "Artifact":
        if version == "latest":
            resolved = self.latest_version(kind, name)
            if resolved is None:
                raise ArtifactNotFound(f"{self.root}/{kind}/{name}: no 'latest' version")
            version = resolved
        m = self._read_manifest(kind, name, version)
        if m is None:
            raise ArtifactNotFound(f"{self.uri(kind, name, version)}: no committed manifest")
        return Artifact(self, m)

    def open(self, uri: str) -> "Artifact":
        return self.get(*self.parse_uri(uri))

    def list(self, kind: str | None = None, name: str | None = None) -> list[Manifest]:
        """Committed artifacts only: a version without a manifest is invisible."""
        if not self.is_local:
            self.fs.invalidate_cache()
        pattern = self._p(kind or "*", name or "*", "*", MANIFEST_FILE)
        out = []
        for path in sorted(self.fs.glob(pattern)):
            k, n, v = path[len(self.root_path) + 1:].split("/")[:3]
            m = self._read_manifest(k, n, v)
            if m is not None:
                out.append(m)
        return sorted(out, key=lambda m: (m.kind, m.name, m.created_at))

    def set_latest(self, kind: str, name: str, version: str) -> None:
        path = self._p(kind, name, LATEST_FILE)
        if self.is_local:
            tmp = f"{path}.tmp-{secrets.token_hex(4)}"
            Path(tmp).write_text(version + "\n")
            os.replace(tmp, path)  # atomic: readers see the old or the new alias
        else:
            self.fs.pipe_file(path, (version + "\n").encode())

    # -- writing -----------------------------------------------------------
    def begin(self, kind: str, name: str, version: str, **manifest_fields) -> "ArtifactWriter":
        return ArtifactWriter(self, kind, name, version, manifest_fields)

    # -- lineage and garbage collection ------------------------------------
    def lineage(self, art: "Artifact", _seen: set | None = None) -> dict:
        """The tree of artifacts that ``art`` was made from."""
        seen = _seen if _seen is not None else set()
        node = {"uri": art.uri, "kind": art.kind, "name": art.name, "version": art.version,
                "producer": art.manifest.producer, "inputs": []}
        if art.uri in seen:
            return node
        seen.add(art.uri)
        for ref in art.manifest.inputs:
            try:
                node["inputs"].append({"slot": ref.slot, **self.lineage(Artifact.open_uri(ref.uri, self), seen)})
            except ArtifactError as e:
                node["inputs"].append({"slot": ref.slot, "uri": ref.uri, "missing": str(e), "inputs": []})
        return node

    def gc(self, *, grace_s: float = DEFAULT_GRACE_S, prune: bool = False, dry_run: bool = False) -> list[dict]:
        """Remove what no reader can see; see ``compass.store.gc.collect_garbage``."""
        from compass.store.gc import collect_garbage
        return collect_garbage(self, grace_s=grace_s, prune=prune, dry_run=dry_run)

    def _entries(self, vdir: str) -> list[str]:
        """Names directly inside a version directory. On object stores, only names that hold
        objects: some servers (SeaweedFS) keep listing a prefix as an empty "directory"
        after everything under it was deleted."""
        if self.is_local:
            return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in self.fs.ls(vdir, detail=False))
        base = vdir.rstrip("/") + "/"
        return sorted({key[len(base):].split("/", 1)[0] for key in self.fs.find(vdir) if key.startswith(base)})
