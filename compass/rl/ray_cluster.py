"""Ray for the RL engine's actors: connect to a cluster or start a loopback one, and ship models.

:func:`ensure_ray` connects to ``$RAY_ADDRESS`` when it is set, else starts a local Ray that
stays on loopback (docs/rl_ray.md):

- ``RAY_AUTH_MODE=disabled``: otherwise Ray 2.60 writes ``~/.ray/auth_token``;
- ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: on Linux Ray 2.60 turns ``_node_ip_address=
  "127.0.0.1"`` into the machine's routable address (``services.resolve_ip_for_localhost``)
  and its servers listen on every interface; with cluster mode off the node's address is
  127.0.0.1 and nothing listens outside loopback;
- ``object_store_memory`` caps the ``/dev/shm`` it takes (``$COMPASS_RAY_OBJECT_STORE_MB``,
  default 512; larger objects spill to the temp dir);
- ``_temp_dir`` short (``$COMPASS_RAY_TMP``, default ``/tmp/compass-ray-<uid>``): Ray puts
  Unix sockets under ``<temp>/session_<date>_<pid>/sockets/``, and a socket path may not
  exceed 107 bytes;
- no dashboard (nothing uses it, and it costs a process and a port).

:func:`model_payload` / :func:`model_from_payload`: a Hugging Face causal LM as plain data
(config, generation config, dtype, state dict) that an actor turns back into its own copy.

The environment variables are set when this module is imported, before ``import ray``
anywhere below it (Ray reads them at import), so import this module before ``ray``.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TMP_ENV, STORE_ENV = "COMPASS_RAY_TMP", "COMPASS_RAY_OBJECT_STORE_MB"
DEFAULT_OBJECT_STORE_MB = 512
_MAX_TEMP_DIR_LEN = 48          # + "/session_2026-01-01_00-00-00_000000_1234567/sockets/plasma_store" <= 107


def _set_local_defaults() -> None:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if not os.environ.get("RAY_ADDRESS"):       # a real cluster must see this node's routable address
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


_set_local_defaults()

import ray  # noqa: E402  (after the environment above: Ray reads it at import)


def default_temp_dir() -> str:
    return os.environ.get(TMP_ENV) or f"/tmp/compass-ray-{os.getuid()}"


def ensure_ray(num_cpus: int | None = None, *, object_store_mb: int | None = None,
               temp_dir: str | None = None) -> str:
    """Make sure this process is connected to Ray; return the cluster's GCS address.

    Idempotent: a process already connected (a driver that called this before, or a Ray
    worker) keeps its connection and the arguments are ignored. With ``$RAY_ADDRESS`` set
    it connects there (``num_cpus`` and the store size are the cluster's business);
    otherwise it starts a local loopback Ray with ``num_cpus`` logical CPUs (None: all).
    Raises RuntimeError saying what was tried when Ray cannot start or connect.
    """
    if ray.is_initialized():
        return ray.get_runtime_context().gcs_address
    _set_local_defaults()
    address = os.environ.get("RAY_ADDRESS")
    if address:
        try:
            ray.init(address=address, log_to_driver=True)
        except Exception as e:  # noqa: BLE001 - re-raised with what was tried
            raise RuntimeError(f"could not connect to the Ray cluster at RAY_ADDRESS={address!r}: {e}") from e
        return ray.get_runtime_context().gcs_address
    temp = temp_dir or default_temp_dir()
    if len(temp) > _MAX_TEMP_DIR_LEN:
        raise RuntimeError(f"Ray temp dir {temp!r} is too long ({len(temp)} > {_MAX_TEMP_DIR_LEN} characters): "
                           f"Ray's Unix socket paths under it would pass 107 bytes; set ${TMP_ENV} to a short path")
    store_mb = int(object_store_mb or os.environ.get(STORE_ENV) or DEFAULT_OBJECT_STORE_MB)
    if os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") == "0":
        # Ray was imported before this module set the variable: set the constant it read from it
        from ray._private import ray_constants
        ray_constants.ENABLE_RAY_CLUSTER = False
    os.makedirs(temp, exist_ok=True)
    try:
        ray.init(num_cpus=num_cpus, _node_ip_address="127.0.0.1", object_store_memory=store_mb << 20,
                 _temp_dir=temp, include_dashboard=False, log_to_driver=True,
                 # actors import ``compass`` (and ``stages``) from this checkout even without the editable install
                 runtime_env={"env_vars": {"PYTHONPATH": _pythonpath()}})
    except Exception as e:  # noqa: BLE001 - re-raised with what was tried
        raise RuntimeError(f"could not start a local Ray (num_cpus={num_cpus}, object store {store_mb} MiB, "
                           f"temp dir {temp}): {type(e).__name__}: {e}") from e
    return ray.get_runtime_context().gcs_address


def _pythonpath() -> str:
    rest = os.environ.get("PYTHONPATH")
    return f"{REPO_ROOT}{os.pathsep}{rest}" if rest else str(REPO_ROOT)


# -- models as plain data: compass.lm.model_payload (no Ray there: a process without Ray builds them too)
from compass.lm.model_payload import model_from_payload, model_payload  # noqa: E402,F401


@functools.lru_cache(maxsize=None)
def remote_class(cls):
    """``ray.remote(cls)``, made once per class (the rollout and trainer actors)."""
    return ray.remote(cls)


def start_actors(make, count: int, timeout_s: float, what: str) -> list:
    """Start ``count`` actors with ``make()`` and wait until every constructor has run.

    An actor that fails to build raises RuntimeError ending with its error (the remote
    traceback is the cause); actors that Ray cannot place
    within ``timeout_s`` (e.g. more CPUs requested than the cluster has) raise RuntimeError.
    Either way the actors already started are killed."""
    actors = [make() for _ in range(count)]
    try:
        ray.get([a.ready.remote() for a in actors], timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        kill_actors(actors)
        raise RuntimeError(f"{what}: {count} actor(s) not ready after {timeout_s:.0f} s (more CPUs, GPUs or "
                           f"resources asked per actor than the cluster has?); free: {ray.available_resources()}"
                           ) from None
    except ray.exceptions.RayActorError as e:
        kill_actors(actors)
        lines = [x for x in str(e).splitlines() if x.strip()]       # the last line is the constructor's error
        raise RuntimeError(f"{what}: an actor failed to start: {lines[-1] if lines else e}") from e
    except BaseException:
        kill_actors(actors)
        raise
    return actors


def kill_actors(actors) -> None:
    for a in actors:
        ray.kill(a)
