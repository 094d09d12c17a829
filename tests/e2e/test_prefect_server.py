"""The UI path: a real Prefect server, `compass serve`, stage runs started over the REST API
(what the UI's "Run" button calls), the second one on the LATEST inputs of the first."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from compass.store.store import ArtifactStore
from tests.e2e.conftest import REPO, compass_env, write_config

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(base: str, method: str, path: str, body: dict | None = None):
    req = urllib.request.Request(base + path, method=method, data=json.dumps(body).encode() if body is not None
                                 else None, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{method} {path}: HTTP {e.code}: {e.read()[:500]!r}") from None


def _wait(pred, timeout: float, what: str, proc_logs: list[Path] = ()):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            out = pred()
            if out:
                return out
        except Exception:  # server not up yet, deployment not registered yet
            pass
        time.sleep(0.5)
    logs = "\n".join(p.read_text()[-3000:] for p in proc_logs if p.exists())
    raise AssertionError(f"timed out waiting for {what}\n{logs}")


def _stop(proc: subprocess.Popen):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_stage_runs_started_from_the_api(e2e_tmp: Path):
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = compass_env(e2e_tmp)
    env.update(PREFECT_API_URL=api, PREFECT_UI_API_URL=api, PREFECT_SERVER_API_PORT=str(port))
    store = e2e_tmp / "store"
    cfg = write_config(e2e_tmp / "c.yaml", str(store))
    server_log, serve_log = e2e_tmp / "server.log", e2e_tmp / "serve.log"
    server = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                               "--port", str(port)], env=env, cwd=e2e_tmp, start_new_session=True,
                              stdout=server_log.open("w"), stderr=subprocess.STDOUT)
    serve = None
    try:
        _wait(lambda: _api(api, "GET", "/health"), 90, "prefect server", [server_log])
        serve = subprocess.Popen([sys.executable, "-m", "compass.cli.main", "serve", "--config", str(cfg)], env=env,
                                 cwd=REPO, start_new_session=True, stdout=serve_log.open("w"),
                                 stderr=subprocess.STDOUT)
        for flow_name, dep in [("world", "world"), ("data_filter", "data-filter")]:
            d = _wait(lambda: _api(api, "GET", f"/deployments/name/{flow_name}/{dep}"), 60,
                      f"deployment {flow_name}/{dep}", [serve_log])
            run = _wait(lambda: _api(api, "POST", f"/deployments/{d['id']}/create_flow_run", {}), 30,
                        f"a flow run of {dep}", [server_log])
            state = _wait(lambda: (r := _api(api, "GET", f"/flow_runs/{run['id']}"))["state"]["type"]
                          in ("COMPLETED", "FAILED", "CRASHED") and r["state"], 180, f"{dep} run", [serve_log])
            assert state["type"] == "COMPLETED", (state, serve_log.read_text()[-3000:])
        # The stage's own logs reached Prefect.
        def stage_logged():
            logs = _api(api, "POST", "/logs/filter", {"logs": {"flow_run_id": {"any_": [run["id"]]}}, "limit": 200})
            return any(lg["name"].startswith("compass") and "data_filter" in lg["message"] for lg in logs)
        _wait(stage_logged, 30, "the stage's own log records in Prefect", [serve_log])
    finally:
        if serve is not None:
            _stop(serve)  # serve processes before the server, or they hang
        _stop(server)
    st = ArtifactStore(str(store))
    rl = st.get("prompts", "rl_prompts")
    # data_filter ran on the LATEST world outputs, without any URI given.
    assert {i.name for i in rl.manifest.inputs} == {"raw_sft", "raw_prompts", "eval_prompts", "base_ckpt"}
    assert all(i.version == st.latest_version(i.kind, i.name) for i in rl.manifest.inputs)
