"""Planning the DAG: what runs for a given set of provided artifacts and targets."""
from __future__ import annotations

import base64

import pytest

from compass.dag.config import PipelineConfig
from compass.dag.pipeline import PIPELINE, plan, producers
from compass.dag.stages import stage_spec

ALL = [n.run_name for n in PIPELINE]


def names(nodes):
    return [n.run_name for n in nodes]


def test_whole_pipeline_runs_every_stage_in_dag_order():
    assert names(plan(set())) == ALL
    seen: set[str] = set()
    for n in PIPELINE:  # every input is made by an earlier node
        assert set(n.inputs.values()) <= seen, n.run_name
        seen |= set(n.outputs.values())


def test_provided_artifact_skips_what_only_it_needed():
    ran = names(plan({"thinking_base"}))
    assert "merge" not in ran and "sft_domain" not in ran
    # world, data_filter and the Long-CoT SFT still make what other stages need (rl_prompts,
    # eval_prompts, and the GenRM's base: the thinking checkpoint)
    assert ran == ["world", "data_filter", "sft_longcot", "genrm", "reasoning_rl", "domain_rl", "evaluation"]
    assert names(plan({"thinking_base", "genrm_ckpt"})) == ["world", "data_filter", "reasoning_rl", "domain_rl",
                                                           "evaluation"]


def test_provided_final_checkpoint_leaves_only_what_evaluation_needs():
    assert names(plan({"ckpt_final"})) == ["world", "evaluation"]
    assert names(plan({"ckpt_final", "eval_prompts"})) == ["evaluation"]


def test_until_stops_at_a_stage():
    assert names(plan(set(), until="merge")) == ["world", "data_filter", "sft_longcot", "sft_domain", "merge"]
    assert names(plan(set(), until="world")) == ["world"]


def test_unknown_names_are_errors():
    with pytest.raises(ValueError, match="no pipeline artifact is named"):
        plan({"thinking_bse"})
    with pytest.raises(ValueError, match="no stage run named"):
        plan(set(), until="sft")


def test_every_node_matches_its_stage_spec_and_has_a_config():
    made = {name: node for name, node in producers().items()}
    cfg = PipelineConfig()
    for n in PIPELINE:
        spec = stage_spec(n.stage)
        assert set(n.inputs) == set(spec.inputs), n.run_name
        assert set(n.outputs) == set(spec.outputs), n.run_name
        assert isinstance(cfg.stage_config(n.run_name), spec.config), n.run_name
        for slot, name in n.inputs.items():  # the producer writes the kind this slot reads
            prod = made[name]
            out_slot = next(s for s, a in prod.outputs.items() if a == name)
            assert stage_spec(prod.stage).outputs[out_slot] == spec.inputs[slot], (n.run_name, slot)


def test_evaluation_reads_every_checkpoint_the_run_made_but_needs_only_the_final_one():
    from compass.dag.run_plan import RunPlan
    node = next(n for n in PIPELINE if n.run_name == "evaluation")
    assert node.optional <= stage_spec("evaluation").optional_inputs
    assert set(node.inputs.values()) >= {"base_ckpt", "thinking_ckpt", "domain_ckpt", "thinking_base", "ckpt_r1"}
    # a whole run: each checkpoint reaches the evaluation
    whole = RunPlan(store="s", store_options={}, steps=plan(set()), configs={},
                    made={a: f"uri:{a}" for n in PIPELINE for a in n.outputs.values()})
    assert whole.inputs_for(node) == {slot: f"uri:{a}" for slot, a in node.inputs.items()}
    # evaluating a provided final checkpoint: the earlier ones are not made, so they are left out
    steps = plan({"ckpt_final"})
    assert names(steps) == ["world", "evaluation"]
    part = RunPlan(store="s", store_options={}, steps=steps, configs={}, provided={"ckpt_final": "uri:given"},
                   made={"eval_prompts": "uri:ev", "base_ckpt": "uri:base"})
    assert part.inputs_for(node) == {"model": "uri:given", "suites": "uri:ev", "base": "uri:base"}


def test_pipeline_summary_says_what_ran_and_ends_with_the_held_out_table(tmp_path):
    from compass.dag.run_plan import summary_markdown
    from compass.store.store import ArtifactStore
    store = ArtifactStore(str(tmp_path / "store"))
    from tests.helpers import commit_artifact
    png = b"\x89PNG\r\n\x1a\n" + bytes(64)
    table = "## Held-out accuracy\n\n![chart](plots/heldout.png)\n\n| checkpoint | math |\n|---|---:|\n| final | 0.500 |\n"

    def fill(w):
        w.path("summary.md").write_text(table)
        w.path("plots/heldout.png").write_bytes(png)
    report = commit_artifact(store, "report", "eval_report", fill).uri
    rows = [{"run_name": "world", "stage": "world", "status": "reused", "version": "a", "wall_s": 0.1,
             "outputs": {}},
            {"run_name": "evaluation", "stage": "evaluation", "status": "ran", "version": "b", "wall_s": 9.0,
             "outputs": {"report": report}}]
    md = summary_markdown(rows, store.root)
    assert "1 stage run(s) ran, 1 reused stored outputs." in md
    assert "| evaluation | **ran** |" in md and "| world | reused |" in md
    assert md.rstrip().endswith("| final | 0.500 |")
    # the chart inlined, as in the evaluation's own summary: a store path is no URL the Prefect UI can fetch
    assert f"![chart](data:image/png;base64,{base64.b64encode(png).decode()})" in md and "(plots/" not in md


def test_eval_suites_become_labelled_evaluation_inputs(tmp_path):
    """``eval_suites: [NAME]`` adds the store's LATEST prompts/NAME to the evaluation as ``suites:NAME``, in a
    whole-run plan and in a single-stage re-run; a table the store lacks is an error that says how to make it."""
    from compass.dag.run_plan import make_run_plan, node_call
    from tests.compass.store.test_store import write_checkpoint, write_prompts
    from compass.store.store import ArtifactStore
    store = ArtifactStore(str(tmp_path / "store"))
    gsm = write_prompts(store, "gsm8k", n=3)
    cfg = PipelineConfig(store=store.root, eval_suites=["gsm8k"])
    run = make_run_plan(cfg)
    node = next(n for n in PIPELINE if n.run_name == "evaluation")
    assert run.extra_inputs["evaluation"] == {"suites:gsm8k": gsm.uri}
    assert all(v == {} for k, v in run.extra_inputs.items() if k != "evaluation")
    run.made.update({a: f"uri:{a}" for n in PIPELINE for a in n.outputs.values()})
    assert run.inputs_for(node)["suites:gsm8k"] == gsm.uri and run.inputs_for(node)["suites"] == "uri:eval_prompts"
    write_checkpoint(store, "ckpt_final", "v1")                 # a single-stage re-run reads LATEST
    ev = write_prompts(store, "eval_prompts", n=2)
    call = node_call(cfg, "evaluation")
    assert call["inputs"]["suites:gsm8k"] == gsm.uri and call["inputs"]["suites"] == ev.uri
    with pytest.raises(ValueError, match="eval_suites: no prompts table 'math500'.*compass import --config "
                                         "configs/import/math500.yaml"):
        make_run_plan(PipelineConfig(store=store.root, eval_suites=["math500"]))
