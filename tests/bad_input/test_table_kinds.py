"""Malformed rows of every table kind are contained.

Outside rows reach a table in two ways. The three kinds a user can import (``prompts``, ``sft_samples``,
``preference_pairs``: ``compass import``) are checked row by row: a bad row goes to the quarantine table
with its reason and field, the good ones are imported, and rows read = imported + quarantined. Every
other kind is only ever produced by a stage; a foreign table handed to a stage (``--from-artifact``) is
checked whole against its contract when it is read, and a stage cannot write one that breaks it: the
error names the artifact and the column and nothing is committed.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from artifacts_schema import TABLE_SCHEMAS, SchemaError
from compass.ingest.config import ImportConfig
from compass.ingest.importer import NothingImported, import_table
from compass.store.store import ArtifactStore

MATH = {"type": "math_exact"}
CONFIGS = {
    "prompts": {"columns": {"id": "id", "prompt": "q", "reference": "a", "verifier": "v",
                            "difficulty": {"from": "lvl", "cast": "int"}},
                "defaults": {"domain": "math", "task": "t", "language": "en"}},
    "sft_samples": {"columns": {"id": "id", "prompt": "q", "response": "r"},
                    "defaults": {"domain": "d", "task": "t", "language": "en"}},
    "preference_pairs": {"columns": {"id": "id", "prompt": "q", "response_a": "ra", "response_b": "rb",
                                     "label": "l"}, "labels": {"1": "A", "2": "B", "0": "TIE"}},
}
GOOD = {
    "prompts": {"q": "1+1?", "a": "2", "v": json.dumps(MATH), "lvl": 2},
    "sft_samples": {"q": "1+1?", "r": "<think>1+1</think>2"},
    "preference_pairs": {"q": "which?", "ra": "this", "rb": "that", "l": 1},
}
# kind -> (field to spoil, value, expected reason, expected target column); None value = remove the field
BAD_ROWS = {
    "prompts": [("q", 42, "wrong_type", "prompt"), ("a", None, "missing_field", "reference"),
                ("q", None, "missing_field", "prompt"), ("q", "  \t", "empty_field", "prompt"),
                ("q", "x" * 2000, "too_long", "prompt"), ("q", "lone \ud800", "invalid_utf8", "prompt"),
                ("v", "not a spec", "bad_verifier", "verifier"), ("lvl", "hard", "wrong_type", "difficulty"),
                ("lvl", 2 ** 40, "wrong_type", "difficulty"), ("id", ["a"], "wrong_type", "id")],
    "sft_samples": [("r", [1, 2], "wrong_type", "response"), ("r", None, "missing_field", "response"),
                    ("q", None, "missing_field", "prompt"), ("r", "", "empty_field", "response"),
                    ("q", {"nested": 1}, "wrong_type", "prompt"), ("r", "\ud800", "invalid_utf8", "response"),
                    ("r", "y" * 2000, "too_long", "response"), ("id", 7, "wrong_type", "id")],
    "preference_pairs": [("l", "maybe", "bad_label", "label"), ("l", None, "missing_field", "label"),
                         ("ra", 3.5, "wrong_type", "response_a"), ("rb", None, "missing_field", "response_b"),
                         ("q", "", "empty_field", "prompt"), ("rb", "z" * 2000, "too_long", "response_b"),
                         ("l", 5, "bad_label", "label"), ("id", True, "wrong_type", "id")],
}


def _config(kind: str, source: Path) -> ImportConfig:
    return ImportConfig.model_validate({**CONFIGS[kind], "kind": kind, "source": str(source), "name": f"bad_{kind}",
                                        "max_field_chars": 1000})


def _check(store: ArtifactStore, cfg: ImportConfig, expected: list[tuple[str, str | None] | None]):
    """Import and compare, row by row, with ``expected``: None (imported) or (reason, field)."""
    res = import_table(cfg, store)
    bad = {i: e for i, e in enumerate(expected) if e is not None}
    assert res.rows_read == len(expected) == res.rows_imported + res.rows_quarantined
    assert res.rows_quarantined == len(bad) and sum(res.reasons.values()) == len(bad)
    q = {r["row_index"]: r for r in store.open(res.quarantine_uri).read_table().to_pylist()}
    assert {i: (r["reason"], r["field"]) for i, r in q.items()} == bad
    assert all(r["detail"] and "\n" not in r["detail"] and r["source"].endswith(Path(cfg.source).name)
               for r in q.values())
    table = store.open(res.table_uri).read_table()
    assert table.num_rows == len(expected) - len(bad)
    return res, table


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_jsonl_rows_of_every_importable_kind(local_store, tmp_path, kind):
    rows, expected = [], []
    for i in range(3):
        rows.append(json.dumps({"id": f"g{i}", **GOOD[kind]}).encode())
        expected.append(None)
    for j, (field, value, reason, col) in enumerate(BAD_ROWS[kind]):
        row = {"id": f"b{j}", **GOOD[kind]}
        if value is None and reason == "missing_field" and j % 2:
            row.pop(field)                    # absent and null both count as missing
        else:
            row[field] = value
        rows.append(json.dumps(row).encode())
        expected.append((reason, col))
    rows += [b'{"id": "trunc", "q": ', b"\xff\xfe not utf-8", b"[1, 2]", json.dumps({"id": "g0", **GOOD[kind]}).encode()]
    expected += [("malformed_json", None), ("invalid_utf8", None), ("malformed_json", None), ("duplicate_id", "id")]
    src = tmp_path / f"{kind}.jsonl"
    src.write_bytes(b"\n".join(rows) + b"\n")
    _, table = _check(local_store, _config(kind, src), expected)
    assert table.column("id").to_pylist() == ["g0", "g1", "g2"]


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_csv_rows_of_every_importable_kind(local_store, tmp_path, kind):
    header = ["id", *GOOD[kind]]
    good = {k: json.dumps(v) if isinstance(v, dict) else str(v) for k, v in GOOD[kind].items()}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerow(["g0", *good.values()])
    w.writerow(["b0", *["" for _ in good]])                        # every value empty
    w.writerow(["b1", "too", "few"][: len(header) - 1])          # a field short
    w.writerow(["g1", *good.values()])
    data = buf.getvalue().encode() + b"b2," + b"\xff" + b"," * (len(header) - 2) + b"\n"
    src = tmp_path / f"{kind}.csv"
    src.write_bytes(data)
    # the first problem found: cast int of "" (mapped columns are filled first); a label is checked first
    first_empty = {"prompts": ("wrong_type", "difficulty"), "sft_samples": ("empty_field", "prompt"),
                   "preference_pairs": ("bad_label", "label")}[kind]
    _check(local_store, _config(kind, src), [None, first_empty, ("malformed_csv", None), None,
                                             ("invalid_utf8", None)])


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_parquet_rows_of_every_importable_kind(local_store, tmp_path, kind):
    field = {"prompts": "q", "sft_samples": "r", "preference_pairs": "ra"}[kind]
    col = {"q": "prompt", "r": "response", "ra": "response_a"}[field]
    recs = [{"id": f"r{i}", **{k: json.dumps(v) if isinstance(v, dict) else v for k, v in GOOD[kind].items()}}
            for i in range(4)]
    recs[1][field] = None
    src = tmp_path / f"{kind}.parquet"
    pq.write_table(pa.Table.from_pylist(recs), src)
    _check(local_store, _config(kind, src), [None, ("missing_field", col), None, None])
    # a column of the wrong type: every row is quarantined, nothing imported (and said so)
    for r in recs:
        r[field] = 123
    pq.write_table(pa.Table.from_pylist(recs), src)
    with pytest.raises(NothingImported, match="all 4 rows were quarantined.*wrong_type 4"):
        import_table(_config(kind, src), local_store)


# -- kinds only stages produce: checked whole, on write and on read ----------------------------------
_VALUES = {"string": "s", "integer": 1, "float": 0.5, "bool": True}


def _family(t: pa.DataType) -> str:
    return "string" if pa.types.is_string(t) else "integer" if pa.types.is_integer(t) else \
        "float" if pa.types.is_floating(t) else "bool"


def _good_table(kind: str, n: int = 3) -> pa.Table:
    schema = TABLE_SCHEMAS[kind]
    return pa.table({f.name: pa.array([_VALUES[_family(f.type)]] * n, f.type) for f in schema})


def _spoil(kind: str, fault: str) -> tuple[pa.Table, str]:
    table = _good_table(kind)
    schema = TABLE_SCHEMAS[kind]
    if fault == "missing_column":
        victim = schema.field(len(schema) - 1).name
        return table.drop_columns([victim]), f"missing column '{victim}'"
    victim = next(f for f in schema if not f.nullable)
    i = table.schema.get_field_index(victim.name)
    if fault == "null":
        col = pa.array([_VALUES[_family(victim.type)], None, _VALUES[_family(victim.type)]], victim.type)
        return table.set_column(i, victim.name, col), f"column '{victim.name}' has 1 null value"
    if _family(victim.type) == "string":                      # a number where the contract wants text
        return table.set_column(i, victim.name, pa.array([7] * 3, pa.int64())), \
            f"column '{victim.name}' has type int64"
    col = pa.array(["garbage"] * 3, pa.string())             # text where the contract wants a number or flag
    return table.set_column(i, victim.name, col), f"column '{victim.name}' has type string"


FAULTS = ["wrong_type", "null", "missing_column"]
STAGE_KINDS = sorted(set(TABLE_SCHEMAS) - set(CONFIGS))


def test_stage_kinds_cover_the_contract():
    assert set(STAGE_KINDS) | set(CONFIGS) == set(TABLE_SCHEMAS) and len(STAGE_KINDS) >= 6


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("kind", sorted(TABLE_SCHEMAS))
def test_stage_cannot_commit_a_table_that_breaks_its_kind(local_store, kind, fault):
    table, words = _spoil(kind, fault)
    w = local_store.begin(kind, "out", "v1", producer="s", stage="s", config_fingerprint="c", code_version="x")
    with pytest.raises(SchemaError) as e:
        w.write_table(table)
    w.abort()
    assert words in str(e.value) and w.uri in str(e.value) and "\n" not in str(e.value)
    assert local_store.list() == []


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("kind", sorted(TABLE_SCHEMAS))
def test_foreign_table_is_refused_when_a_stage_reads_it(local_store, kind, fault):
    table, words = _spoil(kind, fault)
    w = local_store.begin(kind, "foreign", "v1", producer="outside", stage="outside", config_fingerprint="-",
                          code_version="-")
    pq.write_table(table, w.path("data.parquet"))          # around the check, as another tool would
    w.rows = table.num_rows
    art = w.commit()
    foreign = local_store.open(art.uri)
    for read in (foreign.read_table, lambda: list(foreign.iter_batches())):
        with pytest.raises(SchemaError) as e:
            read()
        assert words in str(e.value) and art.uri in str(e.value) and "\n" not in str(e.value)
