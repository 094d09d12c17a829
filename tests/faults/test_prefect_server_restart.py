"""The Prefect server killed (SIGKILL) and started again on the same port and database while a pipeline run
against it is inside a stage. Whatever the run then does, it must finish or fail with a clear error, leave only
intact artifacts, and a re-run must reuse every one it committed."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from compass.store.store import ArtifactStore
from tests.e2e.conftest import REPO, compass_env, last_json, write_config
from tests.faults.conftest import PrefectServer

pytestmark = pytest.mark.slow

UNTIL = ["--until", "sft_longcot"]


def test_prefect_server_restarted_mid_run(tmp_path: Path):
    store = tmp_path / "store"
    cfg = write_config(tmp_path / "c.yaml", str(store))
    data = yaml.safe_load(cfg.read_text())
    data["sft_longcot"].update(steps=60, checkpoint_every=20)     # a few seconds inside the stage
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    (tmp_path / "prefect-home").mkdir()
    server = PrefectServer(tmp_path / "prefect-home", tmp_path / "server.log")
    server.start()
    env = server.env(compass_env(tmp_path))
    out, err = (tmp_path / "run.out").open("w"), (tmp_path / "run.err").open("w")
    run = subprocess.Popen([sys.executable, "-m", "compass.cli.main", "run", "--config", str(cfg), "--json", *UNTIL],
                           cwd=REPO, env=env, stdout=out, stderr=err)
    try:
        deadline = time.time() + 180
        while run.poll() is None and time.time() < deadline and not any(
                store.glob("checkpoint/thinking_ckpt/*/data-*/.attempt")):
            time.sleep(0.05)
        assert run.poll() is None, "the run ended before sft_longcot started"
        server.kill()
        down_at = time.time()
        server.start()
        restarted_in = time.time() - down_at
        code = run.wait(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        server.stop()
    stdout, stderr = (tmp_path / "run.out").read_text(), (tmp_path / "run.err").read_text()
    print(f"server down {restarted_in:.1f}s; run exit {code}\n{stderr[-3000:]}")
    if code != 0:
        errors = [ln for ln in stderr.splitlines() if ln.startswith("error")]
        assert len(errors) == 1, stderr[-3000:]
    st = ArtifactStore(str(store))
    committed = st.list()
    for m in committed:            # everything committed verifies, byte for byte
        st.get(m.kind, m.name, m.version).local_dir(fresh=True)
    names = {m.name for m in committed}
    assert {"raw_sft", "base_ckpt", "rl_prompts"} <= names
    if code == 0:
        assert "thinking_ckpt" in names
    server.start()
    try:
        again = subprocess.run([sys.executable, "-m", "compass.cli.main", "run", "--config", str(cfg), "--json",
                                *UNTIL], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    finally:
        server.stop()
    assert again.returncode == 0, again.stderr[-3000:]
    # Every stage run whose version was committed before is reused (a version moves only when the code does,
    # e.g. in a checkout edited while the test runs).
    had = {(m.name, m.version) for m in committed}
    made = {"world": "base_ckpt", "data_filter": "rl_prompts", "sft_longcot": "thinking_ckpt"}
    for s in last_json(again.stdout)["stages"]:
        assert s["status"] == ("reused" if (made[s["run_name"]], s["version"]) in had else "ran"), (s, had)
