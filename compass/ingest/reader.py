"""Stream the rows of a source in batches, whatever its format.

A row that cannot even be read (a JSONL line that is not UTF-8 or not a JSON
object, a CSV record with the wrong number of fields) comes out as a ``RawRow``
with its rejection and raw text, so the importer quarantines it and goes on.
Only a source that cannot be read at all (a missing file, a JSON document that
does not parse, a broken Parquet footer) raises ``SourceError``.
"""
from __future__ import annotations

import csv
import io
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from compass.ingest.config import ImportConfig
from compass.ingest.source import Source, SourceError

Rejection = tuple[str | None, str, str]   # field, reason, detail

_BOM = b"\xef\xbb\xbf"


@dataclass
class RawRow:
    index: int                       # position among the source's rows, from 0
    source: str                      # the file (or dataset) it came from
    row: dict | None                 # the record; None when it could not be read
    raw: str | None = None           # the unreadable text, for the quarantine
    rejection: Rejection | None = None


def read_batches(src: Source, cfg: ImportConfig, batch_size: int = 1024) -> Iterator[list[RawRow]]:
    """The source's rows, ``batch_size`` at a time, at most ``cfg.limit`` of them."""
    readers = {"jsonl": _jsonl, "json": _json, "csv": _csv, "parquet": _parquet, "datasets": _datasets}
    batch: list[RawRow] = []
    index = 0
    for source, row, raw, rejection in readers[src.format](src, cfg):
        if cfg.limit is not None and index >= cfg.limit:
            break
        batch.append(RawRow(index, source, row, raw, rejection))
        index += 1
        if len(batch) >= batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def _one_line(e: BaseException) -> str:
    """An exception's message on one line (pyarrow's span several)."""
    return " ".join(str(e).split()) or type(e).__name__


def _not_object(obj) -> str:
    return f"a JSON {type(obj).__name__.replace('NoneType', 'null')}, expected an object"


# -- JSON Lines: one line at a time, as bytes, so one bad line is one quarantined row ----------------
def _jsonl(src: Source, cfg: ImportConfig):
    for path in src.files:
        uri = src.file_uri(path)
        with src.fs.open(path, "rb", compression="infer") as f:
            for lineno, line in enumerate(f, 1):
                if lineno == 1 and line.startswith(_BOM):
                    line = line[len(_BOM):]
                line = line.rstrip(b"\r\n")
                if not line.strip():
                    continue  # a blank line is not a row
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError as e:
                    yield uri, None, line.decode("utf-8", "backslashreplace"), \
                        (None, "invalid_utf8", f"line {lineno}: invalid UTF-8 at byte {e.start}")
                    continue
                try:
                    obj = json.loads(text)
                except (ValueError, RecursionError) as e:
                    yield uri, None, text, (None, "malformed_json", f"line {lineno}: {e}")
                    continue
                if not isinstance(obj, dict):
                    yield uri, None, text, (None, "malformed_json", f"line {lineno}: {_not_object(obj)}")
                    continue
                yield uri, obj, None, None


# -- one JSON document: a list of records, or an object of records ---------------------------------
def _records(doc, path: str | None, where: str) -> list:
    """The records of a JSON document: the list at ``path`` (dotted; a final ``*`` takes an object's
    values), or the document itself when it is a list or an object whose values are alike records."""
    parts = path.split(".") if path else []
    if parts and parts[-1] == "*":
        parts, values = parts[:-1], True
    else:
        values = False
    for part in parts:
        if not isinstance(doc, dict) or part not in doc:
            raise SourceError(f"{where}: records path '{path}' not found (at '{part}')")
        doc = doc[part]
    if isinstance(doc, list) and not values:
        return doc
    if isinstance(doc, dict) and (values or _alike_records(doc)):
        return list(doc.values())  # {"0": {...}, "1": {...}}: the values are the records
    lists = [k for k, v in doc.items() if isinstance(v, list)] if isinstance(doc, dict) else []
    hint = f" (lists found under: {', '.join(_key(k) for k in lists[:5])})" if lists else ""
    raise SourceError(f"{where}: expected a list of records or an object of records; "
                      f"set records to the path of the list, or PATH.* for an object's values{hint}")


def _key(k: str) -> str:
    """A key as an error message shows it: JSON-quoted when it has spaces at its ends or control characters,
    so the message stays one line."""
    return k if k.isprintable() and k.strip() == k and k else json.dumps(k)


def _alike_records(doc: dict) -> bool:
    """An object whose values are all objects with the same keys (not a wrapper like {meta, data})."""
    vals = list(doc.values())
    return bool(vals) and all(isinstance(v, dict) for v in vals) and len({frozenset(v) for v in vals}) == 1


def _json(src: Source, cfg: ImportConfig):
    for path in src.files:
        uri = src.file_uri(path)
        with src.fs.open(path, "rb", compression="infer") as f:
            data = f.read()
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise SourceError(f"{uri}: invalid UTF-8 at byte {e.start}; a JSON document is read whole "
                              f"(only JSON Lines can quarantine single lines)") from None
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as e:
            hint = "; it looks like JSON Lines: set format: jsonl" if "Extra data" in str(e) else ""
            raise SourceError(f"{uri}: not valid JSON: {e}{hint}") from None
        for i, rec in enumerate(_records(doc, cfg.records, uri)):
            if isinstance(rec, dict):
                yield uri, rec, None, None
            else:
                yield uri, None, json.dumps(rec, ensure_ascii=False), \
                    (None, "malformed_json", f"record {i}: {_not_object(rec)}")


# -- CSV: every value is text ----------------------------------------------------------------------
def _undo_escape(text: str) -> str:
    """Text decoded with surrogateescape, shown with its undecodable bytes as \\xNN."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _has_escapes(text: str) -> bool:
    return not text.isascii() and any("\udc80" <= c <= "\udcff" for c in text)


def _csv(src: Source, cfg: ImportConfig):
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # the default (128 KiB) would make a long field fatal
    for path in src.files:
        uri = src.file_uri(path)
        delimiter = cfg.delimiter or ("\t" if ".tsv" in os.path.basename(path).lower() else ",")
        with src.fs.open(path, "rb", compression="infer") as fb:
            # surrogateescape: an undecodable byte is flagged on its own record, not fatal for the file
            f = io.TextIOWrapper(fb, encoding="utf-8-sig", errors="surrogateescape", newline="")
            reader = csv.reader(f, delimiter=delimiter)
            try:
                header = next(reader, None)
                if header is None:
                    continue
                if any(_has_escapes(h) for h in header) or len(set(header)) != len(header):
                    raise SourceError(f"{uri}: the header is not valid UTF-8 or repeats a column name")
                for rec in reader:
                    if not rec:
                        continue
                    where = f"line {reader.line_num}"
                    raw = delimiter.join(rec)
                    if _has_escapes(raw):
                        yield uri, None, _undo_escape(raw), (None, "invalid_utf8", f"{where}: invalid UTF-8")
                    elif len(rec) != len(header):
                        yield uri, None, raw, (None, "malformed_csv",
                                               f"{where}: {len(rec)} fields, the header has {len(header)}")
                    else:
                        yield uri, dict(zip(header, rec)), None, None
            except csv.Error as e:
                raise SourceError(f"{uri}: line {reader.line_num}: not valid CSV: {e}") from None


# -- Parquet and datasets: typed columns, read a record batch at a time -----------------------------
def _parquet(src: Source, cfg: ImportConfig):
    import pyarrow as pa
    import pyarrow.parquet as pq
    for path in src.files:
        uri = src.file_uri(path)
        with src.fs.open(path, "rb") as f:
            try:
                pf = pq.ParquetFile(f)
            except (pa.ArrowException, OSError, ValueError) as e:  # a damaged footer: UnicodeDecodeError too
                raise SourceError(f"{uri}: not a readable Parquet file: {_one_line(e)}") from None
            batches = pf.iter_batches(batch_size=1024)
            done = 0
            while True:
                # A damaged page shows only when its batch is decoded: the file is refused then, and the
                # importer discards what it had written (no row of a broken file is committed).
                try:
                    batch = next(batches, None)
                    rows = batch.to_pylist() if batch is not None else []
                except (pa.ArrowException, OSError, ValueError, OverflowError) as e:
                    raise SourceError(f"{uri}: not a readable Parquet file (after {done} rows): "
                                      f"{_one_line(e)}") from None
                if batch is None:
                    break
                for row in rows:
                    yield uri, row, None, None
                done += len(rows)


def _datasets(src: Source, cfg: ImportConfig):
    ds = load_dataset_source(src, cfg)
    where = f"{src.uri}[{ds.split}]" if ds.split is not None else src.uri
    for table in ds.with_format("arrow").iter(batch_size=1024):
        for row in table.to_pylist():
            yield where, row, None, None


def load_dataset_source(src: Source, cfg: ImportConfig):
    """The ``datasets.Dataset`` a datasets source names (offline: local folders and files only)."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # no network here: never try the Hub
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets
    try:
        if src.loader is None:
            obj = datasets.load_from_disk(src.uri.removeprefix("file://"))
        else:
            cache = Path(os.environ.get("COMPASS_CACHE", Path.home() / ".cache" / "compass-rl")) / "datasets"
            obj = datasets.load_dataset(src.loader, data_files=src.files, cache_dir=str(cache))
    except (ValueError, OSError) as e:  # FileNotFoundError and datasets' own not-found errors are OSErrors
        raise SourceError(f"{src.uri}: datasets cannot load it: {str(e).splitlines()[0] if str(e) else e!r}") \
            from None
    if isinstance(obj, datasets.DatasetDict):
        splits = sorted(obj)
        split = cfg.split or (splits[0] if len(splits) == 1 else None)
        if split not in obj:
            raise SourceError(f"{src.uri}: split {cfg.split!r} not found; set split to one of {splits}"
                              if cfg.split else f"{src.uri}: several splits; set split to one of {splits}")
        return obj[split]
    if cfg.split and obj.split is not None and str(obj.split) != cfg.split:
        raise SourceError(f"{src.uri}: holds split '{obj.split}', not '{cfg.split}'")
    return obj
