"""`compass bench merge` and `compass bench genrm` run end to end at smoke size and end with their headline JSON.

The numbers of a smoke run mean nothing; the benchmarks' results are in docs/benchmarks.md.
"""
from __future__ import annotations

import json


from compass.bench import run_bench


def _last_json(out: str) -> dict:
    return json.loads([line for line in out.strip().splitlines() if line.startswith("{")][-1])


def test_bench_merge_smoke(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    monkeypatch.setenv("COMPASS_STATE_DIR", str(tmp_path / "state"))
    assert run_bench("merge", ["--quick", "--threads", "1", "--cache", str(tmp_path / "store"),
                               "--out", str(tmp_path / "out")]) == 0
    head = _last_json(capsys.readouterr().out)
    assert head["bench"] == "merge" and isinstance(head["min_margin_to_parents"], float)
    assert head["selected"] and head["eval_prompts"] > 0 and head["dev_prompts"] > 0


def test_bench_genrm_smoke(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    monkeypatch.setenv("COMPASS_STATE_DIR", str(tmp_path / "state"))
    assert run_bench("genrm", ["--pairs", "60", "--base", "random", "--warm-steps", "2", "--grpo-steps", "1",
                               "--grpo-prompts", "2", "--grpo-group", "2", "--bt-steps", "2", "--max-new-tokens",
                               "8", "--n-sft", "10", "--threads", "1", "--cache", str(tmp_path / "cache"),
                               "--out", str(tmp_path / "out")]) == 0
    head = _last_json(capsys.readouterr().out)
    for key in ("genrm_accuracy", "genrm_tie_accuracy", "bt_accuracy", "bt_tie_accuracy", "flips_avoided"):
        assert key in head, key
    assert 0.0 <= head["genrm_accuracy"] <= 1.0 and 0.0 <= head["bt_accuracy"] <= 1.0
