"""Evaluation: real generation on the base checkpoint, gym scoring, results table and report."""
from __future__ import annotations

import json
from contextlib import contextmanager

import pytest

from compass.store.store import ArtifactStore
from stages.evaluation import stage as evaluation
from stages.evaluation.config import EvalConfig
from tests.helpers import gfm_table_problems

pytestmark = pytest.mark.ray      # starts a local Ray (tests/conftest.py)

FAST = dict(max_new_tokens=12)


@pytest.fixture(scope="module")
def evaluated(world_arts, tmp_path_factory):
    store = ArtifactStore(str(tmp_path_factory.mktemp("evaluation") / "store"))
    inputs = {"model": world_arts["base"], "suites": world_arts["eval_prompts"]}
    result = evaluation.run(EvalConfig(**FAST), inputs, store)
    return store, inputs, result, {s: store.open(u) for s, u in result.outputs.items()}


def test_results_table(evaluated):
    _, inputs, result, arts = evaluated
    assert result.status == "ran"
    assert arts["results"].kind == "eval_results" and arts["report"].kind == "report"
    rows = arts["results"].read_table().to_pylist()
    prompts = inputs["suites"].read_table().to_pylist()
    assert len(rows) == len(prompts)
    assert [r["prompt_id"] for r in rows] == [p["id"] for p in prompts]
    assert {r["model"] for r in rows} == {inputs["model"].uri}
    assert {r["suite"] for r in rows} == {"math", "ecommerce"}
    for r in rows:
        assert 0.0 <= r["score"] <= 1.0 and r["correct"] == (r["score"] == 1.0)
        assert r["sample_idx"] == 0 and 0 < r["num_tokens"] <= FAST["max_new_tokens"]


def test_accuracy_is_the_mean_of_correct(evaluated):
    _, _, _, arts = evaluated
    rows = arts["results"].read_table().to_pylist()
    extra = arts["results"].manifest.extra
    for suite, acc in extra["accuracy"].items():
        sr = [r["correct"] for r in rows if r["suite"] == suite]
        assert 0.0 <= acc <= 1.0 and acc == pytest.approx(sum(sr) / len(sr))
    assert extra["overall_accuracy"] == pytest.approx(sum(r["correct"] for r in rows) / len(rows))
    assert arts["report"].manifest.extra["accuracy"] == extra["accuracy"]


def test_report_files(evaluated):
    store, inputs, result, arts = evaluated
    d = arts["report"].local_dir()
    summary = json.loads((d / "summary.json").read_text())
    assert summary["model"] == inputs["model"].uri
    assert {k: v["accuracy"] for k, v in summary["suites"].items()} == arts["results"].manifest.extra["accuracy"]
    assert set(summary["suites"]["math"]["accuracy_by_difficulty"]) == {"1", "2", "3", "4", "5"}
    md = (d / "report.md").read_text()
    for suite, s in summary["suites"].items():
        assert f"| {suite} | {s['prompts']} | {s['samples']} | {s['accuracy']:.3f} ± {s['accuracy_se']:.3f} |" in md
    # the verifiers' reasons: counted from the results table, the most frequent listed in the report
    rows = arts["results"].read_table().to_pylist()
    counted: dict = {}
    for r in rows:
        if r["reason"]:
            counted[r["reason"]] = counted.get(r["reason"], 0) + 1
    assert summary["reasons"] == counted and counted, "an untrained base model should leave reasons to list"
    assert "most frequent verifier reasons" in md
    from compass.runtime.stage_summary import stage_summary          # what the Prefect UI shows: the chart inlined
    assert "![accuracy per suite and checkpoint](data:image/png;base64," in stage_summary(result, store)
    for code, n in list(summary["reasons"].items())[:evaluation.TOP_REASONS]:
        assert f"| `{code}` | {n} |" in md


def test_accuracy_per_language_of_multilingual_suites(evaluated):
    """Each result row carries its prompt's language; a suite in several languages gets its accuracy per
    language (counted here from the rows), and a row of the report's per-language table for each."""
    _, _, _, arts = evaluated
    rows = arts["results"].read_table().to_pylist()
    by: dict = {}
    for r in rows:
        by.setdefault(r["suite"], {}).setdefault(r["language"], []).append(r["correct"])
    multi = {s: langs for s, langs in by.items() if len(langs) > 1}
    assert multi, "the world's e-commerce prompts come in several languages"
    d = arts["report"].local_dir()
    summary = json.loads((d / "summary.json").read_text())
    md, ui = (d / "report.md").read_text(), (d / "summary.md").read_text()
    assert "## Per language" in md and "### Per language" in ui
    for suite, langs in by.items():
        got = summary["suites"][suite]["accuracy_by_language"]
        assert got == pytest.approx({lang: sum(v) / len(v) for lang, v in langs.items()})
        for lang, v in langs.items():
            line = f"| {suite} | {lang} | {len(v)} | {sum(v) / len(v):.3f} |"
            assert (line in md) == (suite in multi), line


def test_greedy_is_deterministic_and_second_run_reuses(evaluated, tmp_path):
    store, inputs, result, arts = evaluated
    again = evaluation.run(EvalConfig(**FAST), inputs, store)
    assert again.status == "reused" and again.outputs == result.outputs
    other = ArtifactStore(str(tmp_path / "second-run"))  # a real second run, not a reuse
    rerun = evaluation.run(EvalConfig(**FAST), inputs, other)
    assert rerun.status == "ran"
    a = arts["results"].read_table().column("response").to_pylist()
    b = other.open(rerun.outputs["results"]).read_table().column("response").to_pylist()
    assert a == b


@pytest.mark.parametrize("backend,workers", [("vllm", 0), ("native", 2)])
def test_vllm_and_ray_workers_give_the_in_process_responses(evaluated, tmp_path, backend, workers):
    """The same greedy evaluation through vLLM, or on two Ray actors with half the prompts each: the same
    responses as the in-process native decoder (float sums in another order may break a near-tie: 98%)."""
    store, inputs, result, arts = evaluated
    other = ArtifactStore(str(tmp_path / backend))
    res = evaluation.run(EvalConfig(**FAST, backend=backend, workers=workers), inputs, other)
    got = other.open(res.outputs["results"]).read_table().to_pylist()
    want = {r["prompt_id"]: r["response"] for r in arts["results"].read_table().to_pylist()}
    assert len(got) == len(want)
    same = sum(r["response"] == want[r["prompt_id"]] for r in got)
    assert same >= 0.98 * len(got), f"{backend} x{workers}: {same}/{len(got)} responses as in-process native"
    summary = json.loads((other.open(res.outputs["report"]).local_dir() / "summary.json").read_text())
    assert summary["config"]["backend"] == backend and summary["config"]["workers"] == workers


def test_more_suites_as_labelled_inputs(world_arts, tmp_path):
    """``suites:LABEL`` adds a prompts table: its rows are scored as suite LABEL beside the run's suites; a
    prompt id in two suite inputs is an error naming both."""
    from tests.compass.store.test_store import write_prompts
    store = ArtifactStore(str(tmp_path / "s"))
    extra = write_prompts(store, "gsm_like", n=6)                     # ids p0..p5, no suite column
    inputs = {"model": world_arts["base"], "suites": world_arts["eval_prompts"], "suites:gsm_like": extra}
    res = evaluation.run(EvalConfig(**FAST), inputs, store)
    rows = store.open(res.outputs["results"]).read_table().to_pylist()
    assert len(rows) == world_arts["eval_prompts"].manifest.rows + 6
    assert {r["prompt_id"] for r in rows if r["suite"] == "gsm_like"} == {f"p{i}" for i in range(6)}
    summary = json.loads((store.open(res.outputs["report"]).local_dir() / "summary.json").read_text())
    assert summary["suites"]["gsm_like"]["prompts"] == 6 and "math" in summary["suites"]
    with pytest.raises(ValueError, match="prompt id 'p0' is in both .*gsm_like.* and .*twice"):
        evaluation.run(EvalConfig(**FAST), {**inputs, "suites:twice": write_prompts(store, "twice", n=2)}, store)


LM_EVAL_TASK = """task: tiny_sums
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: ["5", "7", "8"]
doc_to_target: "{{{{['5', '7', '8'].index(answer)}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


def _hand_acc(model, tok, docs) -> float:
    """lm-eval's multiple-choice acc by hand: the choice whose continuation (" " + choice after the question)
    has the highest total log-likelihood, against the target."""
    import torch
    right = 0
    for d in docs:
        ctx = tok(d["question"], add_special_tokens=False)["input_ids"]
        lls = []
        for c in ("5", "7", "8"):
            whole = tok(d["question"] + " " + c, add_special_tokens=False)["input_ids"]
            cont = whole[len(ctx):]
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([whole])).logits[0].float(), -1)
            lls.append(sum(float(logp[len(ctx) - 1 + i, t]) for i, t in enumerate(cont)))
        right += ["5", "7", "8"][lls.index(max(lls))] == d["answer"]
    return right / len(docs)


def test_lm_eval_tasks_beside_the_gym(world_arts, tmp_path):
    """An lm-evaluation-harness task (a local YAML and JSON file: offline) on the evaluated checkpoint: its
    acc equals the multiple-choice rule computed by hand, is stored in lm_eval.json, summary.json, the report
    and the manifest; a changed task file is a new version; an unknown task is a clear error."""
    from compass.lm.model_factory import load_checkpoint
    from stages.evaluation.config import LmEvalConfig
    docs = [{"question": "2+3=", "answer": "5"}, {"question": "7+1=", "answer": "8"},
            {"question": "4+4=", "answer": "8"}, {"question": "9-2=", "answer": "7"},
            {"question": "1+4=", "answer": "5"}, {"question": "3+5=", "answer": "8"}]
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tasks / "tiny_sums.yaml").write_text(LM_EVAL_TASK.format(data=data))
    store = ArtifactStore(str(tmp_path / "s"))
    inputs = {"model": world_arts["base"], "suites": world_arts["eval_prompts"]}
    cfg = EvalConfig(**FAST, lm_eval=LmEvalConfig(tasks=["tiny_sums"], include_path=str(tasks)))
    res = evaluation.run(cfg, inputs, store)
    rep = store.open(res.outputs["report"])
    got = json.loads((rep.local_dir() / "lm_eval.json").read_text())
    model, tok = load_checkpoint(world_arts["base"].local_dir())
    assert got == {"model": {"tiny_sums": {"acc,none": pytest.approx(_hand_acc(model, tok, docs)), "samples": 6}}}
    assert json.loads((rep.local_dir() / "summary.json").read_text())["lm_eval"] == got
    assert rep.manifest.extra["lm_eval"] == got
    assert f"| tiny_sums | acc,none | {got['model']['tiny_sums']['acc,none']:.3f} |" in \
        (rep.local_dir() / "report.md").read_text()
    (tasks / "tiny_sums.yaml").write_text(LM_EVAL_TASK.format(data=data).replace("acc", "acc_norm"))
    changed = EvalConfig(**FAST, lm_eval=LmEvalConfig(tasks=["tiny_sums"], include_path=str(tasks)))
    assert changed.lm_eval.include_digest != cfg.lm_eval.include_digest
    with pytest.raises(ValueError, match=r"unknown task\(s\) \['nope'\]"):
        evaluation.run(EvalConfig(**FAST, lm_eval=LmEvalConfig(tasks=["nope"], include_path=str(tasks))), inputs,
                       store)


def test_several_samples_per_prompt(world_arts, tmp_path):
    store = ArtifactStore(str(tmp_path / "s"))
    cfg = EvalConfig(samples_per_prompt=2, temperature=1.0, max_new_tokens=4)
    res = evaluation.run(cfg, {"model": world_arts["base"], "suites": world_arts["eval_prompts"]}, store)
    rows = store.open(res.outputs["results"]).read_table().to_pylist()
    n = world_arts["eval_prompts"].manifest.rows
    assert len(rows) == 2 * n
    assert sorted({r["sample_idx"] for r in rows}) == [0, 1]


def test_scoring_path_with_known_answers(world_arts, tmp_path, monkeypatch):
    """The generation is replaced by the world's teacher (right) or a wrong answer, so the
    stage's scoring and accounting are checked against known accuracies."""
    prompts = {r["prompt"]: r for r in world_arts["eval_prompts"].read_table().to_pylist()}

    def teacher(model, tok, batch, *, n, max_new_tokens, temperature, seed):
        out = []
        for p in batch:
            r = prompts[p]
            right = r["reference"] if r["domain"] == "ecommerce" else f"<think>ok.</think>{r['reference']}"
            wrong = "Z" if r["domain"] == "ecommerce" else "<think>ok.</think>nope"
            text = right if (r["difficulty"] or 1) <= 2 or r["domain"] == "ecommerce" else wrong
            out.append([{"text": text, "ids": tok(text, add_special_tokens=False)["input_ids"]}] * n)
        return out

    @contextmanager
    def fixed(backend, model, tok, workers=0):
        yield teacher

    monkeypatch.setattr(evaluation, "open_sampler", fixed)   # the generation it scores
    store = ArtifactStore(str(tmp_path / "s"))
    res = evaluation.run(EvalConfig(), {"model": world_arts["base"], "suites": world_arts["eval_prompts"]}, store)
    extra = store.open(res.outputs["results"]).manifest.extra
    assert extra["accuracy"]["ecommerce"] == 1.0
    n_math = sum(1 for r in prompts.values() if r["domain"] == "math")
    n_easy = sum(1 for r in prompts.values() if r["domain"] == "math" and r["difficulty"] <= 2)
    assert extra["accuracy"]["math"] == pytest.approx(n_easy / n_math)
    summary = json.loads((store.open(res.outputs["report"]).local_dir() / "summary.json").read_text())
    by_d = summary["suites"]["math"]["accuracy_by_difficulty"]
    assert by_d["1"] == by_d["2"] == 1.0 and by_d["3"] == by_d["4"] == by_d["5"] == 0.0


def test_greedy_with_several_samples_is_a_config_error():
    with pytest.raises(ValueError, match="temperature"):
        EvalConfig(samples_per_prompt=4, temperature=0.0)


def _known_answers(monkeypatch, calls_per_checkpoint: int = 1) -> list[str]:
    """Swap the generation for known answers: the first checkpoint evaluated (its first ``calls_per_checkpoint``
    calls) gets every prompt wrong, later ones the first two samples of each e-commerce prompt right. Returns the
    list of calls (checkpoint URIs)."""
    real = evaluation.generate_and_score
    calls = []

    def known(model, tok, rows, uri, **kw):
        out = real(model, tok, rows[:0], uri, **kw)   # the real path on no rows: types and signature stay true
        calls.append(uri)
        right = len(calls) > calls_per_checkpoint
        for r in rows:
            for k in range(kw["samples_per_prompt"]):
                ok = right and r["domain"] == "ecommerce" and k < 2
                out.append({"model": uri, "suite": r.get("suite") or r["domain"], "prompt_id": r["id"],
                            "sample_idx": k, "response": "\\boxed{A}" if ok else f"\\boxed{{{k}}}", "score": float(ok),
                            "correct": ok, "reason": None if ok else "wrong_answer",
                            "difficulty": r.get("difficulty"), "num_tokens": 3, "finished": True})
        return out

    monkeypatch.setattr(evaluation, "generate_and_score", known)
    return calls


def test_every_checkpoint_in_one_table_with_the_change_each_stage_made(world_arts, tmp_path, monkeypatch):
    """Base and final checkpoints (the same weights here); the generation is swapped for known answers:
    the base gets every prompt wrong, the final every e-commerce prompt right, so the table's changes are
    known. With 4 samples per prompt the pass@k / maj@k table is written too."""
    calls = _known_answers(monkeypatch)
    store = ArtifactStore(str(tmp_path / "s"))
    cfg = EvalConfig(samples_per_prompt=4, temperature=1.0, max_new_tokens=4)
    res = evaluation.run(cfg, {"model": world_arts["base"], "base": world_arts["base"],
                               "suites": world_arts["eval_prompts"]}, store)
    assert len(calls) == 2                                   # base first, the evaluated one last
    rows = store.open(res.outputs["results"]).read_table().to_pylist()
    assert [r["checkpoint"] for r in rows[:1]] == ["base"] and rows[-1]["checkpoint"] == "model"
    extra = store.open(res.outputs["results"]).manifest.extra
    assert extra["checkpoints"]["base"]["ecommerce"] == 0.0
    assert extra["checkpoints"]["model"]["ecommerce"] == 0.5 == extra["accuracy"]["ecommerce"]
    summary = json.loads((store.open(res.outputs["report"]).local_dir() / "summary.json").read_text())
    assert summary["checkpoint_order"] == ["base", "model"]                  # recipe order, not the JSON's sorted keys
    k = summary["checkpoints"]["model"]["k_metrics"]["ecommerce"]
    assert k["k"] == 4 and k["mean"] == 0.5 and k["pass"]["1"] == 0.5 and k["pass"]["4"] == 1.0
    assert k["pass"]["2"] == pytest.approx(1 - 1 / 6)          # 1 - C(2,2)/C(4,2)
    assert k["maj"] == 1.0                                      # "A" twice against "2" and "3" once: A wins
    md = (store.open(res.outputs["report"]).local_dir() / "report.md").read_text()
    assert "## Every checkpoint of the run" in md and "| final | " in md
    assert "0.500 ± 0.000 (+0.500 ± 0.000)" in md                # the final's change over the base, ± SEs
    assert "## pass@k, mean@k, maj@k" in md
    png = store.open(res.outputs["report"]).local_dir() / "checkpoints.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "(checkpoints.png)" in md


def test_greedy_and_mean_at_k_from_one_run(world_arts, tmp_path, monkeypatch):
    """``sampled: {k: 4}``: each checkpoint is decoded twice in the one run (greedy, then 4 samples at
    temperature 1); the rows say which, summary.json keeps both with standard errors, the report has both."""
    calls = _known_answers(monkeypatch, calls_per_checkpoint=2)
    store = ArtifactStore(str(tmp_path / "s"))
    cfg = EvalConfig(max_new_tokens=4, sampled={"k": 4, "temperature": 1.0})
    res = evaluation.run(cfg, {"model": world_arts["base"], "base": world_arts["base"],
                               "suites": world_arts["eval_prompts"]}, store)
    assert len(calls) == 4
    rows = store.open(res.outputs["results"]).read_table().to_pylist()
    n = len(world_arts["eval_prompts"].read_table())
    assert [sum(r["decoding"] == d and r["checkpoint"] == c for r in rows)
            for c in ("base", "model") for d in ("main", "sampled")] == [n, 4 * n, n, 4 * n]
    summary = json.loads((store.open(res.outputs["report"]).local_dir() / "summary.json").read_text())
    final = summary["checkpoints"]["model"]
    # greedy: the known answers' sample 0 is right on every e-commerce prompt; sampled: 2 of 4 on each
    assert final["accuracy"]["ecommerce"] == 1.0 and final["accuracy_se"]["ecommerce"] == 0.0
    assert final["sampled"]["k"] == 4 and final["sampled"]["accuracy"]["ecommerce"] == 0.5
    assert final["sampled"]["accuracy_se"]["ecommerce"] == 0.0            # every prompt 2 of 4: no spread
    assert summary["checkpoints"]["base"]["sampled"]["accuracy"]["ecommerce"] == 0.0
    assert summary["suites"]["ecommerce"]["accuracy"] == 1.0 and "sampled" not in summary   # the final's details: main
    md = (store.open(res.outputs["report"]).local_dir() / "summary.md").read_text()
    assert "### mean@4 at temperature 1.0" in md and "### Mean score" in md and gfm_table_problems(md) == []


def test_the_sampled_pass_only_on_the_checkpoints_named(world_arts, tmp_path, monkeypatch):
    """``sampled.checkpoints``: k samples cost k greedy passes, so a run can spend them on the checkpoints RL
    changes; the others are decoded once, and the mean@k table has rows for the named ones only."""
    calls = _known_answers(monkeypatch)
    store = ArtifactStore(str(tmp_path / "s"))
    cfg = EvalConfig(max_new_tokens=4, sampled={"k": 4, "temperature": 1.0, "checkpoints": ["model"]})
    res = evaluation.run(cfg, {"model": world_arts["base"], "base": world_arts["base"],
                               "suites": world_arts["eval_prompts"]}, store)
    assert len(calls) == 3                                   # base greedy; final greedy and sampled
    rows = store.open(res.outputs["results"]).read_table().to_pylist()
    n = len(world_arts["eval_prompts"].read_table())
    assert [sum(r["decoding"] == d and r["checkpoint"] == c for r in rows)
            for c in ("base", "model") for d in ("main", "sampled")] == [n, 0, n, 4 * n]
    summary = json.loads((store.open(res.outputs["report"]).local_dir() / "summary.json").read_text())
    assert "sampled" not in summary["checkpoints"]["base"] and summary["checkpoints"]["model"]["sampled"]["k"] == 4
    md = (store.open(res.outputs["report"]).local_dir() / "summary.md").read_text()
    table = md.split("### mean@4 at temperature 1.0")[1].split("###")[0]
    assert "| final |" in table and "| base |" not in table and gfm_table_problems(md) == []


def test_the_sampled_pass_names_known_checkpoints():
    with pytest.raises(ValueError, match="sampled.checkpoints: unknown \\['phase2'\\]"):
        EvalConfig(sampled={"checkpoints": ["model", "phase2"]})
