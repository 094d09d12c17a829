"""Merge sweep: candidates scored on a dev suite, the best kept, a table and summary written,
and a run killed mid-sweep (SIGKILL) resumes to the same result."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
from pydantic import ValidationError

from compass.lm.model_factory import load_checkpoint
from compass.store.store import ArtifactStore
from stages.merge import stage as merge
from stages.merge import sweep as sw
from stages.merge.config import MergeConfig, SweepConfig
from tests.helpers import commit_checkpoint, commit_table

SWEEP = dict(methods=["ties", "task_arithmetic"], thinking_weights=[0.3, 0.7], dev_per_suite=3, max_new_tokens=4,
             thinking_domains=["math"], domain_domains=["ecommerce"])
CFG = MergeConfig(sweep=SweepConfig(**SWEEP))


def _moved(model, seed: int, scale: float = 0.02):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return model


def _fill(store: ArtifactStore, world_arts) -> dict:
    """base (the world's), thinking and domain (base + a random task vector each) and dev (the world's RL prompts)."""
    d = world_arts["base"].local_dir()
    arts = {"base": commit_checkpoint(store, "base_ckpt", *load_checkpoint(d))}
    for slot, seed in (("thinking", 1), ("domain", 2)):
        model, tok = load_checkpoint(d)
        arts[slot] = commit_checkpoint(store, f"{slot}_ckpt", _moved(model, seed), tok)
    arts["dev"] = commit_table(store, "prompts", "rl_prompts", world_arts["raw_prompts"].read_table())
    return arts


@pytest.fixture(scope="module")
def sweep_world(tmp_path_factory, world_arts):
    store = ArtifactStore(str(tmp_path_factory.mktemp("merge_sweep") / "a"))
    return store, _fill(store, world_arts)


def _sd(art):
    return load_checkpoint(art.local_dir())[0].state_dict()


def test_sweep_scores_candidates_and_keeps_the_best(sweep_world, tmp_path, monkeypatch):
    monkeypatch.setenv("COMPASS_STATE_DIR", str(tmp_path / "state"))
    store, arts = sweep_world
    merges = []
    run_mergekit = merge.run_mergekit
    monkeypatch.setattr(merge, "run_mergekit", lambda *a: merges.append(a[0]) or run_mergekit(*a))
    res = merge.run(CFG, arts, store, output_names={"checkpoint": "thinking_base", "sweep": "merge_sweep"})
    assert len(merges) == 4          # one merge per candidate: the winner's is kept, not merged again
    ck, table = store.open(res.outputs["checkpoint"]), store.open(res.outputs["sweep"])
    rows = table.read_table().to_pylist()
    names = ["thinking (parent)", "domain (parent)", "ties w=0.30 d=0.70", "ties w=0.70 d=0.70",
             "task_arithmetic w=0.30", "task_arithmetic w=0.70"]
    assert [r["candidate"] for r in rows[::5]] == names
    assert [r["suite"] for r in rows[:5]] == ["ecommerce", "math", "thinking_home", "domain_home", "mean"]
    assert all(r["prompts"] == 3 for r in rows if r["suite"] in ("math", "ecommerce"))
    assert {r["method"] for r in rows[:10]} == {"parent"} and rows[0]["thinking_weight"] is None
    ta = [r for r in rows if r["method"] == "task_arithmetic"]
    assert all(r["density"] is None for r in ta) and {r["domain_weight"] for r in ta} == {0.7, 0.3}
    selected = {r["candidate"] for r in rows if r["selected"]}
    ex = ck.manifest.extra
    assert selected == {ex["selected"]} and sum(r["selected"] for r in rows) == 5
    assert ex["candidates"] == 4 and ex["resumed_candidates"] == 0 and ex["dev_prompts"] == 6
    assert set(ex["dev_margins"]) == {"thinking", "domain", "min"}
    # the rule, recomputed from the table: largest smallest margin, then the mean, then the earliest
    score = {(r["candidate"], r["suite"]): r["score"] for r in rows}
    key = [(min(score[n, "thinking_home"] - score["thinking (parent)", "thinking_home"],
                score[n, "domain_home"] - score["domain (parent)", "domain_home"]), score[n, "mean"], -i)
           for i, n in enumerate(names[2:])]
    assert names[2 + max(range(4), key=lambda i: tuple(round(x, 9) for x in key[i]))] == ex["selected"]
    summary = (ck.local_dir() / "summary.md").read_text()
    assert "**selected**" in summary and ex["selected"] in summary and "Selected:" in summary
    # the kept weights are those of a plain merge with the selected settings
    one = MergeConfig(method=ex["selected_method"], thinking_weight=ex["selected_thinking_weight"],
                      domain_weight=ex["selected_domain_weight"], density=ex["selected_density"] or 0.7)
    single = store.open(merge.run(one, {k: v for k, v in arts.items() if k != "dev"}, store).outputs["checkpoint"])
    a, b = _sd(ck), _sd(single)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob("*.pt"))   # cleared on success


def test_single_merge_writes_an_empty_sweep_table(sweep_world):
    store, arts = sweep_world
    res = merge.run(MergeConfig(), arts, store)           # dev given, no sweep: nothing is scored
    assert store.open(res.outputs["sweep"]).read_table().num_rows == 0
    assert store.open(res.outputs["checkpoint"]).manifest.extra["method"] == "ties"


def test_sweep_without_dev_is_refused(sweep_world):
    store, arts = sweep_world
    with pytest.raises(merge.StageInputError, match="give the 'dev' input"):
        merge.run(CFG, {k: v for k, v in arts.items() if k != "dev"}, store)


def test_dev_without_a_parents_home_is_refused(sweep_world):
    store, arts = sweep_world
    cfg = MergeConfig(sweep=SweepConfig(**{**SWEEP, "domain_domains": ["general", "instruction"]}))
    with pytest.raises(ValueError, match=r"no prompts in the domain parent's home domains \['general'"):
        merge.run(cfg, arts, store)


def test_candidates_and_dev_draw():
    cfg = MergeConfig(density=0.5, sweep=SweepConfig(thinking_weights=[0.6], densities=[0.4, 0.8]))
    assert [c.name for c in sw.candidates(cfg)] == ["ties w=0.60 d=0.40", "ties w=0.60 d=0.80",
                                                     "task_arithmetic w=0.60", "dare_ties w=0.60 d=0.40",
                                                     "dare_ties w=0.60 d=0.80"]
    c = sw.candidates(cfg)[0].merge_config(cfg)
    assert (c.method, c.thinking_weight, c.domain_weight, c.density, c.sweep) == ("ties", 0.6, 0.4, 0.4, None)
    rows = [{"id": f"{d}{i}", "domain": d, "task": t, "prompt": "p", "reference": "r", "verifier": "{}",
             "difficulty": 1, "language": "en"} for d, t in (("math", "arithmetic"), ("math", "math_word"),
                                                              ("ecommerce", "brand"), ("qa", "qa"))
            for i in range(10)]
    sweep = SweepConfig(dev_per_suite=4, thinking_domains=["math"], domain_domains=["ecommerce"])
    dev = sw.draw_dev(rows, sweep)
    assert len(dev) == 12 and {r["task"] for r in dev} == {"arithmetic", "math_word", "brand"}
    assert dev == sw.draw_dev(rows, sweep) != sw.draw_dev(rows, sweep.model_copy(update={"seed": 1}))
    assert "language" not in dev[0]


def test_candidates_with_domain_weights():
    """domain_weights: every thinking weight x every domain weight (they need not sum to 1)."""
    cfg = MergeConfig(density=0.5, sweep=SweepConfig(methods=["task_arithmetic", "ties"], thinking_weights=[1.0, 0.5],
                                                     domain_weights=[1.0, 0.5]))
    cands = sw.candidates(cfg)
    assert [(c.method, c.thinking_weight, c.domain_weight) for c in cands] == [
        ("task_arithmetic", 1.0, 1.0), ("task_arithmetic", 1.0, 0.5), ("task_arithmetic", 0.5, 1.0),
        ("task_arithmetic", 0.5, 0.5), ("ties", 1.0, 1.0), ("ties", 1.0, 0.5), ("ties", 0.5, 1.0), ("ties", 0.5, 0.5)]
    # the domain weight is in the name only when it is not 1 - w (so names stay unique)
    assert [c.name for c in cands][:4] == ["task_arithmetic w=1.00 dw=1.00", "task_arithmetic w=1.00 dw=0.50",
                                          "task_arithmetic w=0.50 dw=1.00", "task_arithmetic w=0.50"]
    assert len({c.name for c in cands}) == len(cands)
    m = cands[0].merge_config(cfg)
    assert (m.thinking_weight, m.domain_weight, m.sweep) == (1.0, 1.0, None)
    rows = sw.table_rows({h: {"domains": {}, "home": {"thinking": 0, "domain": 0, "mean": 0}} for h in sw.HOMES},
                         [(cands[1], {"domains": {}, "home": {"thinking": 0, "domain": 0, "mean": 0}})], 0, cfg.sweep)
    assert {(r["thinking_weight"], r["domain_weight"]) for r in rows if r["method"] != "parent"} == {(1.0, 0.5)}
    # without domain_weights: one candidate per thinking weight, domain 1 - w (unchanged)
    plain = sw.candidates(MergeConfig(sweep=SweepConfig(methods=["task_arithmetic"], thinking_weights=[0.3, 0.7])))
    assert [(c.thinking_weight, c.domain_weight, c.name) for c in plain] == [
        (0.3, 0.7, "task_arithmetic w=0.30"), (0.7, 0.3, "task_arithmetic w=0.70")]


def test_selection_rule():
    parents = {"thinking": {"home": {"thinking": 0.8, "domain": 0.1}}, "domain": {"home": {"thinking": 0.1, "domain": 0.6}}}

    def res(t, d):
        home = {"thinking": t, "domain": d, "mean": (t + d) / 2}
        return {"home": home, "margins": sw.margins(home, parents)}
    scored = [(None, res(0.85, 0.40)),   # min margin -0.20
              (None, res(0.70, 0.58)),   # -0.10 (best)
              (None, res(0.75, 0.50)),   # -0.10, lower mean than above? 0.625 vs 0.64 -> loses
              (None, res(0.70, 0.58))]   # equal to #1: the earlier wins
    assert sw.select(scored) == 1
    assert scored[1][1]["margins"] == pytest.approx({"thinking": -0.1, "domain": -0.02, "min": -0.1})


def test_config_validation():
    for bad in ({"thinking_weights": [0.0, 0.5]}, {"thinking_weights": [1.0]}, {"thinking_weights": [0.5, 0.5]},
                {"methods": []}, {"methods": ["slerp"]}, {"densities": [0.0]},
                {"thinking_domains": ["math"], "domain_domains": ["math"]}, {"dev_per_suite": 0},
                {"domain_weights": []}, {"domain_weights": [0.0]}, {"domain_weights": [-1.0]},
                {"domain_weights": [1.0, 1.0]}, {"domain_weights": [float("nan")]}, {"domain_weights": [11.0]},
                {"thinking_weights": [0.0], "domain_weights": [1.0]}, {"thinking_weights": [1.5]}):
        with pytest.raises(ValidationError):
            SweepConfig(**bad)
    # with domain weights, thinking weights may reach or pass 1 (task vectors added, not interpolated)
    ok = SweepConfig(thinking_weights=[1.0, 1.5], domain_weights=[0.5, 1.0])
    assert (ok.thinking_weights, ok.domain_weights) == ([1.0, 1.5], [0.5, 1.0])
    assert SweepConfig().domain_weights is None
    with pytest.raises(ValidationError):
        MergeConfig(sweep={"thinking_weigths": [0.5]})
    assert MergeConfig(sweep={}).sweep.methods == ["ties", "task_arithmetic", "dare_ties"]


RUN = textwrap.dedent('''
    import json, os, signal, sys, torch
    torch.set_num_threads(1)
    from compass.store.store import ArtifactStore
    from stages.merge import stage as merge
    from stages.merge.config import MergeConfig
    root, uris, cfg, kill_at = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
    store = ArtifactStore(root)
    def hook(n, cand):
        if n == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    merge.on_candidate_scored = hook
    res = merge.run(MergeConfig(**cfg), {k: store.open(u) for k, u in uris.items()}, store)
    print(json.dumps(res.outputs))
''')


def test_resume_after_sigkill_equals_an_uninterrupted_run(tmp_path, world_arts):
    script = tmp_path / "run.py"
    script.write_text(RUN)
    cfg = json.dumps(CFG.model_dump(mode="json"))

    filled: dict[str, dict] = {}

    def run(tag, kill_at):
        store = ArtifactStore(str(tmp_path / tag / "store"))
        if tag not in filled:
            filled[tag] = {k: a.uri for k, a in _fill(store, world_arts).items()}
        uris = filled[tag]
        env = {**os.environ, "COMPASS_PROGRESS": "0", "PYTHONPATH": os.getcwd(),
               "COMPASS_STATE_DIR": str(tmp_path / tag / "state")}
        p = subprocess.run([sys.executable, str(script), store.root, json.dumps(uris), cfg, str(kill_at)], env=env,
                           capture_output=True, text=True, timeout=300)
        return store, p

    store_a, whole = run("whole", -1)
    assert whole.returncode == 0, whole.stderr[-3000:]
    store_b, killed = run("killed", 2)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert not store_b.list("checkpoint", "thinking_base") and not store_b.list("merge_sweep")  # nothing committed
    assert not [m for m in store_b.list() if m.producer == "merge"]
    assert list((tmp_path / "killed" / "state").rglob(merge.STATE_FILE))
    assert len(list((tmp_path / "killed" / "state").rglob("kept-*"))) == 1    # the best merge so far, kept
    store_b, resumed = run("killed", -1)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "merging it again" not in resumed.stderr          # the winner's merge was kept across the kill
    out_a, out_b = json.loads(whole.stdout.strip().splitlines()[-1]), json.loads(resumed.stdout.strip().splitlines()[-1])
    ck_a, ck_b = store_a.open(out_a["checkpoint"]), store_b.open(out_b["checkpoint"])
    assert ck_b.manifest.extra["resumed_candidates"] == 2 and ck_a.manifest.extra["resumed_candidates"] == 0
    assert ck_a.manifest.extra["selected"] == ck_b.manifest.extra["selected"]
    assert store_a.open(out_a["sweep"]).read_table().equals(store_b.open(out_b["sweep"]).read_table())
    a, b = _sd(ck_a), _sd(ck_b)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not list((tmp_path / "killed" / "state").rglob(merge.STATE_FILE))   # cleared once committed
