"""Import an external set into the store: one table artifact of the config's kind plus its quarantine.

Both artifacts share one version, the fingerprint of the source's content,
the config and the importer's code, so importing the same bytes the same way
again reuses what is stored. Rows stream from the source into the two table
writers; rows read = rows imported + rows quarantined (and the per-reason
counts sum to the latter) is checked before anything is committed, and any
failure removes both uncommitted payloads (and the folders made for them). The
quarantine commits first, so a visible table always has its quarantine beside
it. An import that keeps no row commits only its quarantine and raises
``NothingImported``: an empty table would stand in for the set.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

import pyarrow as pa

from compass.runtime.code_version import code_version
from compass.store.fingerprint import VERSION_LEN, digest
from compass.store.store import Artifact, ArtifactStore, ArtifactWriter
from compass.ingest.config import NAME_RE, ImportConfig
from compass.ingest.mapping import RowMapper
from compass.ingest.reader import RawRow, Rejection, read_batches
from compass.ingest.source import Source, content_digest, resolve_source

log = logging.getLogger("compass.ingest")

STAGE = "ingest"
PRODUCER = "import"
QUARANTINE_SCHEMA = pa.schema([
    pa.field("source", pa.string()), pa.field("row_index", pa.int64()), pa.field("field", pa.string()),
    pa.field("reason", pa.string()), pa.field("row_json", pa.string()), pa.field("slot", pa.string()),
    pa.field("detail", pa.string())])
QUARANTINE_SLOT = "import"   # the data_filter's quarantine names its input slot here


class IngestError(RuntimeError):
    """The import cannot finish (e.g. its counts do not balance); nothing was committed."""


class NothingImported(IngestError):
    """Every row was quarantined (or the source had none): no table is committed, only the quarantine,
    so that its rows and reasons can be read (``compass artifacts head``)."""

    def __init__(self, message: str, quarantine_uri: str | None):
        super().__init__(message)
        self.quarantine_uri = quarantine_uri


@dataclass
class ImportResult:
    name: str
    kind: str
    version: str
    status: str                         # "imported" | "reused"
    table_uri: str
    quarantine_uri: str
    rows_read: int
    rows_imported: int
    rows_quarantined: int
    reasons: dict[str, int] = field(default_factory=dict)    # quarantine reason -> rows
    source: dict = field(default_factory=dict)               # uri, format, sha256, files
    wall_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def quarantine_name(name: str) -> str:
    return f"{name}_quarantine"


def _version_inputs(cfg: ImportConfig) -> dict:
    # The artifact name is hashed on its own; storage options (endpoints, keys) do not change the rows.
    return cfg.model_dump(mode="json", by_alias=True, exclude={"name", "storage_options"})


def import_version(cfg: ImportConfig, name: str, source_sha256: str) -> str:
    return digest({"stage": STAGE, "kind": cfg.kind, "name": name, "config": _version_inputs(cfg),
                   "source_sha256": source_sha256, "code": code_version("compass.ingest")})[:VERSION_LEN]


def import_table(cfg: ImportConfig, store: ArtifactStore, name: str | None = None, *,
                 batch_size: int = 1024) -> ImportResult:
    """Import ``cfg.source`` as ``{kind}/{name}`` plus ``quarantine/{name}_quarantine`` (or reuse them)."""
    t0 = time.perf_counter()
    name = name or cfg.name
    if not name or not NAME_RE.match(name):
        raise ValueError(f"import: artifact name {name!r} must be letters, digits, '_', '.', '-' "
                         f"(set name in the config or pass one)")
    src = resolve_source(cfg)
    sha = content_digest(src)
    join_cfg = _join_config(cfg) if cfg.join is not None else None
    join_src = resolve_source(join_cfg) if join_cfg is not None else None
    if join_src is not None:
        sha = digest({"source": sha, "join": content_digest(join_src)})
    version = import_version(cfg, name, sha)
    qname = quarantine_name(name)
    if store.exists(cfg.kind, name, version) and store.exists("quarantine", qname, version):
        log.info("import %s: reusing stored version %s", name, version)
        return _finish(store, store.get(cfg.kind, name, version), store.get("quarantine", qname, version),
                       "reused", t0)

    common = dict(producer=PRODUCER, stage=STAGE, config_fingerprint=digest(_version_inputs(cfg))[:VERSION_LEN],
                  code_version=code_version("compass.ingest"), inputs=[])
    table_w = store.begin(cfg.kind, name, version, **common)
    quar_w = store.begin("quarantine", qname, version, **common)
    try:
        counts, examples = _fill(cfg, src, table_w, quar_w, batch_size, _join_index(cfg.join, join_cfg, join_src))
        extra = {"source": src.describe(sha, cfg.split), **counts,
                 "table_uri": table_w.uri, "quarantine_uri": quar_w.uri}
        table_w.extra.update(extra)
        quar_w.extra.update(extra)
        if counts["rows_read"] == 0:
            raise NothingImported(f"{src.describe(sha, cfg.split).get('uri')}: the source has no rows", None)
        quarantine = quar_w.commit()
        if counts["rows_imported"] == 0:
            # An empty table would replace a good LATEST (eval_suites reads it): commit only the evidence.
            store.set_latest(quarantine.kind, quarantine.name, quarantine.version)
            raise NothingImported(_nothing_imported(counts, examples), quarantine.uri)
        table = table_w.commit()
    except BaseException:
        for w in (table_w, quar_w):
            w.abort()  # a no-op for one already committed: it is complete on its own
            _remove_empty_folders(store, w)
        raise
    log.info("import %s: committed version %s", name, version)
    return _finish(store, table, quarantine, "imported", t0)


def _nothing_imported(counts: dict, examples: dict[str, str]) -> str:
    top = sorted(counts["quarantined"].items(), key=lambda kv: (-kv[1], kv[0]))
    reasons = ", ".join(f"{r} {n:,}" + (f" (e.g. {examples[r]})" if examples.get(r) else "") for r, n in top[:3])
    return f"all {counts['rows_read']:,} rows were quarantined, none imported: {reasons}"


def _remove_empty_folders(store: ArtifactStore, w: ArtifactWriter) -> None:
    """After an abort, the version and name folders the writer made, if nothing else is in them
    (a local store; object stores have no folders)."""
    if not store.is_local:
        return
    for parts in ((w.kind, w.name, w.version), (w.kind, w.name), (w.kind,)):
        try:
            os.rmdir(store._p(*parts))     # only an empty folder goes; a busy one raises and stays
        except OSError:
            return


def _finish(store: ArtifactStore, table: Artifact, quarantine: Artifact, status: str, t0: float) -> ImportResult:
    for art in (quarantine, table):
        store.set_latest(art.kind, art.name, art.version)
    x = table.manifest.extra
    return ImportResult(name=table.name, kind=table.kind, version=table.version, status=status,
                        table_uri=table.uri, quarantine_uri=quarantine.uri, rows_read=x["rows_read"],
                        rows_imported=x["rows_imported"], rows_quarantined=x["rows_quarantined"],
                        reasons=dict(x["quarantined"]), source=dict(x["source"]),
                        wall_s=time.perf_counter() - t0)


def _join_config(cfg: ImportConfig) -> ImportConfig:
    """The config that reads the join file: its source and format, nothing else of the main source's."""
    return cfg.model_copy(update={"source": cfg.join.source, "format": cfg.join.format, "split": None,
                                  "data_files": None, "records": None, "limit": None, "join": None})


def _join_index(join, join_cfg: ImportConfig | None, join_src: Source | None) -> dict | None:
    """key value -> record of the join file. A record that cannot be read, lacks the key or repeats one
    is an error naming the file and record: a join must not guess."""
    if join_src is None:
        return None
    index: dict = {}
    key = join.key
    for batch in read_batches(join_src, join_cfg):
        for raw in batch:
            where = f"join file {raw.source}, record {raw.index}"
            if raw.rejection is not None:
                raise IngestError(f"{where}: {raw.rejection[2]}")
            if key not in raw.row:
                raise IngestError(f"{where}: no field {key!r} to join on")
            k = json.dumps(raw.row[key], sort_keys=True)
            if k in index:
                raise IngestError(f"{where}: {key} {raw.row[key]!r} appears twice")
            index[k] = raw.row
    return index


def _joined(cfg: ImportConfig, raw: RawRow, index: dict) -> RawRow | Rejection:
    """The row with its join record under ``into``, or the reason it has none."""
    key = cfg.join.key
    if key not in raw.row:
        return (key, "missing_field", f"source field '{key}' to join on is missing")
    other = index.get(json.dumps(raw.row[key], sort_keys=True))
    if other is None:
        return (key, "no_join_match", f"no record with {key} {raw.row[key]!r} in {cfg.join.source}")
    return dataclasses.replace(raw, row={**raw.row, cfg.join.into: other})


def _fill(cfg: ImportConfig, src: Source, table_w: ArtifactWriter, quar_w: ArtifactWriter,
          batch_size: int, join_index: dict | None = None) -> dict:
    """Stream the source through the mapper into the two writers; return the balanced counts."""
    mapper = RowMapper(cfg)
    reasons: Counter[str] = Counter()
    examples: dict[str, str] = {}       # reason -> the first row's detail, for a one-line error
    first_row_of_id: dict[str, int] = {}
    read = imported = 0
    with table_w.table_writer() as write_table, quar_w.table_writer() as write_quarantine:
        for batch in read_batches(src, cfg, batch_size):
            good, bad = [], []
            for raw in batch:
                read += 1
                out = raw.rejection
                if out is None and join_index is not None:
                    joined = _joined(cfg, raw, join_index)
                    out, raw = (joined, raw) if isinstance(joined, tuple) else (None, joined)
                out = out or mapper.map(raw.index, raw.row)
                if isinstance(out, dict):
                    first = first_row_of_id.setdefault(out["id"], raw.index)
                    if first == raw.index:
                        good.append(out)
                        continue
                    out = ("id", "duplicate_id", f"id {out['id']!r} already used by row {first}")
                reasons[out[1]] += 1
                examples.setdefault(out[1], out[2])
                bad.append(quarantine_row(cfg, raw, out))
            imported += len(good)
            if good:
                write_table(pa.Table.from_pylist(good, schema=mapper.out_schema))
            if bad:
                write_quarantine(pa.Table.from_pylist(bad, schema=QUARANTINE_SCHEMA))
    counts = {"rows_read": read, "rows_imported": imported, "rows_quarantined": sum(reasons.values()),
              "quarantined": dict(sorted(reasons.items()))}
    # Nothing is lost silently: every row read is in exactly one of the two tables.
    if read != imported + counts["rows_quarantined"] or table_w.rows != imported or \
            quar_w.rows != counts["rows_quarantined"]:
        raise IngestError(f"import {table_w.uri}: counts do not balance (read {read}, table {table_w.rows}, "
                          f"quarantine {quar_w.rows}, by reason {counts['quarantined']}); nothing committed")
    return counts, examples


def _cut(obj, limit: int):
    """``obj`` with every string longer than ``limit`` cut (the quarantine keeps evidence, not megabytes)."""
    if isinstance(obj, str) and len(obj) > limit:
        return obj[:limit] + f"…[cut {len(obj) - limit} chars]"
    if isinstance(obj, dict):
        return {k: _cut(v, limit) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_cut(v, limit) for v in obj]
    return obj


def quarantine_row(cfg: ImportConfig, raw: RawRow, why: Rejection) -> dict:
    field_, reason, detail = why
    if raw.row is not None:
        text = json.dumps(_cut(raw.row, cfg.max_field_chars), ensure_ascii=False, default=str)
    else:
        text = _cut(raw.raw or "", cfg.max_field_chars)
    # A lone surrogate (from a '\ud800' escape) cannot be written as UTF-8: show it escaped.
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    detail = detail.encode("utf-8", "backslashreplace").decode("utf-8")
    return {"source": raw.source, "row_index": raw.index, "field": field_, "reason": reason,
            "row_json": text, "slot": QUARANTINE_SLOT, "detail": detail}
