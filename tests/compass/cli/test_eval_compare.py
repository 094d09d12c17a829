"""`compass eval compare`: two stored evaluation reports side by side, through the real store and CLI."""
from __future__ import annotations

import json

import pytest

from compass.cli.main import main
from compass.store.store import ArtifactStore
from tests.helpers import commit_artifact


def _report(root, checkpoints: dict | None, suites: dict | None = None):
    summary = {"model": "m", "suites": suites or {}}
    if checkpoints is not None:
        summary["checkpoints"] = {slot: {"label": label, "accuracy": acc} for slot, (label, acc) in checkpoints.items()}
    store = ArtifactStore(str(root))
    art = commit_artifact(store, "report", "eval_report",
                          lambda w: w.path("summary.json").write_text(json.dumps(summary)))
    store.set_latest("report", "eval_report", art.version)       # as a stage run leaves it
    return art


def test_compare_two_runs_by_store_and_by_uri(tmp_path, capsys):
    _report(tmp_path / "a", {"base": ("base", {"math": 0.1}), "model": ("final", {"math": 0.3, "code": 0.0})})
    b = _report(tmp_path / "b", {"base": ("base", {"math": 0.1}), "model": ("final", {"math": 0.45})})
    assert main(["eval", "compare", str(tmp_path / "a"), b.uri, "--json"]) == 0
    out = capsys.readouterr().out
    rows = json.loads(out.strip().splitlines()[-1])["rows"]
    assert rows == [{"checkpoint": "base", "suite": "math", "a": 0.1, "b": 0.1, "delta": 0.0},
                    {"checkpoint": "final", "suite": "code", "a": 0.0, "b": None, "delta": None},
                    {"checkpoint": "final", "suite": "math", "a": 0.3, "b": 0.45, "delta": pytest.approx(0.15)}]
    assert "+0.150" in out and "—" in out


def test_rows_follow_the_reports_checkpoint_order(tmp_path, capsys):
    for run in ("a", "b"):
        art = _report(tmp_path / run, {"phase1": ("reasoning RL", {"math": 0.5}), "base": ("base", {"math": 0.0})})
    summary = json.loads(art.read_bytes("summary.json"))
    assert list(summary["checkpoints"]) == ["phase1", "base"]
    from compass.cli.eval_compare import accuracy_by_checkpoint
    assert list(accuracy_by_checkpoint({**summary, "checkpoint_order": ["base", "phase1"]})) == ["base",
                                                                                               "reasoning RL"]


def test_an_older_report_counts_as_its_final_checkpoint(tmp_path, capsys):
    _report(tmp_path / "a", None, suites={"math": {"accuracy": 0.2}})
    _report(tmp_path / "b", {"model": ("final", {"math": 0.25})})
    assert main(["eval", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert rows == [{"checkpoint": "final", "suite": "math", "a": 0.2, "b": 0.25, "delta": pytest.approx(0.05)}]


def test_a_store_without_a_report_is_a_clear_error(tmp_path, capsys):
    _report(tmp_path / "a", {"model": ("final", {"math": 0.25})})
    (tmp_path / "empty").mkdir()
    assert main(["eval", "compare", str(tmp_path / "a"), str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "eval_report" in err and "no 'latest' version" in err
