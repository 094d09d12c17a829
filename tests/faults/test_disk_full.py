"""The disk full while a stage writes its outputs or commits them: a small tmpfs holds the store (mounted here
when the test runs as root; elsewhere ENOSPC is injected at the same calls). The error names the stage run and
the artifact, nothing half-written becomes visible, and once space is freed the store works and the same run
commits."""
from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from compass.config import StrictModel
from compass.runtime.runner import StageSpec, execute
from compass.store.store import ArtifactError, ArtifactStore

DISK = "4m"


class Cfg(StrictModel):
    payload: str = "table"   # what the body writes, about 1 MB: a Parquet table or a torch checkpoint


class Disk:
    """A small filesystem: a real tmpfs, or (no mount allowed) one whose fullness is injected."""

    def __init__(self, path: Path, monkeypatch, real: bool):
        self.path, self.mp, self.real, self.full = path, monkeypatch, real, False
        self.fill_at: str | None = None     # when the next run's body fills the disk: before_write, before_commit

    def maybe_fill(self, when: str) -> None:
        if self.fill_at == when:
            self.fill_at = None
            self.fill()

    def fill(self) -> None:
        """Take every byte left, as another process would."""
        if self.real:
            with open(self.path / "filler", "wb") as f:
                try:
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
                except OSError as e:
                    assert e.errno == errno.ENOSPC
        else:
            self.full = True

    def free(self) -> None:
        (self.path / "filler").unlink(missing_ok=True)
        self.full = False

    def inject(self) -> None:
        """No tmpfs: fail the writes a full disk fails, with the errors a full disk gives."""
        def enospc(*_a, **_k):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write, real_save, real_fsync, real_statvfs = pq.write_table, torch.save, os.fsync, os.statvfs

        def write_table(table, where, *a, **k):
            return enospc() if self.full else real_write(table, where, *a, **k)

        def save(obj, f, *a, **k):
            if self.full:
                raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos")  # what torch raises
            return real_save(obj, f, *a, **k)

        def statvfs(p):
            st = real_statvfs(p)
            return os.statvfs_result((*st[:4], 0, 0, *st[6:])) if self.full else st
        self.mp.setattr(pq, "write_table", write_table)
        self.mp.setattr(torch, "save", save)
        self.mp.setattr(os, "fsync", lambda fd: enospc() if self.full else real_fsync(fd))
        self.mp.setattr(os, "statvfs", statvfs)


@pytest.fixture
def disk(tmp_path: Path, monkeypatch):
    path = tmp_path / "disk"
    path.mkdir()
    # COMPASS_TEST_INJECT_ENOSPC=1 runs the injected path on a machine that could mount (to keep it working)
    mounted = os.geteuid() == 0 and not os.environ.get("COMPASS_TEST_INJECT_ENOSPC") and subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(path)],
                                                    capture_output=True).returncode == 0
    d = Disk(path, monkeypatch, real=mounted)
    if not mounted:
        d.inject()
    try:
        yield d
    finally:
        if mounted:
            if subprocess.run(["umount", str(path)], capture_output=True).returncode:
                subprocess.run(["umount", "-l", str(path)], check=True)  # a traceback still holds a file open


def _rows(n: int) -> pa.Table:
    return pa.table({"id": [f"p{i}" for i in range(n)], "domain": ["math"] * n, "task": ["t"] * n,
                     "language": ["en"] * n, "prompt": [os.urandom(512).hex() for _ in range(n)],
                     "reference": ["2"] * n, "verifier": ['{"type": "math_exact"}'] * n,
                     "difficulty": pa.array([None] * n, pa.int32()), "pass_rate": pa.array([None] * n, pa.float64())})


def _body(disk: Disk):
    def body(config: Cfg, inputs, outputs):
        disk.maybe_fill("before_write")
        if config.payload == "checkpoint":
            torch.save({"w": torch.randn(250_000)}, outputs["out"].path("model.pt"))
        else:
            outputs["out"].write_table(_rows(1000))
        disk.maybe_fill("before_commit")        # the payload is written; another process fills the disk
    return body


def _spec(disk: Disk, kind: str) -> StageSpec:
    return StageSpec(name="filler", config=Cfg, inputs={}, outputs={"out": kind}, body=_body(disk),
                     package="compass.store")


@pytest.mark.parametrize("payload,kind", [("table", "prompts"), ("checkpoint", "checkpoint")])
@pytest.mark.parametrize("when", ["before_write", "before_commit"])
def test_disk_full_while_writing_or_committing(disk: Disk, payload: str, kind: str, when: str, tmp_path: Path):
    store = ArtifactStore(str(disk.path / "store"), cache_dir=tmp_path / "cache")
    spec = _spec(disk, kind)
    before = execute(StageSpec(name="small", config=Cfg, inputs={}, outputs={"out": "prompts"}, body=_body(disk),
                               package="compass.store"), Cfg(), {}, store, run_name="small")   # fits: committed
    disk.fill_at = when
    with pytest.raises(ArtifactError) as e:
        execute(spec, Cfg(payload=payload), {}, store, run_name="filler_run")
    msg = str(e.value)
    assert "\n" not in msg and "filler_run" in msg and "no space left" in msg.lower(), msg
    assert store.uri(kind, "out", "") in msg, msg
    versions = {m.version for m in store.list(kind)}
    assert versions == ({before.version} if kind == "prompts" else set())
    for v in (Path(store.root_path) / kind / "out").glob("[0-9a-f]*"):
        if v.name not in versions:       # the failed run's version: no manifest, half-written or whole
            assert not (v / "manifest.json").exists() and not list(v.glob(".manifest.tmp-*")), list(v.iterdir())
            assert not list(v.glob("data-*/*")), list(v.rglob("*"))          # its payload was removed
    disk.free()
    # The store is still usable: what was there reads, and the same run now commits.
    assert store.open(before.outputs["out"]).read_table().num_rows == 1000
    ok = execute(spec, Cfg(payload=payload), {}, store, run_name="filler_run")
    assert ok.status == "ran"
    store.open(ok.outputs["out"]).local_dir(fresh=True)
    store.gc(grace_s=0)        # and the failed attempt's leftovers go
    for v in (Path(store.root_path) / kind / "out").glob("[0-9a-f]*"):
        assert sorted(p.name for p in v.iterdir()) == sorted(["manifest.json",
                                                              store.get(kind, "out", v.name).manifest.payload_dir])
