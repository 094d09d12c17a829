"""Locate an import source: its format, its files, and the hash of their content.

The content hash is part of the imported artifact's version, so re-importing
the same bytes reuses the stored artifact and any change to them makes a new
version. Remote files (``s3://``) are therefore read twice: once to hash, once
to import.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import fsspec
from fsspec.implementations.local import LocalFileSystem

from compass.ingest.config import ImportConfig

# Extension -> format, for format: auto (compression suffixes are looked through).
_EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet", ".pq": "parquet",
               ".csv": "csv", ".tsv": "csv"}
_COMPRESSION = (".gz", ".bz2", ".xz", ".zst")
# What datasets' save_to_disk leaves in a folder (a Dataset, or a DatasetDict).
_SAVED_DATASET_FILES = ("state.json", "dataset_dict.json")


class SourceError(ValueError):
    """The source as a whole cannot be read (missing, unknown format, not parseable): one line."""


@dataclass
class Source:
    format: str
    uri: str                                   # what the config names, made absolute
    files: list[str] = field(default_factory=list)   # fsspec paths of the data files, in read order
    fs: fsspec.AbstractFileSystem | None = None
    loader: str | None = None                  # datasets: a loader name (json, parquet, ...) or None

    def file_uri(self, path: str) -> str:
        """A data file as a URI for the quarantine's ``source`` column and the lineage."""
        if self.fs is None:
            return path
        return self.fs.unstrip_protocol(path)

    def describe(self, digest: str, split: str | None) -> dict:
        """What the manifest records about the source (its lineage)."""
        out = {"uri": self.uri, "format": self.format, "sha256": digest,
               "files": [self.file_uri(f) for f in self.files]}
        if self.loader:
            out["loader"] = self.loader
        if split:
            out["split"] = split
        return out


def _ext_format(path: str) -> str | None:
    p = path.lower()
    for comp in _COMPRESSION:
        if p.endswith(comp):
            p = p[: -len(comp)]
    return _EXTENSIONS.get(os.path.splitext(p)[1])


def _is_saved_dataset(path: str) -> bool:
    return os.path.isdir(path) and any(os.path.exists(os.path.join(path, f)) for f in _SAVED_DATASET_FILES)


def resolve_source(cfg: ImportConfig) -> Source:
    """The source's format and files; SourceError when there is nothing readable."""
    if cfg.format == "datasets" or (cfg.format == "auto" and "://" not in cfg.source
                                    and _is_saved_dataset(cfg.source)):
        return _datasets_source(cfg)
    if cfg.data_files:
        raise SourceError(f"{cfg.source}: data_files is only for format datasets")
    try:
        fs, path = fsspec.core.url_to_fs(cfg.source, **dict(cfg.storage_options))
    except (ValueError, ImportError) as e:
        raise SourceError(f"{cfg.source}: cannot open: {e}") from None
    if isinstance(fs, LocalFileSystem):
        path = os.path.abspath(path)  # no '..' in the URIs the lineage and quarantine record
    if fs.isdir(path):
        fmt = cfg.format if cfg.format != "auto" else None
        files = sorted(f for f in fs.find(path) if _ext_format(f) and (fmt is None or _ext_format(f) == fmt))
        if not files:
            raise SourceError(f"{cfg.source}: a folder with no data files"
                              f"{f' of format {fmt}' if fmt else ' (.jsonl, .json, .parquet, .csv)'}")
    elif any(c in path for c in "*?["):
        files = sorted(fs.glob(path))
        if not files:
            raise SourceError(f"{cfg.source}: no file matches")
    elif fs.exists(path):
        files = [path]
    else:
        raise SourceError(f"{cfg.source}: no such file")
    fmt = cfg.format
    if fmt == "auto":
        found = {_ext_format(f) for f in files}
        if len(found) != 1 or None in found:
            raise SourceError(f"{cfg.source}: cannot tell the format from the file name; set format "
                              f"(parquet, jsonl, json, csv, datasets)")
        fmt = found.pop()
    uri = fs.unstrip_protocol(path)
    return Source(format=fmt, uri=uri, files=files, fs=fs)


def _datasets_source(cfg: ImportConfig) -> Source:
    if "://" in cfg.source:
        # datasets' offline mode refuses remote loads: read s3:// sources as parquet or jsonl instead.
        raise SourceError(f"{cfg.source}: format datasets reads local folders and files only; "
                          f"use format parquet or jsonl for a remote source")
    fs = fsspec.filesystem("file")
    if _is_saved_dataset(cfg.source):
        root = os.path.abspath(cfg.source)
        files = sorted(str(p) for p in Path(root).rglob("*") if p.is_file())
        return Source(format="datasets", uri=fs.unstrip_protocol(root), files=files, fs=fs)
    if os.path.isdir(cfg.source) and not cfg.data_files:
        raise SourceError(f"{cfg.source}: not a folder written by datasets' save_to_disk "
                          f"(no {' or '.join(_SAVED_DATASET_FILES)}); for a loader, set data_files")
    if not cfg.data_files:
        raise SourceError(f"{cfg.source}: a datasets loader needs data_files (no network here)")
    files: list[str] = []
    for pattern in [cfg.data_files] if isinstance(cfg.data_files, str) else cfg.data_files:
        matched = sorted(fs.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
        missing = [m for m in matched if not os.path.isfile(m)]
        if not matched or missing:
            raise SourceError(f"data_files: no such file {(missing or [pattern])[0]}")
        files += [os.path.abspath(m) for m in matched]
    return Source(format="datasets", uri=cfg.source, files=files, fs=fs, loader=cfg.source)


def content_digest(src: Source, chunk: int = 1 << 20) -> str:
    """sha256 over the source's files in read order: each file's path within the source and its bytes."""
    h = hashlib.sha256()
    common = os.path.commonpath(src.files) if len(src.files) > 1 else None
    for path in src.files:
        h.update(f"{os.path.relpath(path, common) if common else ''}\0".encode())
        fh = hashlib.sha256()
        with src.fs.open(path, "rb") as f:
            while block := f.read(chunk):
                fh.update(block)
        h.update(fh.digest())
    return h.hexdigest()
