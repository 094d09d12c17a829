"""SIGKILL of every stage of the pipeline mid-run, then resume: one `compass run` killed once inside each
stage in DAG order, re-run after each kill, compared at the end with an uninterrupted run of the same config.
After each kill the killed stage's output is invisible and every earlier one is listed; each resumable stage
goes on from its saved state (SFT from a saved step, not from scratch), and the state is deleted once the
output is committed."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compass.dag.pipeline import PIPELINE
from compass.dag.stages import stage_module
from compass.store.store import ArtifactStore
from tests.e2e.conftest import REPO, compass_env, last_json, write_config
from tests.faults.conftest import PrefectServer  # noqa: F401  (the type of SERVER)

pytestmark = pytest.mark.slow

# Long enough that every training stage saves a resumable state before it ends (SFT every 4 of 12
# steps, GenRM's GRPO and both RL phases after each of their steps, merge after each candidate).
KILL_OVERRIDES = {
    "sft_longcot": {"steps": 48, "checkpoint_every": 4},       # ~0.06 s a step here: room to be caught
    "sft_domain": {"steps": 48, "checkpoint_every": 4},
    "genrm": {"grpo": {"steps": 6, "checkpoint_every": 1, "sampling": {"prompts_per_step": 2, "group_size": 2},
                       "rollout": {"max_new_tokens": 16}}},
    "reasoning_rl": {"steps": 3, "checkpoint_every": 1},
    "domain_rl": {"steps": 3, "checkpoint_every": 1},
}
# Stages that keep resumable state: killed once a state is saved, so the re-run must go on from it.
RESUMABLE = {"sft_longcot", "sft_domain", "merge", "genrm", "reasoning_rl", "domain_rl"}


def _config(tmp: Path, store: Path) -> Path:
    cfg = write_config(tmp / f"{store.name}.yaml", str(store))
    import yaml
    data = yaml.safe_load(cfg.read_text())
    for run, over in KILL_OVERRIDES.items():
        _merge(data[run], over)
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    return cfg


def _merge(into: dict, over: dict) -> None:
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


SERVER: PrefectServer | None = None      # one real server for every run here: no ephemeral start per run


def _env(tmp: Path) -> dict:
    # One thread: the only setting in which two runs are equal to the byte (docs/pipeline.md).
    env = {**compass_env(tmp), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return SERVER.env(env) if SERVER is not None else env


@pytest.fixture
def prefect_server(shared_prefect):
    global SERVER
    SERVER = shared_prefect
    try:
        yield SERVER
    finally:
        SERVER = None


def _compass(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "compass.cli.main", *args], cwd=REPO, env=_env(tmp),
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"compass {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-5000:]}"
    return proc


def _first_output(node) -> tuple[str, str]:
    slot, name = next(iter(node.outputs.items()))
    return stage_module(node.stage).SPEC.outputs[slot], name


def _running(store: Path, state: Path, node) -> bool:
    """The stage is inside its body: its output's payload is being written (and, for a stage with
    resumable state, a state has been saved)."""
    kind, name = _first_output(node)
    writing = any(store.glob(f"{kind}/{name}/*/data-*/.attempt"))
    if node.run_name in RESUMABLE:     # SFT saves its base eval, GenRM its warm start first: wait for the
        # trainer's own state (GenRM: its GRPO phase's RL state)
        pattern = {"sft": "sft_state.pt", "genrm": "rl_state.pt"}.get(node.stage, "*.pt")
        return writing and any(p.is_file() for p in (state / kind / name).rglob(pattern))
    return writing


def test_sigkill_every_stage_then_resume_to_the_same_result(tmp_path: Path, prefect_server):
    ref_tmp, run_tmp = tmp_path / "ref", tmp_path / "killed"
    ref_tmp.mkdir(), run_tmp.mkdir()
    ref_store, store = ref_tmp / "store", run_tmp / "store"
    state = run_tmp / "state"
    _compass(["run", "--config", str(_config(ref_tmp, ref_store)), "--json"], ref_tmp)
    cfg = _config(run_tmp, store)

    killed_in = []
    for node in PIPELINE:
        proc = subprocess.Popen([sys.executable, "-m", "compass.cli.main", "run", "--config", str(cfg)], cwd=REPO,
                                env=_env(run_tmp), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            deadline = time.time() + 180
            while proc.poll() is None and time.time() < deadline and not _running(store, state, node):
                time.sleep(0.01)
            assert proc.poll() is None, f"the run ended before {node.run_name} was caught running"
            os.killpg(proc.pid, signal.SIGKILL)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        killed_in.append(node.run_name)
        # Nothing the killed stage was writing is visible; everything before it is (as `compass artifacts ls`
        # says once, as the store's own listing says after every kill)
        if node.run_name == "sft_longcot":
            ls = json.loads(_compass(["artifacts", "ls", "--json", "--store", str(store)], run_tmp).stdout)
        else:
            ls = [{"name": m.name} for m in ArtifactStore(str(store)).list()]
        names = {a["name"] for a in ls}
        assert not set(node.outputs.values()) & names, (node.run_name, names)
        done = PIPELINE[:PIPELINE.index(node)]
        assert {nm for n in done for nm in n.outputs.values()} <= names, node.run_name
        kind, name = _first_output(node)
        assert not any(store.glob(f"{kind}/{name}/*/manifest.json"))
        assert not (store / kind / name / "LATEST").exists()

    final = last_json(_compass(["run", "--config", str(cfg), "--json"], run_tmp).stdout)
    assert killed_in == [n.run_name for n in PIPELINE]
    assert {s["run_name"]: s["status"] for s in final["stages"]} == {
        n.run_name: ("ran" if n is PIPELINE[-1] else "reused") for n in PIPELINE}
    # Every stage run of the same version as the uninterrupted run's made the same weights and tables, byte for
    # byte. (Other payload files record timings, run ids and paths: metrics.jsonl, plots, tensorboard events,
    # summaries. A version moves only when the code does, e.g. in a checkout edited while the test runs.)
    ref_st, st = ArtifactStore(str(ref_store)), ArtifactStore(str(store))
    ref_latest = {(m.kind, m.name): m for m in ref_st.list() if ref_st.latest_version(m.kind, m.name) == m.version}
    got_latest = {(m.kind, m.name): m for m in st.list() if st.latest_version(m.kind, m.name) == m.version}
    assert got_latest.keys() == ref_latest.keys()
    differ = {}
    for key, r in ref_latest.items():
        g = got_latest[key]
        if g.version != r.version:
            continue
        rf, gf = ({f.path: f.sha256 for f in m.files if f.path.endswith((".safetensors", ".parquet"))} for m in (r, g))
        bad = sorted(set(rf) ^ set(gf) | {p for p in rf if rf[p] != gf.get(p) and
                                          not _same_table_but_store_root(ref_st, r, st, g, p)})
        if not rf and r.kind in ("checkpoint", "prompts"):                  # a checkpoint without weights: wrong
            bad.append("no weights or table")
        if bad:
            differ[key] = bad
    assert differ == {}
    # and each resumable stage went on from its saved state, not from scratch
    for run in ("sft_longcot", "sft_domain"):
        ckpt = st.get("checkpoint", next(n for n in PIPELINE if n.run_name == run).outputs["checkpoint"])
        assert ckpt.manifest.extra["resumed_from_step"] in range(4, 48, 4), (run, ckpt.manifest.extra)
    assert not list(state.rglob("sft_state.pt"))          # a stage's state is gone once its output is committed
    log_text = "\n".join(p.read_text(errors="replace") for p in sorted((run_tmp / "logs").glob("*")))
    assert "merge: resuming the sweep" in log_text
    assert log_text.count("resumed at step") >= 3       # the RL engine, in genrm's GRPO and both RL phases


def _same_table_but_store_root(ref_st: ArtifactStore, r, st: ArtifactStore, g, path: str) -> bool:
    """Two Parquet tables equal once the store root each names is the same (rows record their sources'
    URIs: the quarantine's `source`, eval_results' `model`)."""
    if not path.endswith(".parquet"):
        return False
    a = ref_st.get(r.kind, r.name, r.version).read_table(path).to_pylist()
    b = st.get(g.kind, g.name, g.version).read_table(path).to_pylist()
    def norm(rows, root):
        return [{k: v.replace(root, "<store>") if isinstance(v, str) else v for k, v in row.items()} for row in rows]
    return norm(a, ref_st.root) == norm(b, st.root)
