"""compass.lm.hf_import: a user's Hugging Face model folder as a checkpoint artifact.

Every supported family is a real folder (``save_pretrained``, a BPE trained with ``tokenizers``, a
family-style chat template: tests/compass/lm/hf_families.py) imported through the real code path; the
artifact must load as a world-made base_ckpt does and render prompts with the model's own template.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import fsspec
import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer

from compass.dag.run_plan import resolve_provided
from compass.lm.chat import chat_prefix
from compass.lm.hf_import import SUPPORTED, ModelImportError, import_model
from compass.lm.model_factory import load_checkpoint
from compass.store.store import ArtifactStore
from tests.compass.lm.hf_families import FAMILIES, SENTENCES, make_model_folder

SHARDED = "qwen2"          # saved in shards with model.safetensors.index.json


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf-models")
    return {f: make_model_folder(f, root / f, shard="60KB" if f == SHARDED else None) for f in FAMILIES}


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("family", list(FAMILIES))
def test_import_loads_like_a_base_checkpoint(family, folders, tmp_path):
    src = folders[family]
    store = ArtifactStore(str(tmp_path / "store"))
    res = import_model(str(src), store)
    spec = FAMILIES[family]
    assert res.status == "imported" and res.arch == family and res.name == "base_ckpt"
    art = store.get("checkpoint", "base_ckpt")                     # committed and LATEST
    assert art.uri == res.uri and art.version == res.version
    d = art.local_dir()

    # weights and config copied byte for byte (a bf16 model stays bf16), sharded or not
    weights = sorted(p.name for p in src.glob("*.safetensors"))
    assert (len(weights) > 1) == (family == SHARDED)
    for name in [*weights, "config.json"] + (["model.safetensors.index.json"] if family == SHARDED else []):
        assert _sha(d / name) == _sha(src / name), name
    want_dtype = {torch.bfloat16: "bfloat16", torch.float32: "float32"}[spec["dtype"]]
    assert res.dtype == want_dtype
    with safe_open(str(d / weights[0]), "pt") as f:
        assert f.get_tensor(next(iter(f.keys()))).dtype == spec["dtype"]
    assert not (d / "README.md").exists() and res.skipped == ["README.md"]

    # load_checkpoint (what every stage calls) gives the source's weights, bit for bit
    model, tok = load_checkpoint(d)
    ref = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.float32)
    got, want = model.state_dict(), ref.state_dict()
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert res.params == sum(p.numel() for p in ref.parameters())

    # the tokenizer: the same ids, the model's own chat template, left padding, a pad that is not eos
    src_tok = AutoTokenizer.from_pretrained(str(src))
    assert [tok(s)["input_ids"] for s in SENTENCES[:5]] == [src_tok(s)["input_ids"] for s in SENTENCES[:5]]
    prompt = chat_prefix(tok, "What is 2+3?")
    assert prompt == chat_prefix(src_tok, "What is 2+3?")
    assert prompt.startswith(spec["prefix"]) and "What is 2+3?" in prompt and "<|user|>" not in prompt
    if family in ("qwen3", "qwen3_moe"):
        assert prompt.endswith("<|im_start|>assistant\n")
        assert len(tok("<think>", add_special_tokens=False)["input_ids"]) == 1
    if family == "llama":
        assert prompt.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
        ids = tok(prompt, add_special_tokens=False)["input_ids"]     # the stages' encoding: one bos, the template's
        assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id
    assert tok.padding_side == "left"
    assert tok.eos_token == spec["eos"]
    assert tok.pad_token_id is not None and tok.pad_token_id != tok.eos_token_id
    assert tok.pad_token_id < model.config.vocab_size
    how = {"qwen3": "own", "qwen3_moe": "own", "qwen2": "added", "llama": "reserved"}[family]
    assert res.pad["how"] == how and res.pad["id"] == tok.pad_token_id

    # metadata for later stages and `compass artifacts show`
    meta = json.loads((d / "compass.json").read_text())
    assert meta["source"] == f"file://{src}" and meta["arch"] == family and meta["params"] == res.params
    assert meta["dtype"] == want_dtype and meta["fingerprint"] == res.version
    assert {k: art.manifest.extra[k] for k in ("arch", "params", "vocab_size")} == \
        {"arch": family, "params": res.params, "vocab_size": model.config.vocab_size}

    # the pipeline takes it where the world's base_ckpt goes
    assert resolve_provided([f"base_ckpt={res.uri}"], store) == {"base_ckpt": res.uri}

    # the same files again: the same version, reused
    again = import_model(str(src), store)
    assert (again.status, again.version, again.uri) == ("reused", res.version, res.uri)


def test_generation_defaults_are_left_out(folders, tmp_path):
    """Qwen2.5's sampling defaults (repetition_penalty 1.05, top-k 20, …) must not reach the pipeline's
    generate calls: the artifact's generation_config.json keeps token ids only."""
    res = import_model(str(folders["qwen2"]), ArtifactStore(str(tmp_path / "store")))
    d = ArtifactStore(str(tmp_path / "store")).open(res.uri).local_dir()
    gen = json.loads((d / "generation_config.json").read_text())
    assert "repetition_penalty" not in gen and "top_k" not in gen and "do_sample" not in gen
    assert gen["pad_token_id"] == res.pad["id"]
    assert res.generation_dropped["repetition_penalty"] == 1.05
    model, _ = load_checkpoint(d)
    cfg, _ = model._prepare_generation_config(None, do_sample=False)
    assert cfg.repetition_penalty in (None, 1.0)


def test_fsspec_sources_give_the_same_version(folders, tmp_path):
    src = folders["qwen3"]
    store = ArtifactStore(str(tmp_path / "store"))
    local = import_model(str(src), store)
    mem = fsspec.filesystem("memory")
    mem.put(str(src), "/hf-import-test/qwen3", recursive=True)
    try:
        via_memory = import_model("memory://hf-import-test/qwen3", store, name="from_memory")
    finally:
        mem.rm("/hf-import-test", recursive=True)
    assert via_memory.status == "imported" and via_memory.version == local.version
    assert via_memory.source == "memory:///hf-import-test/qwen3"
    model, tok = load_checkpoint(store.open(via_memory.uri).local_dir())
    assert chat_prefix(tok, "hi").startswith("<|im_start|>user\n")
    via_file_url = import_model(f"file://{src}", store)
    assert (via_file_url.status, via_file_url.version) == ("reused", local.version)


# -- each problem is one line naming the file or field ------------------------------------------------

def _no_config(d: Path) -> None:
    (d / "config.json").unlink()


def _model_type(d: Path) -> None:
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "model_type": "gpt2"}))


def _no_safetensors(d: Path) -> None:
    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").write_bytes(b"not really")


def _bad_tokenizer(d: Path) -> None:
    (d / "tokenizer.json").write_text("{ this is not json")


def _no_template(d: Path) -> None:
    (d / "chat_template.jinja").unlink()


CASES = {
    "no_config": ("qwen3", _no_config, "no config.json"),
    "model_type": ("qwen3", _model_type, "model_type 'gpt2' is not supported; supported: qwen3 (Qwen3), "
                                         "qwen2 (Qwen2.5), llama (Llama), qwen3_moe (Qwen3-MoE)"),
    "no_safetensors": ("qwen3", _no_safetensors, "no safetensors weights (model.safetensors, or shards with "
                                                 "model.safetensors.index.json); found pytorch_model.bin"),
    "missing_shard": (SHARDED, lambda d: (d / "model-00002-of-00008.safetensors").unlink(),
                      "model.safetensors.index.json names shard model-00002-of-00008.safetensors which is not in "
                      "the folder"),
    "tokenizer_does_not_load": ("qwen3", _bad_tokenizer, "tokenizer does not load"),
    "no_tokenizer": ("qwen3", lambda d: (d / "tokenizer.json").unlink(), "tokenizer does not load: no tokenizer file"),
    "no_chat_template": ("qwen3", _no_template, "no chat template: tokenizer_config.json has no chat_template and "
                                                "there is no chat_template.jinja"),
    "no_chat_template_in_config": ("qwen3_moe", lambda d: _drop_key(d / "tokenizer_config.json", "chat_template"),
                                   "no chat template"),
    "no_eos": ("llama", lambda d: _drop_key(d / "tokenizer_config.json", "eos_token"), "no eos token"),
}


def _drop_key(path: Path, key: str) -> None:
    cfg = json.loads(path.read_text())
    assert key in cfg
    del cfg[key]
    path.write_text(json.dumps(cfg))


@pytest.mark.parametrize("case", list(CASES))
def test_each_problem_is_one_line(case, folders, tmp_path):
    family, breaks, expected = CASES[case]
    d = _copy(folders[family], tmp_path / family)
    breaks(d)
    store = ArtifactStore(str(tmp_path / "store"))
    with pytest.raises(ModelImportError) as e:
        import_model(str(d), store)
    msg = str(e.value)
    assert expected in msg and "\n" not in msg and str(d) in msg, msg
    assert store.list() == []                       # nothing committed


def test_vocabulary_larger_than_the_model(tmp_path):
    """A tokenizer with ids at or past vocab_size belongs to other weights."""
    d = make_model_folder("qwen3", tmp_path / "small", vocab_size=320)   # the BPE has ~390 tokens
    with pytest.raises(ModelImportError) as e:
        import_model(str(d), ArtifactStore(str(tmp_path / "store")))
    assert "config.json vocab_size is 320" in str(e.value) and "has id" in str(e.value)


def test_config_that_does_not_describe_the_weights(folders, tmp_path):
    d = _copy(folders["llama"], tmp_path / "llama")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "vocab_size": cfg["vocab_size"] + 64}))
    with pytest.raises(ModelImportError, match=r"model.embed_tokens.weight has \d+ rows but config.json vocab_size"):
        import_model(str(d), ArtifactStore(str(tmp_path / "store")))


def test_missing_folder_and_bad_name(tmp_path, folders):
    store = ArtifactStore(str(tmp_path / "store"))
    with pytest.raises(ModelImportError, match="no such folder"):
        import_model(str(tmp_path / "nope"), store)
    with pytest.raises(ModelImportError, match="artifact name"):
        import_model(str(folders["qwen3"]), store, name="a/b")


def test_supported_families_are_the_tested_ones():
    assert set(SUPPORTED) == set(FAMILIES)
