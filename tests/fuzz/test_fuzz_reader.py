"""The import readers over fuzzed bytes: every line or record comes out as a row or a quarantinable
rejection, or the whole source is refused with a SourceError. Nothing else escapes, nothing is lost."""
from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import example, given, strategies as st

from compass.ingest.config import ImportConfig
from compass.ingest.reader import read_batches
from compass.ingest.source import SourceError, resolve_source

READ_REASONS = {"invalid_utf8", "malformed_json", "malformed_csv"}

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(json_scalars, lambda kids: st.lists(kids, max_size=4)
                           | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=12)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=5)


def _read(data: bytes, suffix: str, fmt: str = "auto"):
    """All rows of ``data`` saved as a file with ``suffix``, or the SourceError the reader raised."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"src{suffix}"
        path.write_bytes(data)
        cfg = ImportConfig.model_validate({"source": str(path), "format": fmt, "kind": "prompts", "name": "f",
                                           "id_template": "f-{index}", "columns": {"prompt": "q"},
                                           "defaults": {"domain": "d", "task": "t", "language": "en",
                                                        "reference": "r", "verifier": {"type": "math_exact"}}})
        try:
            return [r for batch in read_batches(resolve_source(cfg), cfg, batch_size=7) for r in batch]
        except SourceError as e:
            assert str(e) and "\n" not in str(e), repr(e)   # one line
            return e


def _check_rows(rows) -> None:
    assert [r.index for r in rows] == list(range(len(rows)))
    for r in rows:
        if r.row is None:
            assert r.rejection is not None and r.rejection[1] in READ_REASONS and r.raw is not None
            assert "\n" not in r.rejection[2]
        else:
            assert isinstance(r.row, dict) and r.rejection is None


# -- JSON Lines ---------------------------------------------------------------------------------------
jsonl_lines = st.lists(
    json_objects.map(lambda o: json.dumps(o).encode())
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=30).filter(lambda b: b"\n" not in b)
    | st.sampled_from([b"", b"   ", b"\r", b"{", b'{"a": 1', b"\xff\xfe", b'"\\ud800"', b'{"a": "\\udc80"}',
                       b"[" * 3000 + b"]" * 3000, b"\xef\xbb\xbf{}"]),
    max_size=12)


@given(lines=jsonl_lines, bom=st.booleans(), crlf=st.booleans())
def test_jsonl_every_line_is_a_row_or_a_rejection(lines, bom, crlf):
    data = (b"\xef\xbb\xbf" if bom else b"") + (b"\r\n" if crlf else b"\n").join(lines)
    rows = _read(data, ".jsonl")
    assert not isinstance(rows, SourceError), rows     # JSON Lines never refuses a file for one bad line
    _check_rows(rows)
    parts = data.split(b"\n")
    if parts and parts[0].startswith(b"\xef\xbb\xbf"):
        parts[0] = parts[0][3:]
    expected = [p.rstrip(b"\r\n") for p in parts if p.rstrip(b"\r\n").strip()]
    assert len(rows) == len(expected)                  # no line lost, none invented
    for r, line in zip(rows, expected):
        if r.row is not None:
            assert r.row == json.loads(line.decode())


# -- one JSON document ---------------------------------------------------------------------------------
@given(doc=st.lists(json_values, max_size=8) | json_values | st.binary(max_size=40))
@example(doc={"\n": []})       # a list under a newline key: the error's hint once broke onto two lines
def test_json_document_rows_or_one_error(doc):
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    rows = _read(data, ".json")
    if isinstance(rows, SourceError):
        return
    _check_rows(rows)
    if isinstance(doc, list):
        assert len(rows) == len(doc)
        assert [r.row for r in rows if r.row is not None] == [x for x in doc if isinstance(x, dict)]


# -- CSV -----------------------------------------------------------------------------------------------
cells = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\ufeff"), max_size=12)


@given(header=st.lists(cells.filter(bool), min_size=1, max_size=5, unique=True), data=st.data())
def test_csv_written_by_a_csv_writer_reads_back(header, data):
    rows = data.draw(st.lists(st.lists(cells, min_size=len(header), max_size=len(header)), max_size=8))
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    got = _read(buf.getvalue().encode(), ".csv")
    assert not isinstance(got, SourceError), got
    _check_rows(got)
    assert [r.row for r in got] == [dict(zip(header, row)) for row in rows]


@given(data=st.binary(max_size=200) | st.lists(st.sampled_from(
    [b"a,b,c", b"1,2", b"1,2,3,4", b'"x,y",z,w', b'"open', b"\xff,\xfe,x", b"", b"a,a", b"\x00,1,2"]),
    max_size=8).map(b"\n".join))
def test_csv_garbage_rows_or_one_error(data):
    got = _read(data, ".csv")
    if not isinstance(got, SourceError):
        _check_rows(got)


# -- Parquet -------------------------------------------------------------------------------------------
columns = st.dictionaries(
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6),
    st.one_of(st.lists(st.none() | st.integers(-2**63, 2**63 - 1), min_size=3, max_size=3),
              st.lists(st.none() | st.text(max_size=10), min_size=3, max_size=3),
              st.lists(st.none() | st.floats(allow_nan=False), min_size=3, max_size=3),
              st.lists(st.none() | st.lists(st.integers(0, 9), max_size=3), min_size=3, max_size=3)),
    min_size=1, max_size=4)


def _parquet_bytes(cols: dict) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table(cols), buf)
    return buf.getvalue()


@given(cols=columns)
def test_parquet_rows_read_back(cols):
    got = _read(_parquet_bytes(cols), ".parquet")
    assert not isinstance(got, SourceError), got
    _check_rows(got)
    assert [r.row for r in got] == pa.table(cols).to_pylist()


@given(cols=columns, data=st.data())
def test_damaged_parquet_rows_or_one_error(cols, data):
    raw = bytearray(_parquet_bytes(cols))
    how = data.draw(st.sampled_from(["cut", "flip", "garbage"]))
    if how == "cut":
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
    elif how == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    else:
        raw = bytearray(data.draw(st.binary(max_size=300)))
    got = _read(bytes(raw), ".parquet")
    if not isinstance(got, SourceError):
        _check_rows(got)
