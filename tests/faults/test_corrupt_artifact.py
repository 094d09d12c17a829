"""A corrupted artifact file (bytes changed behind the manifest's back, size kept) is refused with a checksum
error naming the artifact and the file: a Parquet table and a checkpoint payload, on the local disk and on a
real S3 server, read in process and through `compass artifacts verify`; a corrupted download cache is
fetched again rather than read."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from safetensors.torch import save_file

from compass.store.store import ArtifactCorrupt, ArtifactStore
from tests.e2e.conftest import compass


def _prompts(n: int = 32) -> pa.Table:
    return pa.table({"id": [f"p{i}" for i in range(n)], "domain": ["math"] * n, "task": ["t"] * n,
                     "language": ["en"] * n, "prompt": [f"{i}+1?" for i in range(n)],
                     "reference": [str(i + 1) for i in range(n)], "verifier": ['{"type": "math_exact"}'] * n,
                     "difficulty": pa.array([None] * n, pa.int32()), "pass_rate": pa.array([None] * n, pa.float64())})


def _begin(store: ArtifactStore, kind: str, name: str):
    return store.begin(kind, name, "v1", producer="test", stage="test", config_fingerprint="-", code_version="-")


def _table(store: ArtifactStore):
    w = _begin(store, "prompts", "raw_prompts")
    w.write_table(_prompts())
    return w.commit()


def _checkpoint(store: ArtifactStore):
    w = _begin(store, "checkpoint", "base_ckpt")
    save_file({"w": torch.arange(4096, dtype=torch.float32)}, w.path("model.safetensors"))
    w.path("config.json").write_text('{"model_type": "qwen3"}')
    return w.commit()


def _flip(data: bytes) -> bytes:
    """One byte in the middle changed: same size, so only the checksum can tell."""
    mid = len(data) // 2
    return data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1:]


def _corrupt(store: ArtifactStore, art, rel: str) -> None:
    path = art._remote(rel)
    store.fs.pipe_file(path, _flip(store.fs.cat_file(path)))


def _fresh(store: ArtifactStore, tmp: Path) -> ArtifactStore:
    """Another process's view: no memo of files already verified, its own download cache."""
    return ArtifactStore(store.root, storage_options=store.storage_options or None, cache_dir=tmp / "cache2")


def _checksum_error(exc: Exception, art, rel: str) -> None:
    msg = str(exc)
    assert "\n" not in msg and art.uri in msg and f"'{rel}'" in msg and "checksum mismatch" in msg, msg


def test_corrupted_parquet_table(any_store: ArtifactStore, tmp_path: Path):
    art = _table(any_store)
    assert art.read_table().num_rows == 32
    _corrupt(any_store, art, "data.parquet")
    reader = _fresh(any_store, tmp_path).get("prompts", "raw_prompts", "v1")
    with pytest.raises(ArtifactCorrupt) as e:
        reader.read_table()
    _checksum_error(e.value, art, "data.parquet")
    with pytest.raises(ArtifactCorrupt) as e:
        reader.local_dir()
    _checksum_error(e.value, art, "data.parquet")


def test_corrupted_checkpoint_payload(any_store: ArtifactStore, tmp_path: Path):
    art = _checkpoint(any_store)
    _corrupt(any_store, art, "model.safetensors")
    reader = _fresh(any_store, tmp_path).get("checkpoint", "base_ckpt", "v1")
    with pytest.raises(ArtifactCorrupt) as e:
        reader.local_dir()          # what every stage calls before loading a checkpoint
    _checksum_error(e.value, art, "model.safetensors")
    with pytest.raises(ArtifactCorrupt) as e:
        reader.read_bytes("model.safetensors")
    _checksum_error(e.value, art, "model.safetensors")
    assert reader.read_bytes("config.json")  # the intact files still read


def test_corrupted_download_cache_is_fetched_again(s3_store_root, tmp_path: Path):
    store = ArtifactStore(s3_store_root.fresh_root("cache"), storage_options=s3_store_root.storage_options,
                          cache_dir=tmp_path / "cache")
    art = _checkpoint(store)
    cached = art.local_dir() / "model.safetensors"
    good = cached.read_bytes()
    cached.chmod(0o644)
    cached.write_bytes(_flip(good))       # the local copy rots; the store's copy is intact
    again = ArtifactStore(store.root, storage_options=store.storage_options, cache_dir=tmp_path / "cache")
    path = again.get("checkpoint", "base_ckpt", "v1").local_dir() / "model.safetensors"
    assert path.read_bytes() == good


@pytest.mark.slow
def test_verify_command_names_the_corrupted_file(tmp_path: Path):
    store = ArtifactStore(str(tmp_path / "store"))
    table, ckpt = _table(store), _checkpoint(store)
    _corrupt(store, ckpt, "model.safetensors")
    proc = compass(["artifacts", "verify", "--json", "--store", store.root], tmp_path, check=False)
    assert proc.returncode == 2
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and ckpt.uri in errors[0] and "'model.safetensors' checksum mismatch" in errors[0], \
        proc.stderr
    res = {a["uri"]: a for a in json.loads(proc.stdout)["artifacts"]}
    assert {u: a["ok"] for u, a in res.items()} == {table.uri: True, ckpt.uri: False}
    assert re.search(r"manifest sha256 [0-9a-f]{12}", res[ckpt.uri]["error"])
