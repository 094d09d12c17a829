"""The whole pipeline through `compass run`: real Prefect (ephemeral), real stages, real store. (A kill inside
every stage and the resume: tests/faults/test_sigkill_every_stage.py; the pipeline on S3: tests/e2e/test_secrets.py.)"""
from __future__ import annotations

from pathlib import Path

import pytest

from compass.store.store import ArtifactStore
from compass.dag.pipeline import PIPELINE
from tests.e2e.conftest import compass, last_json, write_config
from tests.helpers import gfm_table_problems

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
    summaries = 0
    for m in st.list():
        art = st.get(m.kind, m.name, m.version)
        art.local_dir()                                # raises on any checksum mismatch
        if any(f.path == "summary.md" for f in art.manifest.files):   # what the Prefect UI renders
            summaries += 1
            assert gfm_table_problems(art.read_bytes("summary.md").decode()) == [], (m.kind, m.name)
    assert summaries >= 5                              # sft ×2, merge, genrm, rl ×2, evaluation
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
    # `compass bench recipe` reads such a store into its figures (a run of the bench takes ~25 min: its reading
    # is checked here, on this run's store)
    from compass.bench import recipe
    run = recipe.read_run(store, cfg, 1.0)
    figs = recipe.figures(run["rows"], run["thinking"], run["domain"], *run["zv"], phase1=run["trained"][0],
                          phase2=run["trained"][1])
    assert set(recipe.FIGURES) <= set(figs) and figs["merge_min_margin"] is not None
    # tiny.yaml's sampled pass covers what RL changes: mean@k of both phases, not of the SFT parents
    at_k = recipe.figures(run["rows"], run["thinking"], run["domain"], *run["zv"], measure="mean@k",
                          phase1=run["trained"][0], phase2=run["trained"][1])
    assert at_k["reasoning_rl_gain_mean_at_k"] is not None and at_k["domain_rl_gain_mean_at_k"] is not None
    assert at_k["sft_longcot_home_gain_mean_at_k"] is None
    assert run["phases"]["reasoning_rl_pool_tokens"] > 0 and run["zv"][1] > 0

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


