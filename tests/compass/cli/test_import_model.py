"""``compass import-model``: the printed URI, arch, parameters, dtype and next command; one-line errors, exit 2."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from compass.cli.main import main
from compass.dag.run_plan import resolve_provided
from compass.store.store import ArtifactStore
from tests.compass.lm.hf_families import make_model_folder


def _numel(folder: Path) -> int:
    """Parameters as the weight files hold them (read here, not by the importer)."""
    from safetensors import safe_open
    n = 0
    for f in folder.glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            n += sum(math.prod(st.get_slice(k).get_shape()) for k in st.keys())
    return n


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> Path:
    return make_model_folder("qwen3", tmp_path_factory.mktemp("hf") / "tiny-qwen3")


def test_prints_the_artifact_and_the_next_command(qwen3, tmp_path, capsys):
    store = tmp_path / "store"
    assert main(["import-model", str(qwen3), "--store", str(store)]) == 0
    out = capsys.readouterr().out
    art = ArtifactStore(str(store)).get("checkpoint", "base_ckpt")
    assert f"imported checkpoint/base_ckpt version {art.version} from file://{qwen3}" in out
    assert f"artifact   {art.uri}" in out
    n = _numel(qwen3)
    assert f"qwen3, {n / 1e3:.1f}K parameters ({n:,}), bfloat16" in out
    assert "pad <|endoftext|> (its own)" in out and "the model's own chat template" in out
    assert out.rstrip().endswith(f"compass run --store file://{store} --from-artifact base_ckpt={art.uri}")
    # what the next command passes is accepted by the run planner
    assert resolve_provided([f"base_ckpt={art.uri}"], ArtifactStore(str(store))) == {"base_ckpt": art.uri}

    assert main(["import-model", str(qwen3), "--store", str(store), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "reused" and doc["uri"] == art.uri and doc["arch"] == "qwen3"
    assert doc["params"] == n and doc["dtype"] == "bfloat16"
    assert doc["next"] == f"compass run --store file://{store} --from-artifact base_ckpt={art.uri}"

    # `compass artifacts show` reads what the import recorded
    assert main(["artifacts", "show", "--store", str(store), "checkpoint/base_ckpt"]) == 0
    shown = capsys.readouterr().out
    assert "producer  import-model (stage import_model)" in shown
    assert "arch: qwen3" in shown and f"params: {n}" in shown and "dtype: bfloat16" in shown


def test_name_and_store_from_env(qwen3, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COMPASS_STORE", str(tmp_path / "envstore"))
    assert main(["import-model", str(qwen3), "--name", "my_qwen", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["uri"].startswith(f"file://{tmp_path}/envstore/checkpoint/my_qwen/")
    assert doc["next"].endswith(f"--from-artifact base_ckpt={doc['uri']}")   # the pipeline slot stays base_ckpt


def test_errors_are_one_line_exit_2(qwen3, tmp_path, capsys):
    bad = tmp_path / "gpt2"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": 10}))
    for source, expected in ((str(bad), "model_type 'gpt2' is not supported; supported: qwen3"),
                             (str(tmp_path / "missing"), "no such folder"),
                             (str(tmp_path), "no config.json")):
        assert main(["import-model", source, "--store", str(tmp_path / "store")]) == 2
        cap = capsys.readouterr()
        assert cap.out == "" and cap.err.count("\n") == 1 and cap.err.startswith("error: ") and expected in cap.err
    assert main(["import-model", str(qwen3), "--store", str(tmp_path / "store"), "--store-option", "oops"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


def test_model_and_store_on_s3(qwen3, s3_store_root, tmp_path, capsys):
    """SOURCE on the store's S3 endpoint: the --store-option flags reach both (credentials: AWS_* env)."""
    import fsspec
    root = s3_store_root.fresh_root("import-model")
    fs = fsspec.filesystem("s3", **s3_store_root.storage_options)
    model_uri = f"{root}/models/tiny-qwen3"
    fs.put(str(qwen3), model_uri, recursive=True)
    local = main(["import-model", str(qwen3), "--store", str(tmp_path / "local"), "--json"])
    local_version = json.loads(capsys.readouterr().out)["version"]
    assert local == 0
    store = f"{root}/store"
    opt = f"endpoint_url={s3_store_root.endpoint}"
    assert main(["import-model", model_uri, "--store", store, "--store-option", opt, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["version"] == local_version and doc["source"] == model_uri
    assert doc["next"] == f"compass run --store {store} --store-option {opt} --from-artifact base_ckpt={doc['uri']}"
    art = ArtifactStore(store, storage_options={"endpoint_url": s3_store_root.endpoint}).open(doc["uri"])
    from compass.lm.chat import chat_prefix
    from compass.lm.model_factory import load_checkpoint
    _, tok = load_checkpoint(art.local_dir())
    assert chat_prefix(tok, "hi").startswith("<|im_start|>user\nhi<|im_end|>")
