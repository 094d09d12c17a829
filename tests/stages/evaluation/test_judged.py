"""GenRM-judged evaluation suites (issue 28 item 2): the open-ended suite's samples judged by a GenRM
checkpoint in both orders, with win / tie / loss, malformed verdicts and swap consistency reported."""
from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from compass.gym.genrm_judge import GenRMJudge, Judgement, outcome
from compass.store.store import ArtifactStore
from stages.evaluation import stage as evaluation
from stages.evaluation.config import EvalConfig
from stages.evaluation.judged import judge_results, judged_summary
from stages.world.suites.title_rewrite import make_title_rewrite

pytestmark = pytest.mark.ray      # the evaluation module's Ray-marked neighbours share its worker


def test_outcome_adds_the_two_orders():
    j = lambda a, b: Judgement(a, 1.0, False, a == b, b)             # noqa: E731
    assert [outcome(j(a, b)) for a, b in [("A", "A"), ("A", "TIE"), ("TIE", "TIE"), ("A", "B"), ("B", "TIE"),
                                          ("B", "B")]] == ["win", "win", "tie", "tie", "loss", "loss"]
    assert outcome(Judgement(None, 0.0, True)) is None
    assert outcome(Judgement("B", 0.0, False)) == "loss"             # asked in one order only


def test_judged_results_and_their_summary():
    """The judge's generate answers by a fixed script per response (its text is what a GenRM would write), so
    the tallies are known: the aggregation is what is tested here; the stage test below runs a real one."""
    script = {"good": ("A", "B"), "tie": ("TIE", "TIE"), "bad": ("B", "A"), "biased": ("A", "A"), "junk": (None, "A")}

    def generate(asks: list[str]) -> list[str]:
        n = len(asks) // 2
        out = []
        for i, ask in enumerate(asks):
            key = next(k for k in script if f"<<{k}>>" in ask)
            v = script[key][0 if i < n else 1]
            out.append("no verdict here" if v is None else f"<answer>{v}</answer>")
        return out
    judge = GenRMJudge(generate, swap_check=True)
    prompts = {f"p{k}": {"prompt": "rewrite", "reference": "Clean Title", "verifier": '{"type": "title_rules"}'}
               for k in script}
    results = [{"prompt_id": f"p{k}", "suite": "ecommerce", "response": f"<<{k}>>", "score": 1.0 if k == "good" else 0.0,
                "correct": k == "good", "reason": None} for k in script]
    results.append({"prompt_id": "math1", "suite": "math", "response": "5", "score": 1.0, "correct": True,
                    "reason": None})
    judge_results(judge, results, prompts, set(prompts))
    by = {r["prompt_id"]: r for r in results}
    # "good": A first, then (swapped) B said of the reference = A for the policy: a consistent win
    assert by["pgood"]["verdict"] == "win" and by["pgood"]["consistent"] and by["pgood"]["score"] == 1.0
    assert by["ptie"]["verdict"] == "tie" and by["ptie"]["score"] == 1.0
    assert by["pbad"]["verdict"] == "loss" and by["pbad"]["reason"] == "genrm_worse"
    # "biased": A in both positions, i.e. the judge prefers whatever is first: inconsistent, a tie, reward 0
    assert by["pbiased"]["verdict"] == "tie" and by["pbiased"]["consistent"] is False and by["pbiased"]["score"] == 0
    assert by["pjunk"]["verdict"] == "malformed" and by["pjunk"]["reason"] == "genrm_malformed"
    assert by["pgood"]["rule_score"] == 1.0 and "verdict" not in by["math1"]
    s = judged_summary(results)
    assert list(s) == ["ecommerce"]
    e = s["ecommerce"]
    assert e["samples"] == 5 and (e["win"], e["tie"], e["loss"], e["malformed"]) == (0.2, 0.4, 0.2, 0.2)
    assert e["swap_consistency"] == pytest.approx(3 / 4)              # of the four well-formed pairs
    assert e["rules_agree"] == pytest.approx(4 / 5)       # rules pass only "good", the judge "good" and "tie"
    assert judge.counters()["inconsistent"] == 1


def test_the_stage_judges_the_open_ended_suite_with_a_real_checkpoint(world_arts, tmp_path):
    """A real checkpoint as the judge (the world's untrained base: it writes no verdicts, so every judged sample
    is malformed and counted so); the other suites keep their verifiers' scores."""
    store = ArtifactStore(str(tmp_path / "store"))
    titles = _suite(store, "titles", [make_title_rewrite(random.Random(i), f"title-{i}", i % 5 + 1, "en").prompt_row()
                                      for i in range(4)])
    inputs = {"model": world_arts["base"], "suites": world_arts["eval_prompts"], "suites:title_rewrite": titles,
              "genrm": world_arts["base"]}
    cfg = EvalConfig(max_new_tokens=8, genrm_max_new_tokens=8)
    result = evaluation.run(cfg, inputs, store)
    rows = store.open(result.outputs["results"]).read_table().to_pylist()
    prompts = {p["id"]: p for a in (world_arts["eval_prompts"], titles) for p in a.read_table().to_pylist()}
    judged = [r for r in rows if json.loads(prompts[r["prompt_id"]]["verifier"])["type"] == "title_rules"]
    other = [r for r in rows if r not in judged]
    assert judged and other
    assert all(r["verdict"] in ("win", "tie", "loss", "malformed") for r in judged)
    assert all(r["verdict"] is None and r["rule_score"] is None for r in other)
    malformed = [r for r in judged if r["verdict"] == "malformed"]
    assert all(r["score"] == 0.0 and r["reason"] == "genrm_malformed" for r in malformed)
    assert all(r["rule_score"] is not None for r in judged)
    rep = store.open(result.outputs["report"])
    summary = json.loads((rep.local_dir() / "summary.json").read_text())
    assert summary["genrm"]["asked"] == len(judged) and summary["genrm"]["malformed"] == len(malformed)
    e = summary["judged"]["title_rewrite"]
    assert e["samples"] == len(judged) and e["malformed"] == pytest.approx(len(malformed) / len(judged))
    assert "Judged by the GenRM" in (rep.local_dir() / "report.md").read_text()
    assert "Judged by the GenRM" in (rep.local_dir() / "summary.md").read_text()
    assert rep.manifest.extra["genrm"] == world_arts["base"].uri


def _suite(store: ArtifactStore, name: str, rows: list[dict]):
    from tests.compass.store.test_store import META
    w = store.begin("prompts", name, "v1", inputs=[], **META)
    w.write_table(pa.Table.from_pylist(rows))
    return w.commit()


def test_a_suite_only_the_judge_can_score_needs_the_judge(world_arts, tmp_path):
    store = ArtifactStore(str(tmp_path / "store"))
    rows = world_arts["eval_prompts"].read_table().to_pylist()[:3]
    for r in rows:
        r["verifier"] = '{"type": "genrm"}'
    suites = _suite(store, "judged_only", rows)
    with pytest.raises(ValueError, match="scored by the learned judge .*no genrm checkpoint is an input"):
        evaluation.run(EvalConfig(max_new_tokens=4), {"model": world_arts["base"], "suites": suites}, store)
