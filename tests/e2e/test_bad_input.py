"""Bad input gets one clear error line naming the culprit, from the user-facing commands."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from compass.store.store import ArtifactStore
from tests.e2e.conftest import compass, write_config


def _error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.strip().splitlines() if "error" in ln.lower()]


def test_misspelled_config_key(e2e_tmp: Path):
    cfg = write_config(e2e_tmp / "bad.yaml", str(e2e_tmp / "store"))
    cfg.write_text(cfg.read_text().replace("sft_longcot:\n", "sft_longcot:\n  stpes: 3\n", 1))
    proc = compass(["run", "--config", str(cfg)], e2e_tmp, check=False)
    assert proc.returncode == 2
    lines = _error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert "bad.yaml" in lines[0] and "sft_longcot.stpes" in lines[0] and "did you mean 'steps'" in lines[0]


def test_wrong_type_in_config(e2e_tmp: Path):
    cfg = write_config(e2e_tmp / "bad.yaml", str(e2e_tmp / "store"))
    data = yaml.safe_load(cfg.read_text())
    data["sft_longcot"]["lr"] = "fast"
    cfg.write_text(yaml.safe_dump(data))
    proc = compass(["run", "--config", str(cfg)], e2e_tmp, check=False)
    assert proc.returncode == 2
    lines = _error_lines(proc.stderr)
    assert len(lines) == 1 and "sft_longcot.lr" in lines[0], proc.stderr


def _hand_written_table(store: ArtifactStore, kind: str, name: str, table: pa.Table):
    """A committed artifact whose Parquet was written around the schema check (as a foreign tool might)."""
    w = store.begin(kind, name, "handmade", producer="outside", stage="outside", config_fingerprint="-",
                    code_version="-")
    pq.write_table(table, w.path("data.parquet"))
    w.rows = table.num_rows
    return w.commit()


def _good_prompts(n: int = 3) -> pa.Table:
    return pa.table({"id": [f"p{i}" for i in range(n)], "domain": ["math"] * n, "task": ["t"] * n,
                     "language": ["en"] * n, "prompt": ["1+1?"] * n, "reference": ["2"] * n,
                     "verifier": ['{"type": "math_exact"}'] * n, "difficulty": pa.array([None] * n, pa.int32()),
                     "pass_rate": pa.array([None] * n, pa.float64())})


def test_parquet_with_wrong_column_type(e2e_tmp: Path):
    store = ArtifactStore(str(e2e_tmp / "store"))
    bad = _good_prompts().set_column(5, "reference", pa.array([2, 2, 2], pa.int64()))
    art = _hand_written_table(store, "prompts", "raw_prompts", bad)
    proc = compass(["artifacts", "verify", art.uri, "--store", store.root], e2e_tmp, check=False)
    assert proc.returncode == 2
    lines = _error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert art.uri in lines[0] and "'reference'" in lines[0] and "int64" in lines[0]


def test_manifest_checksum_mismatch(e2e_tmp: Path):
    store = ArtifactStore(str(e2e_tmp / "store"))
    art = _hand_written_table(store, "prompts", "raw_prompts", _good_prompts())
    path = art.local_dir() / "data.parquet"
    pq.write_table(_good_prompts(4), path)  # a different, valid file behind the manifest's back
    proc = compass(["artifacts", "verify", art.uri, "--store", store.root], e2e_tmp, check=False)
    assert proc.returncode == 2
    lines = _error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert art.uri in lines[0] and "data.parquet" in lines[0] and "checksum" in lines[0]
    ok = compass(["artifacts", "ls", "--json", "--store", store.root], e2e_tmp)
    assert json.loads(ok.stdout)  # listing still works: only reading the bad file fails


def test_bad_from_artifact_uris(e2e_tmp: Path):
    store = ArtifactStore(str(e2e_tmp / "store"))
    art = _hand_written_table(store, "prompts", "raw_prompts", _good_prompts())
    cfg = write_config(e2e_tmp / "c.yaml", store.root)
    for spec, words in [(art.uri.rsplit("/", 1)[0], "lacks the VERSION"),
                        ("gopher://h/s/prompts/raw_prompts/v1", "cannot open its store"),
                        (f"raw_sft={art.uri}", "must be a sft_samples artifact")]:
        proc = compass(["run", "--config", str(cfg), "--from-artifact", spec], e2e_tmp, check=False)
        lines = _error_lines(proc.stderr)
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert words in lines[0] and spec.split("=")[-1] in lines[0], lines[0]


def test_credentials_in_a_config_are_refused_unechoed(e2e_tmp: Path):
    cfg = write_config(e2e_tmp / "c.yaml", "s3://bucket/x",
                       store_options={"endpoint_url": "http://127.0.0.1:1", "secret": "do-not-echo-me-42"})
    for args in (["run", "--config", str(cfg)], ["config", "--config", str(cfg)]):
        proc = compass(args, e2e_tmp, check=False)
        assert proc.returncode == 2 and "store_options.secret: credentials are not taken" in proc.stderr, proc.stderr
        assert "do-not-echo-me-42" not in proc.stderr + proc.stdout


def test_import_of_a_messy_file_balances(e2e_tmp: Path):
    src = e2e_tmp / "rows.jsonl"
    src.write_bytes(b'{"q": "1+1?", "a": "2"}\n{"q": 5, "a": "1"}\n{"q": "x"\n\xff\n{"q": "2+2?", "a": "4"}\n')
    imp = e2e_tmp / "imp.yaml"
    imp.write_text(yaml.safe_dump({"source": str(src), "kind": "prompts", "id_template": "r-{index}",
                                   "columns": {"prompt": "q", "reference": "a"},
                                   "defaults": {"domain": "math", "task": "t", "language": "en",
                                                "verifier": {"type": "math_exact"}}}))
    proc = compass(["import", "--config", str(imp), "--store", str(e2e_tmp / "store"), "--json"], e2e_tmp)
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (res["rows_read"], res["rows_imported"], res["rows_quarantined"]) == (5, 2, 3)
    assert res["reasons"] == {"invalid_utf8": 1, "malformed_json": 1, "wrong_type": 1}
    src.write_bytes(b'{"q": 5}\n')
    bad = compass(["import", "--config", str(imp), "--store", str(e2e_tmp / "store")], e2e_tmp, check=False)
    lines = _error_lines(bad.stderr)
    assert bad.returncode == 2 and len(lines) == 1 and "quarantined" in lines[0], bad.stderr
