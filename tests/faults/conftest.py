"""A real Prefect server on 127.0.0.1 that a fault test can kill and start again on the same port and database."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


class PrefectServer:
    def __init__(self, home: Path, log: Path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.home, self.log, self.proc = home, log, None
        self.api = f"http://127.0.0.1:{self.port}/api"

    def env(self, base: dict) -> dict:
        """``base`` pointed at this server (its database lives in ``home``)."""
        return {**base, "PREFECT_HOME": str(self.home), "PREFECT_API_URL": self.api, "PREFECT_UI_API_URL": self.api,
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}

    def start(self, timeout: float = 90) -> None:
        with self.log.open("a") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                          "--port", str(self.port)], env=self.env(dict(os.environ)),
                                         cwd=self.home.parent, start_new_session=True, stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while not self.healthy():
            assert self.proc.poll() is None and time.time() < deadline, self.log.read_text()[-3000:]
            time.sleep(0.25)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.api + "/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the server and everything it started (a crash, not a shutdown)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
