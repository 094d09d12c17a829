"""What only an object store can do to the artifact store: conditional commits, failed uploads,
download caching, credentials (real SeaweedFS S3 server; the shared behaviour is in test_store.py)."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from artifacts_schema import MANIFEST_FILE
from compass.runtime.runner import is_infra_error
from compass.store.store import Artifact, ArtifactError, ArtifactStore
from tests.compass.store.test_store import META, prompts_table, version_entries, write_checkpoint, write_prompts


@pytest.fixture
def s3_store(s3_store_root, tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(s3_store_root.fresh_root("s3only") + "/", storage_options=s3_store_root.storage_options,
                         cache_dir=tmp_path / "cache")


def _client_error(code: str, status: int) -> OSError:
    """An error as s3fs raises it: an OSError wrapping botocore's ClientError."""
    from botocore.exceptions import ClientError
    cause = ClientError({"Error": {"Code": code, "Message": code},
                         "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")
    err = OSError(22, code)
    err.__cause__ = cause
    return err


def test_root_is_normalised(s3_store: ArtifactStore, s3_store_root):
    assert s3_store.root.startswith(s3_store_root.root + "/") and not s3_store.root.endswith("/")
    assert not s3_store.is_local
    art = write_prompts(s3_store)
    assert art.uri == f"{s3_store.root}/prompts/prompts/v1"
    assert s3_store.parse_uri(art.uri) == ("prompts", "prompts", "v1")
    other = ArtifactStore(s3_store.root, storage_options=s3_store_root.storage_options)
    assert Artifact.open_uri(art.uri, other).read_table().num_rows == 5


def test_lost_put_retry_is_still_our_commit(s3_store: ArtifactStore, monkeypatch):
    """botocore retried our manifest PUT after it had landed: the 412 is about our own manifest."""
    real = s3_store.fs.pipe_file

    def put_then_412(path, data, **kw):
        real(path, data, **kw)
        if path.endswith(MANIFEST_FILE):
            raise _client_error("PreconditionFailed", 412)
    monkeypatch.setattr(s3_store.fs, "pipe_file", put_then_412)
    w = s3_store.begin("prompts", "p", "v1", **META)
    w.write_table(prompts_table(3))
    art = w.commit()
    monkeypatch.undo()
    assert art.manifest.payload_dir == w.attempt
    assert s3_store.get("prompts", "p", "v1").read_table().num_rows == 3  # payload kept


def test_conditional_put_loser_returns_winner(s3_store: ArtifactStore, monkeypatch):
    winner = s3_store.begin("prompts", "p", "v1", **META)
    loser = s3_store.begin("prompts", "p", "v1", **META)
    winner.write_table(prompts_table(2))
    loser.write_table(prompts_table(4))
    won = winner.commit()
    # The loser's existence check ran before the winner committed: only the conditional PUT can stop it.
    monkeypatch.setattr(s3_store, "exists", lambda *a: False)
    got = loser.commit()
    monkeypatch.undo()
    assert got.manifest == won.manifest and loser.committed is None
    assert version_entries(s3_store, "prompts", "p", "v1") == sorted([MANIFEST_FILE, won.manifest.payload_dir])
    assert s3_store.get("prompts", "p", "v1").read_table().num_rows == 2


def test_store_without_conditional_put_falls_back(s3_store: ArtifactStore, monkeypatch, caplog):
    real = s3_store.fs.pipe_file

    def no_conditional(path, data, **kw):
        if "IfNoneMatch" in kw:
            raise _client_error("NotImplemented", 501)
        return real(path, data, **kw)
    monkeypatch.setattr(s3_store.fs, "pipe_file", no_conditional)
    w = s3_store.begin("prompts", "p", "v1", **META)
    w.write_table(prompts_table(3))
    with caplog.at_level(logging.WARNING, logger="compass.store"):
        art = w.commit()
    assert "no conditional PUT" in caplog.text
    assert s3_store.get("prompts", "p", "v1").manifest == art.manifest


def test_failed_manifest_upload_leaves_nothing_visible(s3_store: ArtifactStore, monkeypatch):
    def network_down(path, data, **kw):
        raise ConnectionError("connection reset by peer")
    monkeypatch.setattr(s3_store.fs, "pipe_file", network_down)
    w = s3_store.begin("prompts", "p", "v1", **META)
    w.write_table(prompts_table(3))
    with pytest.raises(ArtifactError, match="nothing committed") as ei:      # one line naming the artifact
        w.commit()
    monkeypatch.undo()
    assert isinstance(ei.value.__cause__, ConnectionError) and w.uri in str(ei.value)
    assert is_infra_error(ei.value)  # judged by its cause: an orchestrator retries this
    assert version_entries(s3_store, "prompts", "p", "v1") == [w.attempt]  # the payload is up, uncommitted
    assert s3_store.list() == [] and not s3_store.exists("prompts", "p", "v1")
    assert s3_store.gc() == []  # too young
    assert [r["reason"] for r in s3_store.gc(grace_s=0)] == ["never committed"]
    assert version_entries(s3_store, "prompts", "p", "v1") == []
    # The retry commits normally.
    again = s3_store.begin("prompts", "p", "v1", **META)
    again.write_table(prompts_table(3))
    assert again.commit().read_table().num_rows == 3


def test_download_cache_is_reused_across_store_objects(s3_store: ArtifactStore, s3_store_root, tmp_path: Path,
                                                       monkeypatch):
    art = write_checkpoint(s3_store, "ckpt", "v1")
    d = art.local_dir()
    assert d.is_relative_to(tmp_path / "cache")
    other = ArtifactStore(s3_store.root, storage_options=s3_store_root.storage_options, cache_dir=tmp_path / "cache")

    def no_download(*a, **kw):
        raise AssertionError("downloaded again")
    monkeypatch.setattr(other.fs, "get", no_download)
    monkeypatch.setattr(other.fs, "get_file", no_download)
    assert other.get("checkpoint", "ckpt").local_dir() == d
    assert (d / "trainer_state" / "rng.bin").read_bytes() == b"\x01\x02\x03"
    leftovers = [p.name for p in d.parent.iterdir() if p.name.startswith(".dl-")]
    assert leftovers == []


def test_failed_download_leaves_no_cache_entry(s3_store: ArtifactStore, tmp_path: Path):
    art = write_checkpoint(s3_store, "ckpt", "v1")
    s3_store.fs.pipe_file(art._remote("model.safetensors"), b"not the weights")
    fresh = ArtifactStore(s3_store.root, storage_options=s3_store.storage_options, cache_dir=tmp_path / "c2")
    with pytest.raises(Exception, match="'model.safetensors' checksum mismatch"):
        fresh.get("checkpoint", "ckpt").local_dir()
    dest = tmp_path / "c2" / "checkpoint" / "ckpt" / "v1"
    assert not (dest / art.manifest.payload_dir).exists()
    assert [p.name for p in dest.iterdir()] == []  # the partial download was removed


def test_wrong_credentials_are_not_retried(s3_store_root):
    bad = ArtifactStore(s3_store_root.root, storage_options={**s3_store_root.storage_options, "secret": "nope",
                                                             "skip_instance_cache": True})
    with pytest.raises(PermissionError) as ei:
        bad.list()
    assert not is_infra_error(ei.value)


def test_unreachable_endpoint_is_retried():
    store = ArtifactStore("s3://nowhere/x", storage_options={
        "endpoint_url": "http://127.0.0.1:9", "key": "k", "secret": "s",
        "config_kwargs": {"connect_timeout": 1, "retries": {"max_attempts": 1}}})
    with pytest.raises(Exception) as ei:
        store.list()
    assert is_infra_error(ei.value), repr(ei.value)


def test_cache_does_not_hide_a_corrupted_remote_file(s3_store: ArtifactStore):
    from compass.store.store import ArtifactCorrupt
    ckpt = write_checkpoint(s3_store, "ckpt", "c1")
    cached = ckpt.local_dir()                      # downloaded and verified once
    entry = ckpt.manifest.files[0]
    remote = ckpt._remote(entry.path)
    same_size = bytes(b ^ 0xFF for b in s3_store.fs.cat_file(remote))
    s3_store.fs.pipe_file(remote, same_size)       # corrupted in the store, same size
    assert ckpt.local_dir() == cached              # everyday reads trust the verified cache...
    with pytest.raises(ArtifactCorrupt, match=f"'{entry.path}' checksum mismatch"):
        ckpt.local_dir(fresh=True)                 # ...verify reads the store itself
    with pytest.raises(ArtifactCorrupt):           # the suspect cached copy is gone too
        ckpt.local_dir()
    original = bytes(b ^ 0xFF for b in same_size)
    s3_store.fs.pipe_file(remote, original)        # repaired in the store
    cached = ckpt.local_dir()
    (cached / entry.path).write_bytes(b"short")    # a damaged cached copy is fetched again
    assert (ckpt.local_dir() / entry.path).read_bytes() == original
