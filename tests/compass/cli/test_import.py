"""``compass import``: the printed URIs, counts and hint; one-line config and source errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from compass.cli.main import main
from compass.store.store import ArtifactStore

CONFIG = {
    "source": "data/set.jsonl",   # relative to the config file
    "kind": "prompts",
    "id_template": "s-{index:03d}",
    "columns": {"prompt": "question", "reference": {"from": "answer", "regex": r"####\s*(.+)$"}},
    "defaults": {"domain": "math", "task": "s", "language": "en", "verifier": {"type": "math_exact"}},
}


def write_config(tmp_path: Path, cfg: dict, name: str = "myset.yaml") -> Path:
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "set.jsonl").write_bytes(
        b'{"question": "1+1?", "answer": "#### 2"}\n'
        b'{"question": "2+2?", "answer": "four"}\n'
        b'{"question": "3+3?", "answer": "#### 6"}\n'
        b'{"question": \n')
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True, sort_keys=False))
    return path


def test_import_prints_uris_counts_and_the_pipeline_hint(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = write_config(tmp_path, CONFIG)
    store = str(tmp_path / "store")
    assert main(["import", "--config", str(cfg), "--store", store]) == 0
    out = capsys.readouterr().out
    assert "imported prompts/myset" in out  # the name defaults to the config's file stem
    assert "rows read 4 = imported 2 + quarantined 2" in out
    assert "no_match" in out and "malformed_json" in out
    uri = next(w for w in out.split() if w.startswith("file://") and "/prompts/myset/" in w)
    # the hint is runnable as printed: it names the store the table is in
    assert f"compass run --store file://{store} --from-artifact raw_prompts={uri}" in out
    assert f"--from-artifact eval_prompts={uri}" in out
    assert f"compass artifacts head --store file://{store} file://{store}/quarantine/myset_quarantine/" in out

    assert main(["import", "--config", str(cfg), "--store", store, "--json", "--name", "myset"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["status"] == "reused" and res["table_uri"] == uri
    assert res["reasons"] == {"malformed_json": 1, "no_match": 1} and res["use"]["raw_prompts"] == uri

    # the pipeline accepts the artifact where the hint says
    from compass.dag.run_plan import resolve_provided
    assert resolve_provided([f"raw_prompts={uri}"], ArtifactStore(store)) == {"raw_prompts": uri}


def test_store_defaults_to_env(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COMPASS_STORE", str(tmp_path / "envstore"))
    assert main(["import", "--config", str(write_config(tmp_path, CONFIG)), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["table_uri"].startswith(f"file://{tmp_path}/envstore/")


@pytest.mark.parametrize("change,expected", [
    ({"colums": {}}, "colums: unknown key (did you mean 'columns'?)"),
    ({"columns": {"prompt": {"from": "q", "regx": "a"}, "reference": "a"}},
     "columns.prompt: unknown key 'regx' (did you mean 'regex'?)"),
    ({"columns": {"prompt": "q"}}, "columns: kind prompts needs column 'reference'"),
    ({"columns": {"prompt": {"template": "{_x}"}, "_x": "q", "reference": "a"}},
     "columns.prompt: uses _x before it is defined"),
    ({"columns": {"prompt": {"from": "q", "template": "{q}"}, "reference": "a"}},
     "columns.prompt: a column needs exactly one of from, template, const, object"),
    ({"labels": {1: "A"}}, "labels: only for kind preference_pairs"),
    ({"kind": "preference_pairs"}, "columns: kind preference_pairs needs column 'response_a'"),
    ({"defaults": {"domain": "m", "task": "t", "language": "en", "verifier": "math_exact"}},
     "defaults: verifier: not valid JSON"),
    ({"id_template": "s-{}"}, "id_template: not a valid template"),
    ({"kind": "rollouts"}, "kind: Input should be 'prompts', 'sft_samples' or 'preference_pairs'"),
])
def test_config_errors_are_one_line_naming_file_and_field(tmp_path, capsys, change, expected):
    path = write_config(tmp_path, {**CONFIG, **change})
    assert main(["import", "--config", str(path), "--store", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"config error in {path}: ") and expected in err[0], err[0]
    assert not (tmp_path / "s").exists() or not list((tmp_path / "s").rglob("manifest.json"))


@pytest.mark.parametrize("change,expected", [
    ({"source": "data/nope.jsonl"}, "data/nope.jsonl: no such file"),
    ({"source": "data/set.jsonl", "format": "json"}, "it looks like JSON Lines: set format: jsonl"),
    ({"source": "data"}, None),   # a folder of .jsonl files reads like one file
    ({"source": "data/set.jsonl", "format": "datasets"}, "not a folder written by datasets' save_to_disk"),
])
def test_source_errors(tmp_path, capsys, change, expected):
    path = write_config(tmp_path, {**CONFIG, **change})
    if change.get("format") == "datasets":
        (tmp_path / "data" / "set.jsonl").unlink()
        (tmp_path / "data" / "set.jsonl").mkdir()
    rc = main(["import", "--config", str(path), "--store", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip()
    if expected is None:
        assert rc == 0, err
        return
    assert rc == 2 and err.startswith("error: ") and expected in err and "\n" not in err, err
