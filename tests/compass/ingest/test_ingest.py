"""Import of external sets: malformed rows are quarantined with their reason, good rows imported,
counts balance, re-imports reuse, failures leave nothing behind."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from compass.store.store import ArtifactStore
from compass.ingest.config import ImportConfig
from compass.ingest.importer import import_table
from compass.ingest.mapping import RowMapper

MATH = {"type": "math_exact"}


def prompts_config(source: Path | str, **over) -> ImportConfig:
    data = {"source": str(source), "kind": "prompts", "name": "t",
            "columns": {"id": "id", "prompt": "q", "reference": {"from": "a", "regex": r"####\s*(.+)$"},
                        "verifier": {"from": "v", "cast": "json"}},
            "defaults": {"domain": "math", "task": "t", "language": "en"}, "max_field_chars": 1000}
    data.update(over)
    return ImportConfig.model_validate(data)


def line(**row) -> bytes:
    return json.dumps(row).encode()


GOOD = [line(id="g0", q="1+1?", a="so #### 2", v=MATH),
        line(id="g1", q="café ☕ 2+2?", a="#### 4", v=MATH),
        line(id="g2", q="3+3?", a="#### 6", v=MATH, extra="kept out: not mapped")]

# (raw line, expected reason, expected field): one of each way a row can be wrong.
BAD = [
    (b'{"id": "b0", "q": "caf\xe9", "a": "#### 1", "v": {"type": "math_exact"}}', "invalid_utf8", None),
    (b'{"id": "b1", "q": "x", "a": ', "malformed_json", None),
    (b'[1, 2, 3]', "malformed_json", None),
    (line(id="b3", q=42, a="#### 1", v=MATH), "wrong_type", "prompt"),
    (line(id="b4", q=["a", "list"], a="#### 1", v=MATH), "wrong_type", "prompt"),
    (line(id="b5", q="no answer", v=MATH), "missing_field", "reference"),
    (line(id="b6", q="", a="#### 1", v=MATH), "empty_field", "prompt"),
    (line(id="b7", q=" \n\t", a="#### 1", v=MATH), "empty_field", "prompt"),
    (line(id="b8", q="x" * 10_000_000, a="#### 1", v=MATH), "too_long", "prompt"),
    (line(id="b9", q=None, a="#### 1", v=MATH), "missing_field", "prompt"),
    (line(id="b10", q="x", a="#### 1", v="not json"), "bad_verifier", "verifier"),
    (line(id="b11", q="x", a="#### 1", v={"kind": "math_exact"}), "bad_verifier", "verifier"),
    (line(id="b12", q="x", a="no hashes here", v=MATH), "no_match", "reference"),
    (b'{"id": "b13", "q": "lone \\ud800 surrogate", "a": "#### 1", "v": {"type": "math_exact"}}',
     "invalid_utf8", "prompt"),
    (line(id="g0", q="again", a="#### 1", v=MATH), "duplicate_id", "id"),
    (line(id=7, q="x", a="#### 1", v=MATH), "wrong_type", "id"),
]


@pytest.fixture
def messy_jsonl(tmp_path: Path) -> Path:
    """Good rows first, then every bad kind, with a BOM, a CRLF and a blank line (not rows)."""
    lines = [b"\xef\xbb\xbf" + GOOD[0], GOOD[1] + b"\r", b"", *[raw for raw, _, _ in BAD], b"   ", GOOD[2]]
    path = tmp_path / "messy.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def read(store: ArtifactStore, uri: str) -> list[dict]:
    return store.open(uri).read_table().to_pylist()


def test_every_bad_row_quarantined_with_its_reason(local_store, messy_jsonl):
    res = import_table(prompts_config(messy_jsonl), local_store)
    assert res.status == "imported"
    assert res.rows_read == len(GOOD) + len(BAD)
    assert res.rows_imported == len(GOOD) and res.rows_quarantined == len(BAD)
    assert res.rows_read == res.rows_imported + res.rows_quarantined
    assert sum(res.reasons.values()) == res.rows_quarantined

    rows = read(local_store, res.table_uri)
    assert [r["id"] for r in rows] == ["g0", "g1", "g2"]
    assert rows[1]["prompt"] == "café ☕ 2+2?" and rows[1]["reference"] == "4"
    assert json.loads(rows[0]["verifier"]) == MATH and rows[0]["difficulty"] is None
    assert "extra" not in rows[0]  # only mapped columns are written

    q = read(local_store, res.quarantine_uri)
    assert [(r["row_index"], r["reason"], r["field"]) for r in q] == \
        [(2 + i, reason, field) for i, (_, reason, field) in enumerate(BAD)]  # after two good rows
    by_reason = {r["reason"]: r for r in q}
    assert all(r["source"] == f"file://{messy_jsonl}" and r["slot"] == "import" for r in q)
    # the undecodable line is kept, its bad byte shown escaped
    assert "caf\\xe9" in q[0]["row_json"] and "line 4" in q[0]["detail"]
    assert q[1]["row_json"] == '{"id": "b1", "q": "x", "a": '
    assert "expected an object" in q[2]["detail"]
    assert "expected a string, got integer" in q[3]["detail"]
    assert q[5]["detail"] == "source field 'a' is missing" and q[9]["detail"] == "source field 'q' is null"
    # the 10 MB field is cut in the quarantine, which keeps evidence, not megabytes
    too_long = by_reason["too_long"]
    assert "10000000 characters" in too_long["detail"] and len(too_long["row_json"]) < 2000
    # a lone surrogate is stored as its JSON escape: valid UTF-8 that loads back to the same value
    assert '"lone \\ud800 surrogate"' in q[-3]["row_json"]
    assert json.loads(q[-3]["row_json"])["q"] == "lone \ud800 surrogate"
    assert "row 0" in by_reason["duplicate_id"]["detail"]

    m = local_store.open(res.table_uri).manifest
    assert m.extra["rows_read"] == res.rows_read and m.extra["quarantined"] == res.reasons
    assert m.extra["source"]["sha256"] and m.extra["source"]["format"] == "jsonl"
    assert m.extra["quarantine_uri"] == res.quarantine_uri and m.producer == "import"
    assert local_store.latest_version("prompts", "t") == res.version
    assert local_store.latest_version("quarantine", "t_quarantine") == res.version


def test_reimport_reuses_the_version_and_changes_make_new_ones(local_store, messy_jsonl):
    cfg = prompts_config(messy_jsonl)
    first = import_table(cfg, local_store)
    again = import_table(cfg, local_store)
    assert again.status == "reused" and again.version == first.version
    assert again.table_uri == first.table_uri and again.reasons == first.reasons
    assert len(local_store.list()) == 2

    changed_cfg = import_table(prompts_config(messy_jsonl, max_field_chars=5000), local_store)
    assert changed_cfg.status == "imported" and changed_cfg.version != first.version
    messy_jsonl.write_bytes(messy_jsonl.read_bytes() + line(id="g9", q="9?", a="#### 9", v=MATH) + b"\n")
    changed_data = import_table(cfg, local_store)
    assert changed_data.version not in (first.version, changed_cfg.version)
    assert changed_data.rows_imported == first.rows_imported + 1
    other_name = import_table(cfg, local_store, "t2")
    assert other_name.version != changed_data.version and "/prompts/t2/" in other_name.table_uri


def test_a_failure_leaves_no_half_written_artifact(local_store, messy_jsonl, monkeypatch):
    calls = []
    real = RowMapper.map

    def flaky(self, index, row):
        calls.append(index)
        if len(calls) == 3:
            raise RuntimeError("disk on fire")
        return real(self, index, row)

    monkeypatch.setattr(RowMapper, "map", flaky)
    with pytest.raises(RuntimeError, match="disk on fire"):
        import_table(prompts_config(messy_jsonl), local_store, batch_size=2)
    assert local_store.list() == []
    root = Path(local_store.root_path)
    assert not [p for p in root.rglob("*") if p.is_file()]  # no payload left for gc to find


def test_limit_counts_rows_read(local_store, messy_jsonl):
    res = import_table(prompts_config(messy_jsonl, limit=5), local_store)
    assert res.rows_read == 5 and res.rows_imported == 2 and res.rows_quarantined == 3


def test_preference_labels_and_majority(local_store, tmp_path):
    rows = [{"p": "q0", "r1": "x", "r2": "y", "votes": [1, 1, 2]},
            {"p": "q1", "r1": "x", "r2": "", "votes": [0, 0, 0]},          # an empty response, allowed
            {"p": "q2", "r1": "x", "r2": "y", "votes": [2, "2", 1]},       # "2" and 2 are different votes
            {"p": "q3", "r1": "x", "r2": "y", "votes": [3, 3, 1]},         # 3 is no label
            {"p": "q4", "r1": "x", "r2": "y", "votes": [1, 2, 0]}]         # no majority
    path = tmp_path / "prefs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    cfg = ImportConfig.model_validate({
        "source": str(path), "kind": "preference_pairs", "id_template": "p-{index}",
        "columns": {"prompt": "p", "response_a": "r1", "response_b": "r2",
                    "label": {"from": "votes", "majority": True}},
        "labels": {1: "A", 2: "B", 0: "TIE"}, "allow_empty": ["response_b"]})
    res = import_table(cfg, local_store, "prefs")
    got = read(local_store, res.table_uri)
    assert [(r["id"], r["label"]) for r in got] == [("p-0", "A"), ("p-1", "TIE")]
    q = read(local_store, res.quarantine_uri)
    assert [(r["row_index"], r["reason"]) for r in q] == [(2, "no_majority"), (3, "bad_label"), (4, "no_majority")]
    assert "label 3 is not A, B or TIE" in q[1]["detail"]


def test_transforms_join_map_template_object_and_nested_paths(local_store, tmp_path):
    rows = [{"meta": {"qid": 7, "tags": ["x", "y"]}, "question": "Pick one", "choices": ["red", "", "blue"],
             "answer": 2, "level": "3", "tests": ["assert f()"]},
            {"meta": {"qid": 8, "tags": []}, "question": "Pick", "choices": ["a", "b"], "answer": 5,
             "level": "3", "tests": []},
            {"meta": {"qid": 9, "tags": ["z"]}, "question": "Pick", "choices": ["a", {"no": 1}], "answer": 0,
             "level": "hard", "tests": []}]
    path = tmp_path / "mc.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    cfg = ImportConfig.model_validate({
        "source": str(path), "kind": "prompts",
        "columns": {"id": {"template": "mc-{meta.qid:03d}"},
                    "_opts": {"from": "choices", "join": "\n", "item": "{letter}) {item}", "skip_empty": True},
                    "prompt": {"template": "{question}\n{_opts}"},
                    "reference": {"from": "answer", "map": {0: "A", 1: "B", 2: "C"}},
                    "difficulty": {"from": "level", "cast": "int"},
                    "verifier": {"object": {"type": {"const": "code"}, "tests": "tests"}},
                    "first_tag": "meta.tags.0"},
        "defaults": {"domain": "qa", "task": "mc", "language": "en"}})
    res = import_table(cfg, local_store, "mc")
    (good,) = read(local_store, res.table_uri)
    assert good["id"] == "mc-007" and good["prompt"] == "Pick one\nA) red\nB) blue"
    assert good["reference"] == "C" and good["difficulty"] == 3 and good["first_tag"] == "x"
    assert json.loads(good["verifier"]) == {"type": "code", "tests": ["assert f()"]}
    q = read(local_store, res.quarantine_uri)
    assert [(r["field"], r["reason"]) for r in q] == [("reference", "unmapped_value"), ("_opts", "wrong_type")]


def test_from_reads_a_helper_column_and_a_source_field_named_with_underscore(local_store, tmp_path):
    rows = [{"_id": "a1", "q": "Add", "t": "assert add(1, 1) == 2", "fn": "add"}]
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps(rows[0]))
    cfg = ImportConfig.model_validate({
        "source": str(path), "kind": "prompts",
        "columns": {"id": "_id",                                   # a source field, not a helper
                    "prompt": "q", "reference": {"const": "-"},
                    "_check": {"template": "{t}\nassert callable({fn})"},
                    "verifier": {"object": {"type": {"const": "code"}, "tests": {"from": ["_check"]}}}},
        "defaults": {"domain": "code", "task": "h", "language": "en"}})
    (got,) = read(local_store, import_table(cfg, local_store, "h").table_uri)
    assert got["id"] == "a1"
    assert json.loads(got["verifier"])["tests"] == ["assert add(1, 1) == 2\nassert callable(add)"]
    with pytest.raises(ValueError, match="uses _check before it is defined"):
        ImportConfig.model_validate({**cfg.model_dump(by_alias=True, exclude_none=True),
                                     "columns": {"id": "_id", "prompt": "q", "reference": {"const": "-"},
                                                 "verifier": {"object": {"tests": {"from": ["_check"]}}},
                                                 "_check": {"const": "x"}}})


def test_join_by_key_counts_in_the_version_and_refuses_ambiguity(local_store, tmp_path):
    """A join file's records reach the row under ``into``; its bytes count in the version; a key that
    repeats in the join file, or a join record without the key, is an error naming the record."""
    from compass.ingest.importer import IngestError
    (tmp_path / "q.jsonl").write_text('{"id": 1, "q": "a"}\n{"id": 2, "q": "b"}\n{"q": "c"}\n')
    (tmp_path / "a.jsonl").write_text('{"id": 2, "gold": "B"}\n{"id": 1, "gold": "A"}\n')
    cfg = ImportConfig.model_validate({
        "source": str(tmp_path / "q.jsonl"), "kind": "prompts",
        "join": {"source": str(tmp_path / "a.jsonl"), "key": "id", "into": "ans"},
        "columns": {"id": {"from": "id", "cast": "str"}, "prompt": "q", "reference": "ans.gold"},
        "defaults": {"domain": "qa", "task": "j", "language": "en", "verifier": {"type": "mcq"}}})
    res = import_table(cfg, local_store, "j")
    assert [(r["id"], r["reference"]) for r in read(local_store, res.table_uri)] == [("1", "A"), ("2", "B")]
    assert res.reasons == {"missing_field": 1}
    (tmp_path / "a.jsonl").write_text('{"id": 2, "gold": "B"}\n{"id": 1, "gold": "C"}\n')
    again = import_table(cfg, local_store, "j")
    assert again.version != res.version and again.status == "imported"
    (tmp_path / "a.jsonl").write_text('{"id": 1, "gold": "B"}\n{"id": 1, "gold": "C"}\n')
    with pytest.raises(IngestError, match=r"record 1: id 1 appears twice"):
        import_table(cfg, local_store, "j")
    (tmp_path / "a.jsonl").write_text('{"gold": "B"}\n')
    with pytest.raises(IngestError, match="record 0: no field 'id' to join on"):
        import_table(cfg, local_store, "j")


def test_parquet_source_with_nested_fields(local_store, tmp_path):
    import pyarrow as pa
    table = pa.table({"item": [{"text": "2+2?", "gold": "4"}, {"text": "3+3?", "gold": None}],
                      "lvl": pa.array([2, 5], pa.int64())})
    path = tmp_path / "set.parquet"
    pq.write_table(table, path)
    cfg = ImportConfig.model_validate({
        "source": f"file://{path}", "kind": "prompts", "id_template": "pq-{index}",
        "columns": {"prompt": "item.text", "reference": "item.gold", "difficulty": "lvl"},
        "defaults": {"domain": "math", "task": "pq", "language": "en", "verifier": MATH}})
    res = import_table(cfg, local_store, "pq")
    assert res.source["format"] == "parquet" and res.rows_read == 2
    (good,) = read(local_store, res.table_uri)
    assert good["prompt"] == "2+2?" and good["difficulty"] == 2 and json.loads(good["verifier"]) == MATH
    (bad,) = read(local_store, res.quarantine_uri)
    assert (bad["reason"], bad["field"]) == ("missing_field", "reference")


def test_csv_source(local_store, tmp_path):
    path = tmp_path / "set.csv"
    path.write_bytes(b'question,answer\n"1+1, twice?",2\nbad \xff byte,3\nthree,fields,here\n\n"multi\nline",4\n')
    cfg = ImportConfig.model_validate({
        "source": str(path), "kind": "prompts", "id_template": "csv-{index}",
        "columns": {"prompt": "question", "reference": "answer"},
        "defaults": {"domain": "math", "task": "csv", "language": "en", "verifier": MATH}})
    res = import_table(cfg, local_store, "csv")
    assert [r["prompt"] for r in read(local_store, res.table_uri)] == ["1+1, twice?", "multi\nline"]
    q = read(local_store, res.quarantine_uri)
    assert [r["reason"] for r in q] == ["invalid_utf8", "malformed_csv"]
    assert "\\xff" in q[0]["row_json"]


def test_json_document_of_records(local_store, tmp_path):
    path = tmp_path / "set.json"
    path.write_text(json.dumps({"meta": {"v": 1}, "data": {"rows": [{"q": "a?", "a": "1"}, "not a record"]}}))
    base = {"source": str(path), "kind": "prompts", "id_template": "j-{index}",
            "columns": {"prompt": "q", "reference": "a"},
            "defaults": {"domain": "math", "task": "j", "language": "en", "verifier": MATH}}
    from compass.ingest.source import SourceError
    with pytest.raises(SourceError, match="set records to the path of the list"):
        import_table(ImportConfig.model_validate(base), local_store, "j")
    res = import_table(ImportConfig.model_validate({**base, "records": "data.rows"}), local_store, "j")
    assert (res.rows_imported, res.reasons) == (1, {"malformed_json": 1})


def test_datasets_save_to_disk_and_loader(local_store, tmp_path, monkeypatch):
    monkeypatch.setenv("COMPASS_CACHE", str(tmp_path / "cache"))
    import datasets
    rows = {"question": ["1+1?", "2+2?", ""], "answer": ["#### 2", "#### 4", "#### 0"]}
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows),
                               "test": datasets.Dataset.from_dict({k: v[:2] for k, v in rows.items()})})
    dd.save_to_disk(str(tmp_path / "ds"))
    base = {"source": str(tmp_path / "ds"), "kind": "prompts", "id_template": "ds-{index}",
            "columns": {"prompt": "question", "reference": {"from": "answer", "regex": r"####\s*(.+)$"}},
            "defaults": {"domain": "math", "task": "ds", "language": "en", "verifier": MATH}}
    from compass.ingest.source import SourceError
    with pytest.raises(SourceError, match=r"several splits; set split to one of \['test', 'train'\]"):
        import_table(ImportConfig.model_validate(base), local_store, "ds")
    res = import_table(ImportConfig.model_validate({**base, "split": "train"}), local_store, "ds")
    assert res.source["format"] == "datasets" and res.source["split"] == "train"
    assert (res.rows_imported, res.reasons) == (2, {"empty_field": 1})
    assert read(local_store, res.table_uri)[1]["reference"] == "4"
    assert import_table(ImportConfig.model_validate({**base, "split": "train"}), local_store, "ds").status == "reused"

    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps({"question": q, "answer": a})
                                                   for q, a in zip(rows["question"], rows["answer"])))
    loader = {**base, "source": "json", "format": "datasets", "data_files": [str(tmp_path / "data.jsonl")]}
    res = import_table(ImportConfig.model_validate(loader), local_store, "ds_json")
    assert (res.rows_imported, res.reasons) == (2, {"empty_field": 1}) and res.source["loader"] == "json"
