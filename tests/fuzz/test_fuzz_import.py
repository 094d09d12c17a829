"""Whole imports over fuzzed rows: either both artifacts are committed with balanced counts, or the
import raises one of the project's own errors and nothing is left in the store (no manifest, no payload)."""
from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, strategies as st

from compass.ingest.config import ImportConfig
from compass.ingest.importer import IngestError, NothingImported, import_table
from compass.ingest.source import SourceError
from compass.store.layout import ArtifactError
from compass.store.store import ArtifactStore
from tests.fuzz.test_fuzz_reader import json_values

OUR_ERRORS = (SourceError, IngestError, ArtifactError)
KNOWN_REASONS = {"invalid_utf8", "malformed_json", "malformed_csv", "missing_field", "wrong_type", "empty_field",
                 "too_long", "bad_verifier", "bad_label", "no_join_match", "no_match", "no_majority",
                 "unmapped_value", "duplicate_id"}

# One config per importable kind, using most of the mapping language.
CONFIGS = {
    "prompts": {"kind": "prompts", "columns": {
        "id": {"from": "id", "cast": "str"}, "prompt": "q", "reference": {"from": "a", "regex": r"####\s*(.+)$"},
        "verifier": {"from": "v", "cast": "json"}, "difficulty": {"from": "lvl", "cast": "int"}},
        "defaults": {"domain": "math", "task": "t", "language": "en"}, "max_field_chars": 50},
    "sft_samples": {"kind": "sft_samples", "id_template": "s-{index}", "columns": {
        "prompt": {"from": ["q", "a"], "join": "\n", "skip_empty": True}, "response": "r",
        "task": {"from": "t", "map": {"1": "one", "2": "two"}}},
        "defaults": {"domain": "d", "language": "en"}},
    "preference_pairs": {"kind": "preference_pairs", "columns": {
        "id": "id", "prompt": {"template": "{q} / {a}"}, "response_a": "ra", "response_b": "rb",
        "label": {"from": ["l1", "l2", "l3"], "majority": True}}, "labels": {"1": "A", "2": "B", "0": "TIE"}},
}
FIELDS = ["id", "q", "a", "v", "lvl", "r", "t", "ra", "rb", "l1", "l2", "l3"]
field_values = st.sampled_from(["", " ", "x", "#### 7", "1", "2", "0", "A", "TIE", "\ud800", "y" * 60]) \
    | st.integers(-3, 3) | st.none() | json_values
rows = st.lists(st.dictionaries(st.sampled_from(FIELDS), field_values, max_size=len(FIELDS)), max_size=10)


def _files(root: Path) -> list[str]:
    """Every file under the store root. (An aborted writer leaves its empty kind/name/version folders:
    readers and gc see no version there; what must not remain is a manifest or a payload file.)"""
    return sorted(os.path.relpath(os.path.join(dp, f), root) for dp, _, fs in os.walk(root) for f in fs)


def _run_import(kind: str, source_bytes: bytes, suffix: str):
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / f"src{suffix}"
        src.write_bytes(source_bytes)
        store = ArtifactStore(str(Path(d) / "store"), cache_dir=Path(d) / "cache")
        cfg = ImportConfig.model_validate({**CONFIGS[kind], "source": str(src), "name": "fz"})
        try:
            res = import_table(cfg, store, batch_size=3)
        except NothingImported as e:
            # every row quarantined: only the quarantine is committed, holding them all
            assert str(e) and "\n" not in str(e), repr(e)
            arts = store.list()
            if e.quarantine_uri is None:
                assert arts == [] and _files(Path(store.root_path)) == []
                return None
            assert [(m.kind, m.name) for m in arts] == [("quarantine", "fz_quarantine")]
            q = store.open(e.quarantine_uri)
            assert q.manifest.extra["rows_read"] == q.manifest.extra["rows_quarantined"] == q.manifest.rows \
                == q.read_table().num_rows == sum(q.manifest.extra["quarantined"].values()) > 0
            return None
        except OUR_ERRORS as e:
            assert str(e) and "\n" not in str(e), repr(e)
            assert store.list() == []
            assert _files(Path(store.root_path)) == [], "a failed import left files behind"
            return None
        assert res.rows_read == res.rows_imported + res.rows_quarantined
        assert sum(res.reasons.values()) == res.rows_quarantined and set(res.reasons) <= KNOWN_REASONS
        table = store.open(res.table_uri)
        quarantine = store.open(res.quarantine_uri)
        assert table.read_table().num_rows == table.manifest.rows == res.rows_imported
        qrows = quarantine.read_table().to_pylist()
        assert len(qrows) == res.rows_quarantined
        assert len({r["row_index"] for r in qrows}) == len(qrows) and all(
            0 <= r["row_index"] < res.rows_read for r in qrows)      # each quarantined row once
        assert all(r["reason"] in KNOWN_REASONS and r["detail"] and "\n" not in r["detail"] for r in qrows)
        # every committed version holds exactly its manifest and the one payload it names
        for art in (table, quarantine):
            vdir = Path(store.root_path) / art.kind / art.name / art.version
            assert sorted(p.name for p in vdir.iterdir()) == sorted(["manifest.json", art.manifest.payload_dir])
        return res


@given(kind=st.sampled_from(sorted(CONFIGS)), recs=rows, junk=st.lists(st.binary(max_size=12), max_size=3))
def test_import_of_fuzzed_jsonl(kind, recs, junk):
    lines = [json.dumps(r).encode() for r in recs] + [j.replace(b"\n", b" ") for j in junk]
    res = _run_import(kind, b"\n".join(lines), ".jsonl")
    if res is not None:                               # None: every row quarantined (checked above)
        assert res.rows_read == len([ln for ln in lines if ln.strip()])


@given(kind=st.sampled_from(sorted(CONFIGS)), recs=rows.filter(bool), data=st.data())
def test_import_of_damaged_parquet_commits_all_or_nothing(kind, recs, data):
    def text(v):  # Parquet holds valid UTF-8 only: a lone surrogate cannot get into one
        if v is None:
            return None
        s = json.dumps(v) if isinstance(v, (dict, list)) else str(v)
        return s.encode("utf-8", "replace").decode()
    table = pa.Table.from_pylist([{f: text(r.get(f)) for f in FIELDS} for r in recs])
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=2)
    raw = bytearray(buf.getvalue())
    for _ in range(data.draw(st.integers(0, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    res = _run_import(kind, bytes(raw), ".parquet")
    if res is not None:
        assert res.rows_read <= len(recs)
