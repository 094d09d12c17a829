"""The Prefect task around every stage retries infrastructure errors, and only those."""
from __future__ import annotations

import pytest
from prefect import flow

import flows.stage_task as stage_task_mod
from compass.runtime.runner import StageResult


def _flaky(failures: list[BaseException]):
    calls = []

    def fake_invoke(stage, **kw):  # injects faults a real store cannot be made to show on cue
        calls.append(stage)
        if failures:
            raise failures.pop(0)
        return StageResult(kw["run_name"], stage, "v1", "ran", 0.0, {})
    return fake_invoke, calls


def _run_once():
    task = stage_task_mod.stage_task.with_options(retry_delay_seconds=0)

    @flow
    def one():
        return task("world", "world", {}, {}, "./unused", {}, {})
    return one()


def test_infrastructure_error_is_retried(prefect_harness, monkeypatch):
    fake, calls = _flaky([ConnectionError("store unreachable"), TimeoutError("slow")])
    monkeypatch.setattr(stage_task_mod, "invoke_stage", fake)
    assert _run_once()["status"] == "ran"
    assert len(calls) == 3


def test_bad_input_is_not_retried(prefect_harness, monkeypatch):
    fake, calls = _flaky([ValueError("column 'reference' has type int64")])
    monkeypatch.setattr(stage_task_mod, "invoke_stage", fake)
    with pytest.raises(ValueError, match="reference"):
        _run_once()
    assert len(calls) == 1
