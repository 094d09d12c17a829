"""Stage summaries: gathered from the outputs' summary.md files and published as Prefect markdown artifacts."""
from __future__ import annotations

import asyncio

import pyarrow as pa
from prefect import flow

import flows.stage_task as stage_task_mod
from compass.runtime.runner import StageResult
from compass.runtime.stage_summary import markdown_key, stage_summary
from compass.store.store import ArtifactStore
from tests.helpers import commit_artifact, commit_table


def _outputs(store):
    table = commit_table(store, "merge_sweep", "merge_sweep", pa.table({
        "candidate": ["ties w=0.5"], "method": ["ties"], "thinking_weight": [0.5], "domain_weight": [0.5],
        "density": [0.7], "suite": ["mean"], "score": [0.25], "prompts": [8], "selected": [True]}))

    def fill(w):
        w.path("weights.bin").write_bytes(b"x")
        w.path("summary.md").write_text("## Sweep\n\n| candidate | dev |\n|---|---:|\n| ties w=0.5 | 0.25 |\n")
    ckpt = commit_artifact(store, "checkpoint", "thinking_base", fill)
    return {"checkpoint": ckpt.uri, "sweep": table.uri}


def test_summary_lists_outputs_and_includes_their_markdown(tmp_path):
    store = ArtifactStore(str(tmp_path / "a"))
    md = stage_summary(StageResult("merge", "merge", "v1", "ran", 3.25, _outputs(store)), store)
    assert md.startswith("# merge (stage merge)")
    assert "Ran and committed version `v1` in 3.2 s." in md
    assert "| sweep | merge_sweep |" in md and "| 1 |" in md          # a table's row count
    assert "| checkpoint | checkpoint |" in md
    assert "## Sweep" in md and "| ties w=0.5 | 0.25 |" in md
    reused = stage_summary(StageResult("merge", "merge", "v1", "reused", 0.1, {}), store)
    assert "Reused the stored version `v1`" in reused and "| output |" not in reused


def test_linked_pngs_of_the_artifact_are_inlined(tmp_path, monkeypatch):
    """A PNG the summary links by a relative path is inlined as a data: URI (the UI cannot fetch a store
    path); a link to a file not in the artifact, or to a URL, is left alone; an oversize image keeps its link."""
    import base64

    import compass.runtime.stage_summary as mod
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4

    def fill(w):
        w.path("plots").mkdir()
        w.path("plots/reward.png").write_bytes(png)
        w.path("big.png").write_bytes(png * 8)
        w.path("summary.md").write_text("![reward](plots/reward.png)\n![gone](plots/none.png)\n"
                                        "![web](https://example.org/x.png)\n![big](big.png)\n")
    store = ArtifactStore(str(tmp_path / "a"))
    art = commit_artifact(store, "checkpoint", "ckpt_r1", fill)
    monkeypatch.setattr(mod, "MAX_INLINE_BYTES", len(png) * 2)
    md = stage_summary(StageResult("reasoning_rl", "reasoning_rl", "v1", "ran", 1.0, {"checkpoint": art.uri}), store)
    assert f"![reward](data:image/png;base64,{base64.b64encode(png).decode()})" in md
    assert "![gone](plots/none.png)" in md and "![web](https://example.org/x.png)" in md
    assert "![big](big.png) (big.png in" in md and "too large to inline" in md


def test_markdown_key_is_a_valid_prefect_key():
    assert markdown_key("sft_longcot") == "sft-longcot-summary"
    assert markdown_key("Domain RL.2") == "domain-rl-2-summary"


def test_stage_task_publishes_the_summary(tmp_path, monkeypatch, prefect_harness):
    store = ArtifactStore(str(tmp_path / "a"))
    outputs = _outputs(store)

    def fake_invoke(stage, **kw):  # the stage's own work is tested elsewhere; this checks the publishing
        return StageResult(kw["run_name"], stage, "v1", "ran", 1.0, outputs)
    monkeypatch.setattr(stage_task_mod, "invoke_stage", fake_invoke)

    @flow
    def one():
        return stage_task_mod.stage_task("merge", "merge", {}, {}, str(tmp_path / "a"), {}, {})
    assert one()["status"] == "ran"

    async def read():
        from prefect.client.orchestration import get_client
        async with get_client() as client:
            return await client.read_latest_artifacts()
    arts = [a for a in asyncio.run(read()) if a.key == "merge-summary"]
    assert len(arts) == 1 and arts[0].type == "markdown"
    assert "| ties w=0.5 | 0.25 |" in arts[0].data
