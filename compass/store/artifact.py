"""A committed artifact version: its files, read and verified against its manifest."""
from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from artifacts_schema import ARTIFACT_KINDS, FileEntry, InputRef, Manifest, conform
from compass.store.fingerprint import sha256_file
from compass.progress import transfer_progress
from compass.store.layout import (
    TABLE_FILE,
    ArtifactCorrupt,
    ArtifactNotFound,
    _mkdir,
)

if TYPE_CHECKING:
    from compass.store.store import ArtifactStore

log = logging.getLogger("compass.store")


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
        from compass.store.store import ArtifactStore  # the store imports this module
        parts = uri.strip().rstrip("/").rsplit("/", 3)
        if len(parts) < 4 or not all(parts):
            raise ArtifactNotFound(f"{uri!r}: not an artifact URI; expected ROOT/KIND/NAME/VERSION")
        if parts[1] not in ARTIFACT_KINDS:
            hint = (f"; it lacks the VERSION (…/{parts[2]}/{parts[3]}/VERSION)" if parts[2] in ARTIFACT_KINDS
                    else f"; KIND is one of {', '.join(ARTIFACT_KINDS)}")
            raise ArtifactNotFound(f"{uri}: not an artifact URI ROOT/KIND/NAME/VERSION{hint}")
        opts = store.storage_options if store is not None and not store.is_local else None
        cache = store.cache_dir if store is not None else None
        try:
            root_store = ArtifactStore(parts[0], storage_options=opts, cache_dir=cache, create=False)
        except (ValueError, ImportError) as e:   # fsspec: "Protocol not known: gopher"
            raise ArtifactNotFound(f"{uri}: cannot open its store {parts[0]}: {' '.join(str(e).split())}") from None
        return root_store.open(uri)

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
        """A cached download whose every file still matches the manifest: a local copy can rot or be
        edited, so each file is hashed once per process (again only when its size or mtime changes)."""
        for e in self.manifest.files:
            p = dest / e.path
            if not p.is_file():
                return False
            try:
                self._verify_local(e, str(p))
            except ArtifactCorrupt:
                log.warning("%s: cached copy of '%s' does not match the manifest: downloading again",
                            self.uri, e.path)
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
                                          [str(tmp / e.path) for e in self.manifest.files],
                                          callback=transfer_progress(f"download {self.kind}/{self.name}"))
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
                for entry in self.manifest.files:  # hashed above (or by the process that won): not again
                    st = (dest / entry.path).stat()
                    self.store._verified[str(dest / entry.path)] = (st.st_size, st.st_mtime_ns)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        return dest
