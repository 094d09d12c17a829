"""Reasoning RL on a Ray cluster the run did not start: a head and a second node started with the ``ray`` CLI on
this machine (2 CPUs each, the second with its own resources), the run in a subprocess with ``RAY_ADDRESS`` set.
The fsdp trainer's two ranks are placed ``STRICT_SPREAD``, so rank 0 and rank 1 live on different nodes and join
over gloo through rank 0's node address; two Ray rollout workers asking for one CPU each generate, so while the
run steps the ranks and workers hold all 4 of the cluster's CPUs (the config's resources reach Ray). The same
run with one in-process rank gives the same samples, rewards and update metrics (to 1e-4 relative: the ranks
add their rows' gradients in another order)."""
from __future__ import annotations

import os
import subprocess
import tempfile
import textwrap

import pytest

from tests.compass.rl.ray_cli import PORT_FLAGS, RAY_CLI, REPO, _free_ports, _stop_head, run_driver

# Its own xdist group, beside the in-process Ray group: the CLI's cluster takes every port from flags (free ports)
# and its workers' ports from ranges outside Ray's default 10002-19999, so it never meets a local Ray's ports.
pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.xdist_group("ray-cli")]

DRIVER = textwrap.dedent('''
    import json
    import torch
    from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
    from compass.rl.config import RLConfig
    from compass.rl.sampling.prompt_data import RLPrompt
    from compass.rl.engine import train
    import ray
    import ray._private.state as ray_state

    def main():
        torch.set_num_threads(1)                  # the in-process rank computes as a rank actor does
        tok = build_tokenizer("")
        texts = ["1+1=?", "What is 12 times 7?", "Sort 3, 1, 2.", "hi", "Name a prime number."]
        prompts = [RLPrompt(f"p{i}", t, "x", json.dumps({"type": "test"}), "math", "a") for i, t in enumerate(texts)]
        def cfg(ranks):
            return RLConfig(steps=2, checkpoint_every=0, sampling={"prompts_per_step": 3, "group_size": 2},
                            rollout={"max_new_tokens": 6, "workers": 2, "actor_resources": {"num_cpus": 1}},
                            trainer={"lr": 1e-2, "backend": {"kind": "fsdp", "ranks": ranks, "cpus_per_rank": 1,
                                                             "threads_per_rank": 1, "placement": "STRICT_SPREAD"}})
        seen = []

        def on_step(step, row, model):
            alive = [a for a in ray_state.actors().values() if a["State"] == "ALIVE"]
            ranks = [a["Address"]["NodeID"] for a in alive if a["ActorClassName"] == "_Rank"]
            rollout = [a["Address"]["NodeID"] for a in alive if a["ActorClassName"] == "_RolloutActor"]
            seen.append({"step": step, "rank_nodes": ranks, "rollout_nodes": rollout,
                         "free_cpus": ray.available_resources().get("CPU", 0.0)})

        score = lambda v, response, ref: float(len(response) % 3 == 0)
        two = train(build_model(ModelConfig(), tok, seed=1), tok, prompts, cfg(2), score_fn=score, on_step=on_step)
        one = train(build_model(ModelConfig(), tok, seed=1), tok, prompts, cfg(1), score_fn=score)
        keys = ("reward_mean", "loss", "grad_norm", "entropy", "updated")
        print("RESULT " + json.dumps({
            "gcs": ray.get_runtime_context().gcs_address, "nodes": len([n for n in ray.nodes() if n["Alive"]]),
            "node_ids": sorted(n["NodeID"] for n in ray.nodes() if n["Alive"]),
            "cluster_cpus": ray.cluster_resources().get("CPU"),
            "seen": seen, "responses": [[r["response"] for r in res.rollouts] for res in (two, one)],
            "metrics": [[{k: m[k] for k in keys} for m in res.metrics] for res in (two, one)]}), flush=True)

    if __name__ == "__main__":
        main()
''')

# Ray refuses a second node while its loopback-only mode is on, and with it off it resolves 127.0.0.1 to this
# machine's routable address: the two nodes (one machine) talk over that address
CLUSTER = {"RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}
NODE_FLAGS = ["--node-manager-port", "--object-manager-port", "--runtime-env-agent-port",
              "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--metrics-export-port"]


def _ray_start(args: list[str], env: dict) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([str(RAY_CLI), "start", *args], env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return proc, out


# Ray gives a starting node a fixed 30 s to register with the GCS; on a slow or busy 2-core machine a node can
# miss it ("The current node timed out during startup": seen once, unloaded, on a slower machine, 2026-11-28).
# Such a start is retried once on a fresh cluster: both nodes stopped, new ports.
STARTUP_TIMEOUT = "timed out during startup"


def _start_cluster(env: dict) -> tuple[str, str, list[int], str]:
    """Start a head and a second node; ``(address or "", temp dir, process groups started, output of a failure)``."""
    temp = tempfile.mkdtemp(prefix="c2n-", dir="/tmp")
    ports = _free_ports(len(PORT_FLAGS) + len(NODE_FLAGS))
    head_ports, node_ports = ports[:len(PORT_FLAGS)], ports[len(PORT_FLAGS):]
    common = ["--num-cpus=2", "--node-ip-address=127.0.0.1", f"--object-store-memory={256 << 20}",
              "--disable-usage-stats"]
    head_workers, node_workers = ["--min-worker-port=21000", "--max-worker-port=21499"], \
        ["--min-worker-port=21500", "--max-worker-port=21999"]          # outside Ray's default 10002-19999
    head, out = _ray_start(["--head", "--include-dashboard=false", f"--temp-dir={temp}", *common, *head_workers,
                            *(f"{f}={p}" for f, p in zip(PORT_FLAGS, head_ports))], env)
    started = [head.pid]
    if head.returncode != 0:
        return "", temp, started, "head: " + out
    address = f"127.0.0.1:{head_ports[0]}"
    node, out = _ray_start([f"--address={address}", *common, *node_workers, '--resources={"second_node": 1}',
                            *(f"{f}={p}" for f, p in zip(NODE_FLAGS, node_ports))], env)
    started.append(node.pid)
    return (address, temp, started, "") if node.returncode == 0 else ("", temp, started, "node: " + out)


def _stop_cluster(temp: str, started: list[int]) -> None:
    for pid in reversed(started):
        _stop_head(pid, temp)


@pytest.fixture
def two_nodes():
    """A Ray head (2 CPUs) and a second node (2 CPUs, resource ``second_node``) on this machine; the head's address."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(CLUSTER, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    for attempt in (1, 2):
        address, temp, started, failure = _start_cluster(env)
        if address:
            break
        _stop_cluster(temp, started)
        if attempt == 1 and STARTUP_TIMEOUT in failure:
            continue
        if failure.startswith("head: "):
            pytest.skip(f"the ray CLI could not start a head here: {failure.strip().splitlines()[-1][:300]}")
        raise AssertionError(failure[-2000:])
    try:
        yield address
    finally:
        _stop_cluster(temp, started)


def test_two_ranks_on_two_nodes_train_as_one_rank(two_nodes, tmp_path):
    out = run_driver(DRIVER, two_nodes, tmp_path, CLUSTER, timeout_s=600)
    # that cluster (its GCS port; Ray names the host by its routable address), of two live nodes
    assert out["gcs"].rsplit(":", 1)[1] == two_nodes.rsplit(":", 1)[1] and out["nodes"] == 2
    assert [s["step"] for s in out["seen"]] == [0, 1]
    assert out["cluster_cpus"] == 4.0
    for s in out["seen"]:
        assert len(s["rank_nodes"]) == 2 and len(set(s["rank_nodes"])) == 2, s      # one rank on each node
        assert len(s["rollout_nodes"]) == 2 and set(s["rollout_nodes"]) <= set(out["node_ids"]), s
        assert s["free_cpus"] == 0.0, s       # 2 ranks x cpus_per_rank 1 + 2 rollout workers x num_cpus 1
    two, one = out["responses"]
    assert two == one and len(two) == 2 * 3 * 2
    m_two, m_one = out["metrics"]
    assert any(m["updated"] == 1.0 for m in m_two)
    for a, b in zip(m_two, m_one):
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-6), k
