"""Ray clusters started with the ``ray`` CLI for tests (tests/compass/rl/test_fsdp_two_nodes.py): free ports, stopping a
node by its process group (``ray stop`` would stop every Ray on the machine, other test runs' included), and a driver
script run with ``RAY_ADDRESS``."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[3]
RAY_CLI = Path(sys.executable).parent / "ray"
PORT_FLAGS = ["--port", "--ray-client-server-port", "--dashboard-port", "--dashboard-agent-listen-port",
              "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port",
              "--node-manager-port", "--object-manager-port"]     # fixed defaults would collide with other heads


def _free_ports(k: int) -> list[int]:
    socks = []
    try:
        for _ in range(k):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _group(pgid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                out.append(p)
        except (ProcessLookupError, psutil.Error):
            pass
    return out


def _stop_head(pgid: int, temp: str) -> None:
    """SIGTERM the head's process group, SIGKILL what is left after 5 s; then any process still running out
    of the head's temp dir (one that left the group) by its pid."""
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while _group(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(temp in a for a in p.info["cmdline"] or []):
                p.kill()
        except psutil.Error:
            pass
    shutil.rmtree(temp, ignore_errors=True)


def run_driver(source: str, address: str, tmp_path: Path, ray_env: dict, timeout_s: float) -> dict:
    """``source`` run as a Python script with ``RAY_ADDRESS=address`` (and ``ray_env``) from the repository;
    the JSON of its last ``RESULT`` line. Fails with the ends of its output when it exits non-zero or prints none."""
    script = tmp_path / "driver.py"
    script.write_text(source)
    env = {**os.environ, **ray_env, "RAY_ADDRESS": address, "COMPASS_PROGRESS": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, str(script)], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=timeout_s)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert run.returncode == 0 and lines, (run.stdout[-3000:], run.stderr[-3000:])
    return json.loads(lines[-1][len("RESULT "):])
