"""The whole pipeline through `compass run`: real Prefect (ephemeral), real stages, real store."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compass.store.store import ArtifactStore
from compass.dag.pipeline import PIPELINE
from tests.e2e.conftest import REPO, compass, compass_env, last_json, write_config

pytestmark = pytest.mark.slow

ALL_RUNS = [n.run_name for n in PIPELINE]


def _statuses(result: dict) -> dict[str, str]:
    return {s["run_name"]: s["status"] for s in result["stages"]}


def test_run_then_rerun_reuses_everything(e2e_tmp: Path, shared_prefect):
    store = e2e_tmp / "store"
    cfg = write_config(e2e_tmp / "c.yaml", str(store))
    out = compass(["run", "--config", str(cfg), "--json"], e2e_tmp).stdout
    first = last_json(out)
    assert _statuses(first) == {r: "ran" for r in ALL_RUNS}
    assert "held-out accuracy of" in out and "math" in out.split("held-out accuracy of")[1]
    # the first run starts Prefect's temporary server, as `make run` does; the others talk to a running one
    second = last_json(compass(["run", "--config", str(cfg), "--json"], e2e_tmp, server=shared_prefect).stdout)
    assert _statuses(second) == {r: "reused" for r in ALL_RUNS}
    assert [s["version"] for s in second["stages"]] == [s["version"] for s in first["stages"]]
    # Every output of the pipeline is a committed artifact whose files verify.
    st = ArtifactStore(str(store))
    listed = {(m.kind, m.name) for m in st.list()}
    for n in PIPELINE:
        for name in n.outputs.values():
            assert any(nm == name for _, nm in listed), name
    for m in st.list():
        st.get(m.kind, m.name, m.version).local_dir()  # raises on any checksum mismatch
    # the evaluation scored every checkpoint the run made, each the version this run wrote
    ev = st.get("eval_results", "eval_results")
    assert set(ev.read_table().column("checkpoint").to_pylist()) == {"base", "sft_longcot", "sft_domain", "merged",
                                                                     "phase1", "model"}
    made = {n: st.get("checkpoint", n).uri for n in ("base_ckpt", "thinking_base", "ckpt_final")}
    read = {i.slot: i.uri for i in ev.manifest.inputs}
    assert (read["base"], read["merged"], read["model"]) == (made["base_ckpt"], made["thinking_base"],
                                                             made["ckpt_final"])
    assert "held-out accuracy of every checkpoint" in out
    header = next(ln for ln in out.split("held-out accuracy of every checkpoint")[1].splitlines() if "suite" in ln)
    assert header.index("base") < header.index("Long-CoT SFT") < header.index("reasoning RL") < header.index("final")

    # Starting from a stored artifact skips every stage only needed to make it, and the artifact
    # given is the one used: here the Long-CoT SFT checkpoint stands in for the merged model.
    stand_in = st.get("checkpoint", "thinking_ckpt").uri
    res = last_json(compass(["run", "--config", str(cfg), "--json", "--from-artifact",
                             f"thinking_base={stand_in}"], e2e_tmp, server=shared_prefect).stdout)
    ran = {s["run_name"]: s for s in res["stages"]}
    assert not {"merge", "sft_domain"} & set(ran)
    assert ran["sft_longcot"]["status"] == "reused"            # still planned: the GenRM's base
    assert ran["reasoning_rl"]["status"] == "ran" and ran["evaluation"]["status"] == "ran"
    r1 = st.open(ran["reasoning_rl"]["outputs"]["checkpoint"])
    assert {i.slot: i.uri for i in r1.manifest.inputs}["policy"] == stand_in
    # A provided artifact whose producer still runs (world makes other things too) is not overwritten.
    other_base = st.get("checkpoint", "domain_ckpt").uri
    res = last_json(compass(["run", "--config", str(cfg), "--json", "--until", "sft_domain", "--from-artifact",
                             f"base_ckpt={other_base}"], e2e_tmp, server=shared_prefect).stdout)
    sft_dom = st.open({s["run_name"]: s for s in res["stages"]}["sft_domain"]["outputs"]["checkpoint"])
    assert {i.slot: i.uri for i in sft_dom.manifest.inputs}["base"] == other_base


def test_sigkill_mid_stage_then_resume(e2e_tmp: Path, shared_prefect):
    """A kill inside SFT leaves no visible artifact; re-running the same config resumes SFT from its last
    saved step (not from scratch) and reuses the stages that had finished."""
    store = e2e_tmp / "store"
    sft = {"steps": 160, "batch_size": 8, "checkpoint_every": 20, "eval_every": 0}
    cfg = write_config(e2e_tmp / "c.yaml", str(store), sft_longcot=sft)
    proc = subprocess.Popen([sys.executable, "-m", "compass.cli.main", "run", "--config", str(cfg)], cwd=REPO,
                            env=shared_prefect.env(compass_env(e2e_tmp)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    payloads = store / "checkpoint" / "thinking_ckpt"
    saved = e2e_tmp / "state" / "checkpoint" / "thinking_ckpt"
    deadline = time.time() + 300
    try:
        while time.time() < deadline and proc.poll() is None:
            if list(saved.glob("*/sft_state.pt")):     # a trainer state is saved: kill inside the SFT
                break
            time.sleep(0.1)
        assert proc.poll() is None, "pipeline ended before SFT saved a state"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # The half-written SFT output is invisible; finished stages are listed.
    ls = json.loads(compass(["artifacts", "ls", "--json", "--store", str(store)], e2e_tmp).stdout)
    names = {a["name"] for a in ls}
    assert "thinking_ckpt" not in names
    assert {"base_ckpt", "sft_longcot", "rl_prompts"} <= names
    for vdir in payloads.glob("*"):
        assert not (vdir / "manifest.json").exists()

    res = last_json(compass(["run", "--config", str(cfg), "--json", "--until", "sft_longcot"], e2e_tmp,
                            server=shared_prefect).stdout)
    st = _statuses(res)
    assert st["world"] == "reused" and st["data_filter"] == "reused" and st["sft_longcot"] == "ran"
    ckpt = ArtifactStore(str(store)).open({s["run_name"]: s for s in res["stages"]}["sft_longcot"]["outputs"]
                                          ["checkpoint"])
    assert ckpt.manifest.extra["resumed_from_step"] in range(20, 160, 20), ckpt.manifest.extra
    assert not list(saved.glob("*/sft_state.pt"))          # the state is gone once the output is committed


def test_pipeline_on_s3(e2e_tmp: Path, s3_store_root, shared_prefect):
    cfg = write_config(e2e_tmp / "c.yaml", s3_store_root.root + "/e2e",
                       store_options={"endpoint_url": s3_store_root.endpoint})   # credentials: AWS_* env
    first = last_json(compass(["run", "--config", str(cfg), "--json"], e2e_tmp, server=shared_prefect).stdout)
    assert _statuses(first) == {r: "ran" for r in ALL_RUNS}
    assert first["store"].startswith("s3://")
    again = last_json(compass(["run", "--config", str(cfg), "--json", "--until", "data_filter"], e2e_tmp,
                              server=shared_prefect).stdout)
    assert set(_statuses(again).values()) == {"reused"}
    st = ArtifactStore(s3_store_root.root + "/e2e", storage_options=dict(s3_store_root.storage_options),
                       cache_dir=e2e_tmp / "verify-cache")
    report = st.get("report", "eval_report")
    assert (report.local_dir() / "report.md").read_text().strip()
