"""A UI user tells a real run from a reuse by its name and tags: the pipeline flow run is named and tagged
after what its stage runs did, and each stage's task run says ran (with its time) or reused."""
from __future__ import annotations

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.sorting import FlowRunSort

from compass.dag.run_plan import pipeline_run_labels, stage_run_label
from flows.pipeline import pipeline_flow
from tests.e2e.conftest import write_config


def test_labels_by_hand():
    rows = [{"run_name": "world", "status": "reused", "wall_s": 0.4},
            {"run_name": "sft_longcot", "status": "ran", "wall_s": 151.6}]
    assert [stage_run_label(r) for r in rows] == ["world · reused", "sft_longcot · ran 152 s"]
    assert pipeline_run_labels(rows) == ("1 ran, 1 reused", ["reused:world", "ran:sft_longcot"])


@pytest.mark.slow
def test_pipeline_runs_are_named_and_tagged_after_what_ran(tmp_path, prefect_harness):
    cfg = write_config(tmp_path / "c.yaml", str(tmp_path / "store"))
    first = pipeline_flow(config_path=str(cfg), until="world")
    second = pipeline_flow(config_path=str(cfg), until="world")
    assert [r["status"] for r in first] == ["ran"] and [r["status"] for r in second] == ["reused"]
    with get_client(sync_client=True) as client:       # this test's two runs of the test process's server
        runs = [r for r in client.read_flow_runs(sort=FlowRunSort.START_TIME_ASC)
                if r.parameters.get("config_path") == str(cfg)]
        tasks = {t.flow_run_id: t.name for t in client.read_task_runs()}
    assert [r.name.endswith(" · 1 ran, 0 reused") for r in runs] == [True, False]
    assert runs[1].name.endswith(" · 0 ran, 1 reused")
    assert "ran:world" in runs[0].tags and "reused:world" in runs[1].tags
    assert tasks[runs[0].id].startswith("world · ran ") and tasks[runs[1].id] == "world · reused"
