"""The S3 server (a real SeaweedFS) killed in the middle of an artifact upload: the stage run fails with one
clear line naming the artifact, as a retryable infrastructure error; nothing is committed (no manifest, no
LATEST, nothing listed); after the server restarts on the same data the same run commits and gc removes the
dead attempt's partial upload."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from fsspec.callbacks import Callback

import compass.store.artifact_writer as artifact_writer
from compass.config import StrictModel
from compass.runtime.runner import StageSpec, execute, is_infra_error
from compass.store.store import ArtifactError, ArtifactStore
from tests.s3_server import _answers, start_s3_server

pytestmark = pytest.mark.slow

FILES = 12


class Cfg(StrictModel):
    seed: int = 0


def _body(config: Cfg, inputs, outputs):
    w = outputs["checkpoint"]
    for i in range(FILES):      # a sharded checkpoint: many files, so the upload is caught part-way
        w.path(f"shard-{i:02d}.bin").write_bytes(os.urandom(256 << 10))


SPEC = StageSpec(name="shards", config=Cfg, inputs={}, outputs={"checkpoint": "checkpoint"}, body=_body,
                 package="compass.store")


class KillAfterFirstFile(Callback):
    """Kills the server once the first file of the upload has landed: the rest are in flight or not started."""

    def __init__(self, server):
        super().__init__()
        self.server, self.killed = server, False

    def call(self, *args, **kwargs):
        if self.value >= 1 and not self.killed:
            self.killed = True
            self.server.proc.send_signal(signal.SIGKILL)
            self.server.proc.wait()


def _restart(server) -> None:
    """The same weed command on the same ports and data directory."""
    with open(server.log_path, "ab") as log:
        server.proc = subprocess.Popen(server.command, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, cwd=server.workdir)
    deadline = time.monotonic() + 60
    while not _answers(server.endpoint):
        assert server.alive() and time.monotonic() < deadline, server.log_tail()
        time.sleep(0.1)


def test_s3_server_killed_mid_upload(monkeypatch, tmp_path):
    server = start_s3_server()
    try:
        opts = {**server.storage_options, "config_kwargs": {"connect_timeout": 2, "read_timeout": 10,
                                                             "retries": {"max_attempts": 2}}}
        store = ArtifactStore(server.root("outage"), storage_options=opts, cache_dir=tmp_path / "cache")
        cb = KillAfterFirstFile(server)
        monkeypatch.setattr(artifact_writer, "transfer_progress", lambda desc: cb)
        t0 = time.monotonic()
        with pytest.raises(Exception) as e:
            execute(SPEC, Cfg(), {}, store, run_name="shards_run")
        failed_after = time.monotonic() - t0
        assert cb.killed, "the upload finished before the server was killed"
        msg = str(e.value)
        assert isinstance(e.value, ArtifactError) and "\n" not in msg, (type(e.value), msg)
        assert "s3://" in msg and "/checkpoint/checkpoint/" in msg and "nothing committed" in msg, msg
        assert is_infra_error(e.value)          # the orchestrator retries it (flows/stage_task.py)
        assert failed_after < 60, failed_after
        monkeypatch.undo()

        _restart(server)
        fs = server.filesystem()
        fs.invalidate_cache()
        keys = fs.find(store.root_path)
        assert keys, "nothing of the upload reached the server before it died"   # a partial upload is there
        assert not [k for k in keys if k.endswith("/manifest.json") or k.endswith("/LATEST")], keys
        assert store.list() == []

        res = execute(SPEC, Cfg(), {}, store, run_name="shards_run")      # the same run, after the restart
        assert res.status == "ran"
        art = store.open(res.outputs["checkpoint"])
        assert len(art.manifest.files) == FILES and store.latest_version("checkpoint", "checkpoint") == art.version
        art.local_dir(fresh=True)
        removed = store.gc(grace_s=0)
        assert [r["reason"] for r in removed] == ["payload of an attempt that did not commit"], removed
        assert len(list(art.local_dir().glob("shard-*"))) == FILES
    finally:
        server.stop()
