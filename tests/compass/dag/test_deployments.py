"""The deployments `compass serve` registers come from deploy/prefect.yaml plus the config's schedules."""
from __future__ import annotations

import pytest

from compass.config import ConfigError, validate
from compass.dag.config import PipelineConfig
from compass.dag.deployments import deployment_name, deployment_specs, schedule_keys
from compass.dag.pipeline import PIPELINE
from compass.dag.run_plan import resolve_ref
from compass.store.store import ArtifactNotFound, ArtifactStore


def test_one_deployment_per_stage_run_and_the_pipeline():
    specs = deployment_specs("/cfg.yaml", "s3://b/p")
    assert [s.name for s in specs] == [deployment_name(k) for k in schedule_keys()]
    assert all(s.parameters["config_path"] == "/cfg.yaml" and s.parameters["store"] == "s3://b/p" for s in specs)
    assert all(s.cron is None for s in specs)
    sft = {s.name: s.parameters.get("run_name") for s in specs if s.flow == "sft_flow"}
    assert sft == {"sft-longcot": "sft_longcot", "sft-domain": "sft_domain"}
    assert len(specs) == len(PIPELINE) + 1


def test_schedules_land_on_their_deployments():
    specs = {s.name: s for s in deployment_specs("c.yaml", None, {"pipeline": "0 2 * * *",
                                                                 "sft_domain": "*/15 * * * 1-5"}, "Asia/Singapore")}
    assert specs["pipeline"].cron == "0 2 * * *" and specs["sft-domain"].cron == "*/15 * * * 1-5"
    assert specs["sft-domain"].timezone == "Asia/Singapore"
    assert specs["sft-longcot"].cron is None


@pytest.mark.parametrize("schedules,needle", [({"sft": "0 2 * * *"}, "unknown key"),
                                              ({"merge": "0 2 * *"}, "schedules.merge"),
                                              ({"merge": "every day"}, "schedules.merge")])
def test_bad_schedules_are_rejected_naming_the_key(schedules, needle):
    with pytest.raises(ValueError, match=needle):
        deployment_specs("c.yaml", None, schedules)
    with pytest.raises(ConfigError, match="schedules"):
        validate(PipelineConfig, {"schedules": schedules}, "config")


def test_a_ref_names_an_artifact_in_the_store(tmp_path):
    from tests.helpers import commit_artifact
    st = ArtifactStore(str(tmp_path / "store"))
    art = commit_artifact(st, "report", "notes", lambda w: w.path("report.md").write_text("# r\n"))
    st.set_latest("report", "notes", art.version)
    assert resolve_ref("report/notes", st) == art.uri                     # LATEST
    assert resolve_ref(f"report/notes/{art.version}", st) == art.uri
    assert resolve_ref(art.uri, st) == art.uri                                 # a URI passes through
    with pytest.raises(ArtifactNotFound, match="report/nothing"):
        resolve_ref("report/nothing", st)
