"""Writing one artifact version: fill a private payload directory, then commit the manifest."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from artifacts_schema import MANIFEST_FILE, FileEntry, Manifest, conform, schema_id
from artifacts_schema.tables import TABLE_SCHEMAS
from compass.store.artifact import Artifact
from compass.store.fingerprint import sha256_file
from compass.progress import transfer_progress
from compass.store.layout import (
    ATTEMPT_MARKER,
    TABLE_FILE,
    ArtifactError,
    _new_attempt,
    _s3_error,
)

if TYPE_CHECKING:
    from compass.store.store import ArtifactStore

log = logging.getLogger("compass.store")


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
            try:
                with open(tmp, "wb") as f:
                    f.write(body)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:  # a full disk, most likely: leave no half-written manifest behind
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise ArtifactError(f"{self.uri}: could not write the manifest, nothing committed: "
                                    f"{e.strerror or e}") from e
            (self.dir / ATTEMPT_MARKER).unlink()
            try:
                os.link(tmp, mpath)  # atomic create-if-absent: exactly one writer wins
            except FileExistsError:
                os.unlink(tmp)
                self.abort()
                return store.get(self.kind, self.name, self.version)
            os.unlink(tmp)
        else:
            try:
                won = self._upload(manifest, mpath, body)
            except ArtifactError:
                raise
            except Exception as e:  # the server went away mid-upload, refused, timed out: name what failed
                first = (str(e).strip().splitlines() or [""])[0]
                raise ArtifactError(f"{self.uri}: upload of payload {self.attempt} failed, nothing committed: "
                                    f"{type(e).__name__}: {first}") from e
            if won is not None:
                return won
        self.committed = Artifact(store, manifest)
        return self.committed

    def _upload(self, manifest: Manifest, mpath: str, body: bytes) -> Artifact | None:
        """Upload the payload, then the manifest if no other writer's is there. Another writer's artifact
        when it won the race, else None (ours is committed)."""
        store = self.store
        remote_dir = store._p(self.kind, self.name, self.version, self.attempt)
        if manifest.files:
            store.fs.put([str(self.dir / e.path) for e in manifest.files],
                         [f"{remote_dir}/{e.path}" for e in manifest.files],
                         callback=transfer_progress(f"upload {self.kind}/{self.name}"))
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
        return None

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
