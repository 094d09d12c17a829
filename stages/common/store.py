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

import contextlib
import hashlib
import io
import logging
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterator

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from artifacts_schema import MANIFEST_FILE, FileEntry, InputRef, Manifest, conform, schema_id
from artifacts_schema.tables import TABLE_SCHEMAS
from stages.common.fingerprint import sha256_file

log = logging.getLogger("compass.store")

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


class ArtifactStore:
    def __init__(self, root: str = "./artifacts", storage_options: dict | None = None,
                 cache_dir: str | Path | None = None, create: bool = True):
        self.storage_options = dict(storage_options or {})
        fs, path = fsspec.core.url_to_fs(root, **self.storage_options)
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
            return Manifest.model_validate_json(raw)
        except ValueError as e:
            raise ArtifactCorrupt(f"{self.uri(kind, name, version)}: unreadable manifest: {e}") from None

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
                    self._collect(self.get(k, n), keep)
        for vdir in sorted(self.fs.glob(self._p("*", "*", "*"))):
            k, n, v = vdir[len(self.root_path) + 1:].split("/")[:3]
            if v == LATEST_FILE or not self.fs.isdir(vdir):
                continue
            m = self._read_manifest(k, n, v)
            entries = self._entries(vdir)
            if m is None:
                if not entries:
                    if self.is_local:
                        rm_empty(vdir, "never committed")
                elif all(self._entry_age_s(vdir, e) >= grace_s for e in entries):
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
                if self._entry_age_s(vdir, e) >= grace_s:
                    rm(f"{vdir}/{e}", "payload of an attempt that did not commit")
        return removed

    def _entry_age_s(self, vdir: str, entry: str) -> float:
        """Age of an attempt's payload dir or temp manifest: from its name (when it was started or,
        on object stores, uploaded) and, locally, from its last write, whichever is younger."""
        age = _attempt_age_s(entry.split("tmp-")[-1] if "tmp-" in entry else entry)
        if self.is_local:
            with contextlib.suppress(OSError):
                age = min(age, _idle_s(f"{vdir}/{entry}"))
        return age

    def _entries(self, vdir: str) -> list[str]:
        """Names directly inside a version directory. On object stores, only names that hold
        objects: some servers (SeaweedFS) keep listing a prefix as an empty "directory"
        after everything under it was deleted."""
        if self.is_local:
            return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in self.fs.ls(vdir, detail=False))
        base = vdir.rstrip("/") + "/"
        return sorted({key[len(base):].split("/", 1)[0] for key in self.fs.find(vdir) if key.startswith(base)})

    def _collect(self, art: "Artifact", keep: set[str]) -> None:
        if art.uri in keep:
            return
        keep.add(art.uri)
        for ref in art.manifest.inputs:
            with contextlib.suppress(ArtifactError):
                self._collect(Artifact.open_uri(ref.uri, self), keep)


@dataclass
class Artifact:
    """A committed artifact version: read its files, verified against the manifest."""
    store: ArtifactStore
    manifest: Manifest

    kind = property(lambda self: self.manifest.kind)
    name = property(lambda self: self.manifest.name)
    version = property(lambda self: self.manifest.version)
    uri = property(lambda self: self.store.uri(self.kind, self.name, self.version))

    @staticmethod
    def open_uri(uri: str, store: ArtifactStore | None = None) -> "Artifact":
        """Open an artifact by URI, in ``store`` when it lives there, else in its own root."""
        if store is not None:
            with contextlib.suppress(ArtifactNotFound):
                if uri.startswith(store.root + "/") or (store.is_local and uri.startswith("/")):
                    return store.open(uri)
        root = uri.rstrip("/").rsplit("/", 3)[0]
        opts = store.storage_options if store is not None and not store.is_local else None
        cache = store.cache_dir if store is not None else None
        return ArtifactStore(root, storage_options=opts, cache_dir=cache, create=False).open(uri)

    def ref(self, slot: str) -> InputRef:
        return InputRef(slot=slot, uri=self.uri, kind=self.kind, name=self.name, version=self.version)

    def _remote(self, rel: str) -> str:
        return self.store._p(self.kind, self.name, self.version, self.manifest.payload_dir, rel)

    def _entry(self, rel: str) -> FileEntry:
        for f in self.manifest.files:
            if f.path == rel:
                return f
        raise ArtifactNotFound(f"{self.uri}: no file '{rel}' in manifest")

    def _check(self, entry: FileEntry, found: str) -> None:
        if found != entry.sha256:
            raise ArtifactCorrupt(f"{self.uri}: file '{entry.path}' checksum mismatch "
                                  f"(manifest sha256 {entry.sha256[:12]}…, found {found[:12]}…)")

    def _verify_local(self, entry: FileEntry, path: str) -> None:
        st = os.stat(path)
        key = (st.st_size, st.st_mtime_ns)
        if self.store._verified.get(path) == key:
            return
        if st.st_size != entry.size:
            raise ArtifactCorrupt(f"{self.uri}: file '{entry.path}' checksum mismatch "
                                  f"(size {st.st_size} bytes, manifest says {entry.size})")
        self._check(entry, sha256_file(path))
        self.store._verified[path] = key

    def read_bytes(self, rel: str) -> bytes:
        entry = self._entry(rel)
        try:
            data = self.store.fs.cat_file(self._remote(rel))
        except FileNotFoundError:
            raise ArtifactCorrupt(f"{self.uri}: file '{rel}' listed in manifest is missing") from None
        self._check(entry, hashlib.sha256(data).hexdigest())
        return data

    def read_table(self, rel: str = TABLE_FILE) -> pa.Table:
        """The table, checksum-verified and validated against its kind's schema."""
        if self.store.is_local:
            path = self._remote(rel)
            if not os.path.exists(path):
                raise ArtifactCorrupt(f"{self.uri}: file '{rel}' listed in manifest is missing")
            self._verify_local(self._entry(rel), path)
            table = pq.read_table(path)
        else:
            table = pq.read_table(io.BytesIO(self.read_bytes(rel)))
        return conform(table, self.kind, self.uri)

    def iter_batches(self, batch_size: int = 65536, rel: str = TABLE_FILE) -> Iterator[pa.RecordBatch]:
        """Stream a large table by record batch (checksum verified first)."""
        path = self.local_path(rel)
        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size):
            yield conform(pa.Table.from_batches([batch]), self.kind, self.uri).to_batches()[0]

    def local_path(self, rel: str) -> Path:
        return self.local_dir() / rel

    def _cache_intact(self, dest: Path) -> bool:
        """Cheap check of a cached download: every file there with the manifest's size."""
        for e in self.manifest.files:
            p = dest / e.path
            if not p.is_file() or p.stat().st_size != e.size:
                return False
        return True

    def local_dir(self, fresh: bool = False) -> Path:
        """A local directory holding every file, each verified against the manifest.

        For a remote store the files are downloaded once into the cache (a cached copy whose
        sizes no longer match is fetched again). ``fresh`` re-reads and re-hashes everything
        from the store itself: what ``compass artifacts verify`` uses.
        """
        if self.store.is_local:
            base = self._remote("")
            if fresh:
                for entry in self.manifest.files:
                    self.store._verified.pop(os.path.join(base, entry.path), None)
            for entry in self.manifest.files:
                p = os.path.join(base, entry.path)
                if not os.path.exists(p):
                    raise ArtifactCorrupt(f"{self.uri}: file '{entry.path}' listed in manifest is missing")
                self._verify_local(entry, p)
            return Path(base)
        dest = self.store.cache_dir / self.kind / self.name / self.version / self.manifest.payload_dir
        marker = dest / ".verified"
        if marker.exists() and (fresh or not self._cache_intact(dest)):
            shutil.rmtree(dest, ignore_errors=True)  # re-download: verify the store, not an old copy
        if not marker.exists():
            tmp = Path(tempfile.mkdtemp(prefix=".dl-", dir=_mkdir(dest.parent)))
            try:
                for entry in self.manifest.files:
                    (tmp / entry.path).parent.mkdir(parents=True, exist_ok=True)
                try:  # one batched, concurrent download
                    if self.manifest.files:
                        self.store.fs.get([self._remote(e.path) for e in self.manifest.files],
                                          [str(tmp / e.path) for e in self.manifest.files])
                except FileNotFoundError:
                    for entry in self.manifest.files:
                        if not self.store.fs.exists(self._remote(entry.path)):
                            raise ArtifactCorrupt(f"{self.uri}: file '{entry.path}' listed in manifest "
                                                  f"is missing") from None
                    raise
                for entry in self.manifest.files:
                    target = tmp / entry.path
                    if not target.is_file():
                        raise ArtifactCorrupt(f"{self.uri}: file '{entry.path}' listed in manifest is missing")
                    self._check(entry, sha256_file(target))
                (tmp / ".verified").write_text("ok\n")
                try:
                    os.replace(tmp, dest)
                except OSError:
                    if marker.exists():  # another process finished the same download first
                        shutil.rmtree(tmp, ignore_errors=True)
                    else:  # a stale, unverified leftover
                        shutil.rmtree(dest, ignore_errors=True)
                        os.replace(tmp, dest)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        return dest


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


class ArtifactWriter:
    """Collects one artifact's files, then commits them with the manifest last."""

    def __init__(self, store: ArtifactStore, kind: str, name: str, version: str, manifest_fields: dict):
        self.store, self.kind, self.name, self.version = store, kind, name, version
        self.fields = manifest_fields
        self.attempt = _new_attempt()
        self.rows: int | None = None
        self._rows_by_file: dict[str, int] = {}
        self.extra: dict = {}
        if store.is_local:
            # Stage in place: the payload dir is invisible until the manifest names it.
            self.dir = Path(store._p(kind, name, version, self.attempt))
            self.dir.mkdir(parents=True)
            (self.dir / ATTEMPT_MARKER).touch()
        else:
            self.dir = Path(tempfile.mkdtemp(prefix=f"compass-{kind}-{name}-"))
        self.committed: Artifact | None = None

    @property
    def uri(self) -> str:
        return self.store.uri(self.kind, self.name, self.version)

    def path(self, rel: str) -> Path:
        p = self.dir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_table(self, table: pa.Table, rel: str = TABLE_FILE) -> None:
        table = conform(table, self.kind, self.uri)
        pq.write_table(table, self.path(rel))
        self._count_rows(rel, table.num_rows, replace=True)

    def _count_rows(self, rel: str, n: int, replace: bool = False) -> None:
        """``rows`` is the total over the table files; rewriting a file replaces its count."""
        self._rows_by_file[rel] = n if replace else self._rows_by_file.get(rel, 0) + n
        self.rows = sum(self._rows_by_file.values())

    @contextlib.contextmanager
    def table_writer(self, rel: str = TABLE_FILE):
        """Stream a large table: ``write(batch_or_table)`` appends one row group."""
        writer = None

        def write(tbl):
            nonlocal writer
            if isinstance(tbl, pa.RecordBatch):
                tbl = pa.Table.from_batches([tbl])
            tbl = conform(tbl, self.kind, self.uri)
            if writer is None:
                writer = pq.ParquetWriter(self.path(rel), tbl.schema)
                self._count_rows(rel, 0, replace=True)
            writer.write_table(tbl)
            self._count_rows(rel, tbl.num_rows)
        try:
            yield write
            if writer is None:  # no rows at all: still a valid, empty table
                write(TABLE_SCHEMAS[self.kind].empty_table())
        finally:
            if writer is not None:
                writer.close()

    def _payload_files(self) -> list[Path]:
        return [p for p in sorted(self.dir.rglob("*")) if p.is_file() and p.relative_to(self.dir) != Path(ATTEMPT_MARKER)]

    def has_files(self) -> bool:
        return bool(self._payload_files())

    def _file_entries(self) -> list[FileEntry]:
        return [FileEntry(path=str(p.relative_to(self.dir)), size=p.stat().st_size, sha256=sha256_file(p))
                for p in self._payload_files()]

    def abort(self) -> None:
        """Discard this attempt's files. A no-op once committed: the payload is the artifact's now."""
        if self.committed is not None:
            return
        if self.store.is_local or self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)

    def commit(self) -> Artifact:
        """Write the manifest (the commit marker). If another writer committed
        this version first, discard ours and return theirs."""
        store = self.store
        if self.committed is not None:  # committed twice (e.g. by a stage body and then the runner)
            return self.committed
        if store.exists(self.kind, self.name, self.version):
            self.abort()
            return store.get(self.kind, self.name, self.version)
        is_table = self.kind in TABLE_SCHEMAS
        if is_table and self.rows is None:
            raise ArtifactError(f"{self.uri}: table artifact committed without a table")
        if store.is_local and not (self.dir / ATTEMPT_MARKER).exists():
            # Someone (gc with a short --grace) removed our payload while we wrote it: files written
            # before that are gone, so committing what is left would be a silent corruption.
            raise ArtifactError(f"{self.uri}: payload {self.attempt} was removed while the stage was writing "
                                f"it (gc?); nothing committed")
        if not store.is_local:
            self.attempt = _new_attempt()  # gc measures an attempt's age from its name: name it at upload
        manifest = Manifest(kind=self.kind, name=self.name, version=self.version, files=self._file_entries(),
                            rows=self.rows if is_table else None,
                            table_schema=schema_id(self.kind) if is_table else None,
                            payload_dir=self.attempt, extra=self.extra, **self.fields)
        body = manifest.model_dump_json(indent=2).encode()
        mpath = store._p(self.kind, self.name, self.version, MANIFEST_FILE)
        if store.is_local:
            tmp = store._p(self.kind, self.name, self.version, f".manifest.tmp-{self.attempt}")
            with open(tmp, "wb") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            (self.dir / ATTEMPT_MARKER).unlink()
            try:
                os.link(tmp, mpath)  # atomic create-if-absent: exactly one writer wins
            except FileExistsError:
                os.unlink(tmp)
                self.abort()
                return store.get(self.kind, self.name, self.version)
            os.unlink(tmp)
        else:
            remote_dir = store._p(self.kind, self.name, self.version, self.attempt)
            if manifest.files:
                store.fs.put([str(self.dir / e.path) for e in manifest.files],
                             [f"{remote_dir}/{e.path}" for e in manifest.files])
            shutil.rmtree(self.dir, ignore_errors=True)
            if store.exists(self.kind, self.name, self.version):
                return self._lost_race(remote_dir)
            store.fs.invalidate_cache()
            uploaded = {k[len(remote_dir) + 1:] for k in store.fs.find(remote_dir)}
            missing = [e.path for e in manifest.files if e.path not in uploaded]
            if missing:
                raise ArtifactError(f"{self.uri}: payload {self.attempt} lost {missing[:3]} after upload (gc?); "
                                    f"nothing committed")
            if not self._put_manifest_if_absent(mpath, body):
                return self._lost_race(remote_dir)
        self.committed = Artifact(store, manifest)
        return self.committed

    def _put_manifest_if_absent(self, mpath: str, body: bytes) -> bool:
        """Conditional PUT (``If-None-Match: *``): False when another manifest is there.

        Servers without conditional writes fall back to a plain PUT (then the
        last manifest wins; either names a complete payload)."""
        fs = self.store.fs
        protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
        if not {"s3", "s3a"} & set(protocols):  # other object stores: the last manifest wins
            fs.pipe_file(mpath, body)
            return True
        for attempt in range(20):
            try:
                fs.pipe_file(mpath, body, IfNoneMatch="*")
                return True
            except OSError as e:
                code, status = _s3_error(e)
                if code == "PreconditionFailed" or status == 412:
                    # Ours, if an internal retry of our own PUT got here first.
                    theirs = self.store._read_manifest(self.kind, self.name, self.version)
                    return theirs is not None and theirs.payload_dir == self.attempt
                if code == "ConditionalRequestConflict" or status == 409:
                    time.sleep(0.05 * (attempt + 1))  # a concurrent conditional PUT is in flight
                    continue
                if code in ("NotImplemented", "InvalidArgument") or status == 501:
                    log.warning("%s: the object store has no conditional PUT; committing unconditionally",
                                self.uri)
                    fs.pipe_file(mpath, body)
                    return True
                raise
        raise ArtifactError(f"{self.uri}: could not commit the manifest: conditional PUT kept conflicting")

    def _lost_race(self, remote_dir: str) -> Artifact:
        """Another writer committed this version: drop our payload, return theirs."""
        theirs = self.store.get(self.kind, self.name, self.version)
        if theirs.manifest.payload_dir == self.attempt:  # it is ours after all
            self.committed = theirs
        else:
            with contextlib.suppress(OSError):
                self.store.fs.rm(remote_dir, recursive=True)
        return theirs
