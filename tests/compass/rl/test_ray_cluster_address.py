"""The RL engine on a Ray cluster it did not start: a real head started with the ``ray`` CLI, and a 2-step run
in a subprocess with ``RAY_ADDRESS`` pointing at it (``rollout.workers=2``, a trainer actor,
``rollout.actor_resources.num_cpus=1``). The run completes; its actors live on that cluster, and while it runs
the rollout actors hold the head's 2 CPUs, which is how the resources in the config reach Ray.

The head listens on loopback only. It is stopped by signalling its own process group (it is started in a new
session): ``ray stop`` would stop every Ray on the machine, other test runs' included."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

# Its own xdist group, beside the in-process Ray group: the CLI's cluster takes every port from the flags below
# (free ports) and its workers' ports from WORKER_PORTS, outside Ray's default range, so it never meets the
# fixed ports of a local Ray; the two CLI-cluster modules share the group, one after the other.
pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.xdist_group("ray-cli")]

REPO = Path(__file__).resolve().parents[3]
RAY_CLI = Path(sys.executable).parent / "ray"
# a loopback head: its address stays 127.0.0.1 (else Ray 2.60 swaps it for the routable one, where nothing listens)
LOOPBACK = {"RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
PORT_FLAGS = ["--port", "--ray-client-server-port", "--dashboard-port", "--dashboard-agent-listen-port",
              "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port",
              "--node-manager-port", "--object-manager-port"]     # fixed defaults would collide with other heads
WORKER_PORTS = ["--min-worker-port=20000", "--max-worker-port=20999"]   # Ray's own default range: 10002-19999

DRIVER = textwrap.dedent('''
    import json, sys
    from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
    from compass.rl.config import RLConfig
    from compass.rl.sampling.prompt_data import RLPrompt
    from compass.rl.engine import train
    import ray
    import ray._private.state as ray_state

    def main():
        tok = build_tokenizer("")
        texts = ["1+1=?", "What is 12 times 7?", "Sort 3, 1, 2.", "hi", "Name a prime number."]
        prompts = [RLPrompt(f"p{i}", t, "x", json.dumps({"type": "test"}), "math", "a") for i, t in enumerate(texts)]
        cfg = RLConfig(steps=2, checkpoint_every=0, sampling={"prompts_per_step": 3, "group_size": 2},
                       rollout={"max_new_tokens": 6, "workers": 2, "actor_resources": {"num_cpus": 1}},
                       trainer={"lr": 1e-2, "actor": True})
        seen = []

        def on_step(step, row, model):      # the actors are up: where are they, what do they hold
            actors = [{"cls": a["ActorClassName"], "node": a["Address"]["NodeID"], "state": a["State"]}
                      for a in ray_state.actors().values() if a["State"] == "ALIVE"]
            seen.append({"step": step, "free_cpus": ray.available_resources().get("CPU", 0.0), "actors": actors})

        res = train(build_model(ModelConfig(), tok, seed=1), tok, prompts, cfg,
                    score_fn=lambda v, response, ref: float(len(response) % 3 == 0), on_step=on_step)
        print("RESULT " + json.dumps({
            "gcs": ray.get_runtime_context().gcs_address, "node": ray.get_runtime_context().get_node_id(),
            "cluster_cpus": ray.cluster_resources().get("CPU"), "steps": [m["step"] for m in res.metrics],
            "samples": len(res.rollouts), "seen": seen}), flush=True)

    if __name__ == "__main__":
        main()
''')


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


@pytest.fixture
def ray_head():
    """A Ray head on 127.0.0.1 with 2 CPUs, started by the ``ray`` CLI in its own session; its address."""
    temp = tempfile.mkdtemp(prefix="crc-", dir="/tmp")       # short: Ray's socket paths must fit 107 bytes
    ports = _free_ports(len(PORT_FLAGS))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # the cluster's workers import this checkout (a real cluster's image holds the project)
    env.update(LOOPBACK, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    cmd = [str(RAY_CLI), "start", "--head", "--num-cpus=2", "--include-dashboard=false", f"--temp-dir={temp}",
           "--node-ip-address=127.0.0.1", f"--object-store-memory={256 << 20}", "--disable-usage-stats", *WORKER_PORTS,
           *(f"{flag}={port}" for flag, port in zip(PORT_FLAGS, ports))]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        out, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    try:
        if proc.returncode != 0:
            last = next((ln for ln in reversed(out.splitlines()) if ln.strip()), f"exit {proc.returncode}")
            pytest.skip(f"the ray CLI could not start a head on this machine: {last.strip()[:300]}")
        yield f"127.0.0.1:{ports[0]}"
    finally:
        _stop_head(proc.pid, temp)


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


def test_engine_runs_on_a_cluster_given_by_ray_address(ray_head, tmp_path):
    out = run_driver(DRIVER, ray_head, tmp_path, LOOPBACK, timeout_s=400)
    assert out["gcs"] == ray_head and out["cluster_cpus"] == 2.0          # that cluster, not a local Ray
    assert out["steps"] == [0, 1] and out["samples"] == 2 * 3 * 2
    for seen in out["seen"]:
        classes = sorted(a["cls"] for a in seen["actors"])
        assert classes == ["_RolloutActor", "_RolloutActor", "_TrainerActor"], seen
        assert {a["node"] for a in seen["actors"]} == {out["node"]}        # the head: the cluster's one node
        assert seen["free_cpus"] == 0.0, seen     # 2 rollout actors x num_cpus 1; the trainer asks for none
