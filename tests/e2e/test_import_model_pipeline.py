"""A user's own model as the pipeline's base: `compass import-model` a tiny model with its own chat template,
then `compass run --from-artifact base_ckpt=URI` through evaluation, at the e2e tests' sizes.

Two families run the whole pipeline, Llama and Qwen2.5; between them: a template kept in chat_template.jinja
and one in tokenizer_config.json, both tokenizer classes, bf16 and fp32 weights, tied and untied embeddings, a
bos token, no pad token and pad = eos, shipped sampling defaults (tests/compass/lm/hf_families.py). Qwen3-MoE
is the world's own architecture, which every pipeline test runs; Qwen3 and Qwen3-MoE are imported, loaded bit
for bit and rendered with their own templates in tests/compass/lm/test_hf_import.py. Each pipeline run here
costs ~25 s of a 2-core machine (issue 30)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from compass.dag.pipeline import PIPELINE
from compass.store.store import ArtifactStore
from tests.compass.lm.hf_families import FAMILIES, make_model_folder
from tests.e2e.conftest import compass, last_json, write_config

pytestmark = pytest.mark.slow

PIPELINE_FAMILIES = ("llama", "qwen2")
MADE = ("thinking_ckpt", "domain_ckpt", "thinking_base", "genrm_ckpt", "ckpt_r1", "ckpt_final")


def _regenerate(store: ArtifactStore, ckpt_uri: str, rows: list[dict], cfg: dict, template: str | None = None):
    """The evaluation stage's generation of ``ckpt_uri`` on ``rows`` redone here (same sampler, same settings),
    with the checkpoint's own chat template or ``template``: prompt id -> response."""
    from compass.lm.device import place_for_inference
    from compass.lm.model_factory import load_checkpoint
    from compass.lm.suite_scoring import generate_and_score
    from compass.rl.rollout.sampler import open_sampler
    model, tok = load_checkpoint(store.open(ckpt_uri).local_dir())
    if template is not None:
        tok.chat_template = template
    place_for_inference(model, cfg["device"], cfg["precision"])
    with open_sampler(cfg["backend"], model, tok, workers=0) as generate:
        got = generate_and_score(model, tok, rows, ckpt_uri, samples_per_prompt=cfg["samples_per_prompt"],
                                 max_new_tokens=cfg["max_new_tokens"], temperature=cfg["temperature"],
                                 seed=cfg["seed"], batch_size=cfg["batch_size"], generate=generate)
    return {r["prompt_id"]: r["response"] for r in got}


@pytest.mark.parametrize("family", PIPELINE_FAMILIES)
def test_imported_model_runs_the_pipeline_with_its_own_template(e2e_tmp: Path, family: str, shared_prefect):
    fam = FAMILIES[family]
    model_dir = make_model_folder(family, e2e_tmp / f"my-{family}")
    store_dir = e2e_tmp / "store"
    imported = json.loads(compass(["import-model", str(model_dir), "--store", str(store_dir), "--json"],
                                  e2e_tmp).stdout)
    uri = imported["uri"]
    cfg = write_config(e2e_tmp / "c.yaml", str(store_dir))
    res = last_json(compass(["run", "--config", str(cfg), "--json", "--from-artifact", f"base_ckpt={uri}"],
                            e2e_tmp, server=shared_prefect).stdout)
    assert {s["run_name"]: s["status"] for s in res["stages"]} == {n.run_name: "ran" for n in PIPELINE}

    st = ArtifactStore(str(store_dir))
    # the world stage wrote its own base_ckpt too; LATEST names the one the run used
    assert st.get("checkpoint", "base_ckpt").uri == uri
    outputs = {s["run_name"]: s["outputs"] for s in res["stages"]}
    # every stage that reads the base read the imported model, not the world's random init
    for run, slot in (("data_filter", "sft_longcot"), ("sft_longcot", "checkpoint"), ("sft_domain", "checkpoint"),
                      ("merge", "checkpoint"), ("evaluation", "results")):
        art = st.open(outputs[run][slot])
        assert {i.slot: i.uri for i in art.manifest.inputs}["base"] == uri, run

    # every checkpoint the run made carries the model's own template
    from compass.lm.chat import chat_prefix
    from transformers import AutoTokenizer
    for name in MADE:
        tok = AutoTokenizer.from_pretrained(str(st.get("checkpoint", name).local_dir()))
        assert tok.chat_template == fam["template"], name
        assert chat_prefix(tok, "2+2=?").startswith(fam["prefix"]), name

    # the evaluation rendered its prompts with that template: its stored greedy answers are the ones the
    # model gives to prompts rendered so, and not those it gives under the world's template
    from compass.lm.model_factory import CHAT_TEMPLATE as WORLD_TEMPLATE
    ev = st.open(outputs["evaluation"]["results"])
    report = st.open(outputs["evaluation"]["report"])
    ev_cfg = json.loads(report.read_bytes("summary.json"))["config"]
    rows = st.open({i.slot: i.uri for i in ev.manifest.inputs}["suites"]).read_table().to_pylist()
    final = outputs["domain_rl"]["checkpoint"]
    stored = {r["prompt_id"]: r["response"] for r in ev.read_table().to_pylist()
              if r["checkpoint"] == "model" and r["decoding"] == "main"}          # not the mean@k pass
    assert _regenerate(st, final, rows, ev_cfg) == stored
    other = _regenerate(st, final, rows, ev_cfg, template=WORLD_TEMPLATE)
    assert sum(other[k] != stored[k] for k in stored) >= len(stored) // 2

    # both RL phases sampled and trained on the imported policy's descendants
    for run in ("reasoning_rl", "domain_rl"):
        assert st.open(outputs[run]["rollouts"]).read_table().num_rows > 0
