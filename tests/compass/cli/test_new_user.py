"""The command line as a new user meets it (issue 19, item 8): every mistake below ends in one clear
line on stderr and exit code 2, never a traceback."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from compass.cli.main import main
from compass.store.store import ArtifactStore

REPO = Path(__file__).resolve().parents[3]


def compass(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """``compass ARGS`` in a subprocess; ``env`` adds to this environment less its AWS_* (the session's
    S3 server sets some)."""
    base = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
            "COMPASS_LOG_DIR": str(cwd / "logs"), "COMPASS_PROGRESS": "0", "COMPASS_CACHE": str(cwd / "cache")}
    return subprocess.run([sys.executable, "-m", "compass.cli.main", *args], cwd=cwd, env={**base, **(env or {})},
                          capture_output=True, text=True, timeout=60)


def one_error_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """The single stderr line of a failed command, checked for exit 2, no traceback and ``needles``."""
    lines = [ln for ln in proc.stderr.strip().splitlines() if not ln.startswith("full log:")]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("error:"), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- S3: no credentials, no endpoint -----------------------------------------------

def test_s3_store_without_credentials_or_endpoint_is_one_line(tmp_path):
    no_creds = {"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_CONFIG_FILE": str(tmp_path / "none"),
                "AWS_EC2_METADATA_DISABLED": "true", "AWS_MAX_ATTEMPTS": "1", "AWS_RETRY_MODE": "standard"}
    proc = compass(["artifacts", "ls", "--store", "s3://nobucket/x"], tmp_path, no_creds)
    one_error_line(proc, "s3://nobucket/x", "credentials", "anon=true")

    port = free_port()                      # nothing listens here: the connection is refused at once
    creds = {**no_creds, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    proc = compass(["artifacts", "ls", "--store", "s3://nobucket/x", "--store-option",
                    f"endpoint_url=http://127.0.0.1:{port}"], tmp_path, creds)
    one_error_line(proc, "cannot reach store s3://nobucket/x", f"127.0.0.1:{port}")


# -- compass stage / compass bench: names, help, slots ---------------------------------

def test_stage_and_bench_names_and_help(tmp_path, capsys):
    one_error_line(compass(["stage", "nosuch"], tmp_path), "unknown stage 'nosuch'", "data_filter")
    assert main(["bench", "nosuch"]) == 2
    assert "unknown benchmark 'nosuch'" in capsys.readouterr().err
    for argv in (["stage", "--help"], ["bench", "--help"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "world, data_filter, sft" in out if argv[0] == "stage" else "learning-efficiency" in out
    with pytest.raises(SystemExit) as ei:
        main(["stage", "evaluation", "--help"])
    assert ei.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("usage: compass stage evaluation")
    # --output-name lists the output slots and what the pipeline names them
    assert "slots: results (eval_results), report (report)" in out and "report=eval_report" in out


def test_stage_input_mistakes_name_the_slot_and_the_store(tmp_path, capsys):
    one_error_line(compass(["stage", "evaluation", "--input", "modle=file:///data/x"], tmp_path),
                   "no input slot 'modle'", "did you mean 'model'?")
    assert main(["stage", "sft", "--input", "model"]) == 2           # a usage error: 2 like argparse's
    assert "--input model: expected SLOT=VALUE" in capsys.readouterr().err
    assert main(["stage", "sft", "--section", "sft_domain", "--input", "base=x/y", "--input", "data=x/y",
                 "--output-name", "ckpt=mine"]) == 2
    assert "no output slot 'ckpt' (did you mean 'checkpoint'?)" in capsys.readouterr().err
    os.chdir(tmp_path)
    try:
        rc = main(["stage", "merge", "--store", "A", "--input", "base=/data/nope", "--input", "thinking=x/y",
                   "--input", "domain=x/y", "--input", "dev=x/y"])
    finally:
        os.chdir(REPO)
    err = capsys.readouterr().err
    assert rc == 2 and f"in file://{tmp_path}/A;" in err and "--input base: /data/nope" in err
    assert not (tmp_path / "A").exists()                  # a refused command makes no store folder


# -- gym score genrm --judge: every form `compass artifacts ls` shows -------------------------

def _checkpoint(store: ArtifactStore, name: str):
    w = store.begin("checkpoint", name, "0123456789abcdef", producer="genrm", stage="genrm",
                    config_fingerprint="x", code_version="x", inputs=[])
    w.path("config.json").write_text(json.dumps({"model_type": "qwen3"}))
    return w.commit()


def test_gym_judge_accepts_every_form_of_a_checkpoint(tmp_path, capsys):
    from compass.cli.gym import JudgeError, judge_dir
    store = ArtifactStore(str(tmp_path / "store"))
    art = _checkpoint(store, "genrm_ckpt")
    store.set_latest(art.kind, art.name, art.version)
    payload = str(art.local_dir())
    vdir = f"{tmp_path}/store/checkpoint/genrm_ckpt/{art.version}"
    root = str(tmp_path / "store")
    for ref in (vdir, f"file://{vdir}", art.uri, "checkpoint/genrm_ckpt", "checkpoint/genrm_ckpt/0123",
                payload, f"{vdir}/manifest.json"):
        assert judge_dir(ref, root, []) == payload, ref
    raw = tmp_path / "copied_model"                       # a model folder outside any store is used as is
    raw.mkdir()
    (raw / "config.json").write_text("{}")
    assert judge_dir(str(raw), root, []) == str(raw)
    with pytest.raises(JudgeError, match="no committed artifact checkpoint/nope"):
        judge_dir("checkpoint/nope", root, [])
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "p", "response": "a", "reference": "b"}\n')
    one_error_line(compass(["gym", "score", "genrm", str(rows), str(tmp_path / "out.jsonl"), "--store", root,
                            "--judge", "checkpoint/nope"], tmp_path), "--judge checkpoint/nope")


# -- a partial pipeline config builds on the embedded default ----------------------------------

def test_partial_config_builds_on_the_embedded_default(tmp_path, capsys):
    from compass.config import ConfigError
    from compass.dag.config import PipelineConfig
    from compass.dag.pipeline_yaml import EMBEDDED_DEFAULT, load_pipeline_config
    tiny, line = load_pipeline_config(EMBEDDED_DEFAULT)
    assert "(the embedded default)" in line
    user = tmp_path / "mine.yaml"
    user.write_text("sft_longcot: {steps: 10}\n")
    cfg, line = load_pipeline_config(user)
    assert line == f"config: {user} on top of the embedded default {EMBEDDED_DEFAULT}"
    assert cfg.sft_longcot.steps == 10
    assert cfg.model_copy(update={"sft_longcot": tiny.sft_longcot}) == tiny     # everything else is tiny.yaml's
    assert cfg.world.model.hidden_size == 128 and cfg.world.tokenizer.vocab_size == 2048

    (tmp_path / "none.yaml").write_text("base: none\nsft_longcot: {steps: 10}\n")
    bare, line = load_pipeline_config(tmp_path / "none.yaml")
    assert bare.world == PipelineConfig().world and "no base file" in line
    (tmp_path / "on_mine.yaml").write_text("base: mine.yaml\nsft_domain: {steps: 5}\n")
    both, line = load_pipeline_config(tmp_path / "on_mine.yaml")
    assert (both.sft_longcot.steps, both.sft_domain.steps) == (10, 5) and f"on top of {user}" in line
    (tmp_path / "loop.yaml").write_text("base: loop.yaml\n")
    with pytest.raises(ConfigError, match="leads back to itself"):
        load_pipeline_config(tmp_path / "loop.yaml")

    bad = tmp_path / "bad.yaml"
    bad.write_text("sft_longcot:\n  steps: [1\n")
    assert main(["config", "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f'"{bad}", line' in err and "<unicode string>" not in err

    assert main(["config", "--config", str(user)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# config: {user} on top of the embedded default")
    assert yaml.safe_load(out)["world"]["model"]["hidden_size"] == 128


def test_e2e_whole_configs_mean_what_they_say(tmp_path):
    from compass.config import validate
    from compass.dag.config import PipelineConfig
    from compass.dag.pipeline_yaml import load_pipeline_config
    from tests.e2e.conftest import write_config
    path = write_config(tmp_path / "e2e.yaml", str(tmp_path / "store"))
    data = yaml.safe_load(path.read_text())
    data.pop("base")
    cfg, _ = load_pipeline_config(path)
    assert cfg == validate(PipelineConfig, data) and set(cfg.world.suites) == {"arithmetic", "ecommerce_category"}


# -- compass import: nothing imported is an error; no empty folders; quarantine rows shown --------

def _import_config(tmp_path: Path, prompt_field: str, fmt: str = "jsonl") -> Path:
    src = tmp_path / f"set.{fmt}"
    if fmt == "jsonl":
        src.write_text("".join(json.dumps({"question": f"{i}+1?", "answer": f"#### {i + 1}"}) + "\n"
                               for i in range(5)))
    else:
        src.write_bytes(b"PAR1 this is no parquet file")
    cfg = {"source": src.name, "kind": "prompts", "format": fmt, "name": "myset", "id_template": "s-{index:03d}",
           "columns": {"prompt": prompt_field, "reference": {"from": "answer", "regex": r"####\s*(.+)$"}},
           "defaults": {"domain": "math", "task": "s", "language": "en", "verifier": {"type": "math_exact"}}}
    path = tmp_path / f"import-{prompt_field}-{fmt}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_import_that_keeps_nothing_fails_and_shows_why(tmp_path, capsys):
    store = tmp_path / "store"
    proc = compass(["import", "--config", str(_import_config(tmp_path, "questoin")), "--store", str(store)], tmp_path)
    line = one_error_line(proc, "all 5 rows were quarantined", "missing_field 5",
                          "source field 'questoin' is missing", f"compass artifacts head --store file://{store}")
    assert "compass run" not in proc.stdout + proc.stderr
    assert not (store / "prompts").exists()               # no empty table, no empty folders
    assert ArtifactStore(str(store)).latest_version("prompts", "myset") is None
    # the printed command shows the quarantined rows and their reasons
    argv = line.split("see them: compass ", 1)[1].split()
    assert main(argv) == 0
    out = capsys.readouterr().out
    by_reason = out.split("rows by reason:")[1].split("first")[0].splitlines()
    assert any(ln.split()[:2] == ["missing_field", "5"] and "source field 'questoin'" in ln for ln in by_reason), out
    assert main(argv + ["--json", "-n", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"] == 5 and len(doc["head"]) == 2 and doc["reasons"][0]["reason"] == "missing_field"

    # a source that fails while rows stream leaves no version folder either
    proc = compass(["import", "--config", str(_import_config(tmp_path, "question", "parquet")),
                    "--store", str(store)], tmp_path)
    one_error_line(proc, "set.parquet")
    assert not (store / "prompts").exists() and sorted(p.name for p in (store / "quarantine").iterdir()) == \
        ["myset_quarantine"]
    assert len([p for p in (store / "quarantine" / "myset_quarantine").iterdir() if p.is_dir()]) == 1
