"""``compass artifacts ls|show|lineage|verify|gc`` (compass/cli/artifacts.py)."""
from __future__ import annotations

import argparse
import json
import time
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from compass.cli.artifacts import add_artifacts_parser, human_size, main, parse_store_options, CLIError
from compass.store.store import ArtifactStore
from tests.compass.store.test_store import put_bytes, write_checkpoint, write_prompts

REPO = Path(__file__).resolve().parents[3]


def build_store(store: ArtifactStore) -> dict:
    """rl_prompts (2 versions) + base -> thinking -> final, and an orphan without alias."""
    arts = {}
    arts["p0"] = write_prompts(store, name="rl_prompts", version="0aaa1111", n=3)
    arts["p1"] = write_prompts(store, name="rl_prompts", version="0bbb2222", n=4)
    arts["base"] = write_checkpoint(store, "base_ckpt", "1ccc3333")
    arts["thinking"] = write_checkpoint(store, "thinking_ckpt", "2ddd4444",
                                        inputs=[arts["base"].ref("base"), arts["p1"].ref("data")])
    arts["final"] = write_checkpoint(store, "ckpt_final", "3eee5555",
                                     inputs=[arts["thinking"].ref("policy"), arts["p1"].ref("prompts")])
    arts["orphan"] = write_checkpoint(store, "scratch", "4fff6666", latest=False)
    return arts


@pytest.fixture
def store(local_store: ArtifactStore) -> ArtifactStore:
    build_store(local_store)
    return local_store


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_ls_table(store: ArtifactStore, capsys):
    rc, out, err = run(capsys, "ls", "--store", store.root)
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["KIND", "NAME", "VERSION", "PRODUCER", "ROWS", "SIZE", "CREATED", "LATEST"]
    assert set(lines[1]) <= {"-", " "}
    body = [ln for ln in lines[2:] if ln.strip() and not ln.endswith(store.root)]
    assert len(body) == 6
    by_version = {ln.split()[2]: ln for ln in body}
    assert by_version["0bbb2222"].split()[-1] == "latest" and "latest" not in by_version["0aaa1111"]
    assert "latest" not in by_version["4fff6666"]
    assert by_version["0bbb2222"].split()[:5] == ["prompts", "rl_prompts", "0bbb2222", "test_run", "4"]
    assert "KiB" in by_version["1ccc3333"]
    header_cols = [lines[0].index(h) for h in ("KIND", "NAME", "VERSION")]  # aligned columns
    assert all(ln.index(ln.split()[1]) == header_cols[1] for ln in body)
    assert out.strip().endswith(f"6 artifact version(s) in {store.root}")


def test_ls_filters_and_json(store: ArtifactStore, capsys):
    rc, out, _ = run(capsys, "ls", "--store", store.root, "--kind", "prompts", "--json")
    assert rc == 0
    doc = json.loads(out)
    assert [(d["name"], d["version"], d["rows"], d["latest"]) for d in doc] == [
        ("rl_prompts", "0aaa1111", 3, False), ("rl_prompts", "0bbb2222", 4, True)]
    assert doc[0]["uri"] == f"{store.root}/prompts/rl_prompts/0aaa1111" and doc[0]["size_bytes"] > 0
    rc, out, _ = run(capsys, "ls", "--store", store.root, "--name", "ckpt_final", "--json")
    assert [d["version"] for d in json.loads(out)] == ["3eee5555"]
    rc, out, _ = run(capsys, "ls", "--store", store.root, "--name", "nothing")
    assert rc == 0 and "no committed artifacts with name nothing" in out


def test_store_from_environment(store: ArtifactStore, capsys, monkeypatch):
    monkeypatch.setenv("COMPASS_STORE", store.root)
    rc, out, _ = run(capsys, "ls", "--json")
    assert rc == 0 and len(json.loads(out)) == 6


def test_show(store: ArtifactStore, capsys):
    rc, out, err = run(capsys, "show", "checkpoint/thinking_ckpt", "--store", store.root)
    assert rc == 0 and err == ""
    assert f"uri       {store.root}/checkpoint/thinking_ckpt/2ddd4444" in out
    assert "2ddd4444  (latest)" in out and "test_run (stage test)" in out
    assert "inputs:" in out and "base  checkpoint/base_ckpt/1ccc3333" in out
    assert "loss: 1.25" in out
    files = out.split("files:")[1]
    assert re.search(r"model.safetensors +16.0 KiB", files) and "config.json" in files and "trainer_state/rng.bin" in files

    rc, out, _ = run(capsys, "show", "prompts/rl_prompts/0aa", "--store", store.root, "--json")  # version prefix
    doc = json.loads(out)
    assert doc["version"] == "0aaa1111" and doc["rows"] == 3 and doc["latest"] is False
    assert doc["table_schema"] == "prompts/v1" and doc["files"][0]["path"] == "data.parquet"
    uri = f"{store.root}/checkpoint/scratch/4fff6666"
    rc, out, _ = run(capsys, "show", uri, "--store", store.root, "--json")
    assert rc == 0 and json.loads(out)["uri"] == uri


def test_lineage_tree(store: ArtifactStore, capsys):
    rc, out, _ = run(capsys, "lineage", "checkpoint/ckpt_final", "--store", store.root)
    assert rc == 0
    lines = out.rstrip("\n").splitlines()
    assert lines[0] == "checkpoint/ckpt_final/3eee5555  (test_run)"
    assert lines[1].endswith("policy: checkpoint/thinking_ckpt/2ddd4444  (test_run)")
    assert lines[2].endswith("base: checkpoint/base_ckpt/1ccc3333  (test_run)")
    assert lines[3].endswith("data: prompts/rl_prompts/0bbb2222  (test_run)")
    assert lines[4].endswith("prompts: prompts/rl_prompts/0bbb2222  (test_run)")
    indent = [len(ln) - len(ln.lstrip("├└│─|`- ")) for ln in lines]
    assert indent[0] == 0 and indent[1] == indent[4] < indent[2] == indent[3]  # an indented tree

    rc, out, _ = run(capsys, "lineage", f"{store.root}/checkpoint/ckpt_final/3eee5555", "--store", store.root,
                     "--json")
    tree = json.loads(out)
    assert [n["slot"] for n in tree["inputs"]] == ["policy", "prompts"]
    assert [n["name"] for n in tree["inputs"][0]["inputs"]] == ["base_ckpt", "rl_prompts"]


def test_verify(store: ArtifactStore, capsys):
    rc, out, err = run(capsys, "verify", "prompts/rl_prompts", "--store", store.root)
    assert rc == 0 and out.startswith("ok  ") and "4 rows" in out
    rc, out, _ = run(capsys, "verify", "--store", store.root, "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["ok"] and doc["checked"] == 6 and doc["failed"] == 0

    art = store.get("checkpoint", "thinking_ckpt")
    put_bytes(store, art._remote("config.json"), b'{"model_type": "evil"}')
    rc, out, err = run(capsys, "verify", "checkpoint/thinking_ckpt", "--store", store.root)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert art.uri in lines[0] and "'config.json'" in lines[0] and "checksum" in lines[0]
    rc, out, err = run(capsys, "verify", "--store", store.root)  # all: one error line, the rest ok
    assert rc == 2 and len(err.strip().splitlines()) == 1 and out.count("ok ") == 5


def test_gc(store: ArtifactStore, capsys):
    crashed = store._p("prompts", "rl_prompts", "9zzz0000", "data-1-0badf00d", "data.parquet")
    put_bytes(store, crashed, b"partial")
    long_ago = time.time() - 7200  # the crashed writer stopped writing two hours ago
    for p in (Path(crashed), Path(crashed).parent):
        os.utime(p, (long_ago, long_ago))
    rc, out, _ = run(capsys, "gc", "--store", store.root, "--dry-run", "--grace", "60")
    assert rc == 0 and "would remove" in out and "never committed" in out
    assert Path(crashed).exists()
    rc, out, _ = run(capsys, "gc", "--store", store.root, "--grace", "60", "--json")
    doc = json.loads(out)
    assert [r["reason"] for r in doc["removed"]] == ["never committed"] and doc["dry_run"] is False
    assert not Path(crashed).exists()
    rc, out, _ = run(capsys, "gc", "--store", store.root)
    assert rc == 0 and "nothing to remove" in out

    rc, out, _ = run(capsys, "gc", "--store", store.root, "--prune", "--grace", "0", "--json")
    pruned = sorted(r["path"].split(store.root_path + "/")[1] for r in json.loads(out)["removed"])
    assert pruned == ["checkpoint/scratch/4fff6666", "prompts/rl_prompts/0aaa1111"]
    rc, out, _ = run(capsys, "ls", "--store", store.root, "--json")
    assert len(json.loads(out)) == 4


@pytest.mark.parametrize("argv,needle", [
    (["show", "checkpoint/nope"], "no committed artifact checkpoint/nope"),
    (["show", "checkpoint/scratch"], "no 'latest' alias; committed versions: 4fff6666"),
    (["show", "checkpoint/base_ckpt/ffff"], "no committed manifest"),
    (["show", "just-a-name"], "expected a URI, KIND/NAME or KIND/NAME/VERSION"),
    (["lineage", "file:///elsewhere/checkpoint/x/v1"], "no committed manifest"),
    (["ls", "--store-option", "novalue"], "--store-option must be KEY=VALUE"),
])
def test_errors_are_one_line_exit_2(store: ArtifactStore, capsys, argv, needle):
    argv = [*argv] if "--store" in argv else [*argv, "--store", store.root]
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err
    assert not Path("/elsewhere").exists()  # inspecting never creates directories


def test_missing_store_is_an_error(tmp_path: Path, capsys):
    rc, out, err = run(capsys, "ls", "--store", tmp_path / "nothing-here")
    assert rc == 2 and "no artifact store at" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "nothing-here").exists()


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as ei:
        main([])
    assert ei.value.code == 2
    with pytest.raises(SystemExit) as ei:
        main(["gc", "--grace", "soon"])
    assert ei.value.code == 2


def test_add_artifacts_parser_into_another_cli(store: ArtifactStore, capsys):
    ap = argparse.ArgumentParser(prog="compass")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("run")
    add_artifacts_parser(sub)
    args = ap.parse_args(["artifacts", "ls", "--json", "--store", store.root, "--kind", "checkpoint"])
    assert args.command == "artifacts"
    assert args.func(args) == 0
    assert len(json.loads(capsys.readouterr().out)) == 4


def test_helpers():
    assert parse_store_options(["endpoint_url=http://h:1", "use_ssl=false", "client_kwargs.region_name=eu",
                                'config_kwargs={"connect_timeout": 2}']) == {
        "endpoint_url": "http://h:1", "use_ssl": False, "client_kwargs": {"region_name": "eu"},
        "config_kwargs": {"connect_timeout": 2}}
    with pytest.raises(CLIError):
        parse_store_options(["=x"])
    with pytest.raises(CLIError, match="--store-option secret: credentials are not taken"):
        parse_store_options(["secret=123"])       # credentials come from the environment (docs/secrets.md)
    assert [human_size(n) for n in (None, 0, 1023, 1024, 5 * 1024 ** 3)] == ["-", "0 B", "1023 B", "1.0 KiB",
                                                                          "5.0 GiB"]


def test_subprocess_on_s3(s3_store_root, tmp_path: Path):
    """The module as a program, against the S3 server: options reach s3fs, output is one JSON document."""
    store = ArtifactStore(s3_store_root.fresh_root("cli"), storage_options=s3_store_root.storage_options,
                          cache_dir=tmp_path / "cache")
    arts = build_store(store)
    env = {**os.environ, "COMPASS_CACHE": str(tmp_path / "cli-cache"), "COMPASS_PROGRESS": "0"}  # no bars in stderr
    opts = [f"--store-option=endpoint_url={s3_store_root.endpoint}"]   # credentials: AWS_* (the s3_server fixture)

    def cli(*argv, check=True):
        proc = subprocess.run([sys.executable, "-m", "compass.cli.artifacts", *argv, "--store", store.root, *opts],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert not check or proc.returncode == 0, proc.stderr
        return proc
    doc = json.loads(cli("ls", "--json").stdout)
    assert {d["uri"] for d in doc} == {a.uri for a in arts.values()}
    tree = cli("lineage", "checkpoint/ckpt_final").stdout
    assert "policy: checkpoint/thinking_ckpt/2ddd4444" in tree and "base: checkpoint/base_ckpt/1ccc3333" in tree
    store.fs.pipe_file(arts["p1"]._remote("data.parquet"), b"PAR1 not really")
    bad = cli("verify", "prompts/rl_prompts", check=False)
    assert bad.returncode == 2
    lines = [ln for ln in bad.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and arts["p1"].uri in lines[0] and "checksum mismatch" in lines[0], bad.stderr
