"""Merge stage (provisional): one real mergekit merge of the thinking and domain SFT checkpoints.

The minimal version checks that base, thinking and domain share one
architecture (config.json) and one tokenizer (vocabulary), then runs
mergekit's Python API (``MergeConfiguration`` + ``run_merge``) on CPU with
``base_model`` = base, ``models`` = thinking (``thinking_weight``) and domain
(``domain_weight``), ``density`` and ``method`` (ties, task_arithmetic,
dare_ties) from the config. mergekit writes Qwen3-MoE experts in the fused
transformers-5 layout; the result is loaded with transformers (which proves
it loads), checked finite and re-saved, so every checkpoint in the store has
the same on-disk layout, with the base tokenizer. Distances of the merge to
its parents go in the manifest. The full version adds a sweep over
weights/densities scored on held-out suites and a TIES / Task Arithmetic /
DARE comparison table.
"""
from __future__ import annotations

import json
import logging
import tempfile
import time
from pathlib import Path

import torch
import yaml

from stages.common.model_factory import save_checkpoint
from stages.common.runner import StageInputError
from stages.common.store import Artifact, ArtifactWriter
from stages.merge.config import MergeConfig

PROVISIONAL = True
log = logging.getLogger("compass.merge")

# config.json keys that decide tensor names and shapes: all must agree to merge.
ARCH_KEYS = ("model_type", "architectures", "vocab_size", "hidden_size", "num_hidden_layers",
             "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
             "moe_intermediate_size", "num_experts", "num_local_experts", "num_experts_per_tok",
             "decoder_sparse_step", "mlp_only_layers", "tie_word_embeddings")
SLOTS = ("base", "thinking", "domain")


class MergeInputError(StageInputError):
    """The checkpoints cannot be merged (architecture or tokenizer differ)."""


def _arch(d: Path) -> dict:
    cfg = json.loads((d / "config.json").read_text())
    return {k: cfg.get(k) for k in ARCH_KEYS}


def check_compatible(arts: dict[str, Artifact], dirs: dict[str, Path]) -> None:
    """Raise MergeInputError naming both artifacts when a checkpoint's tokenizer or architecture differs from base's."""
    from transformers import AutoTokenizer
    ref = "base"
    ref_vocab = AutoTokenizer.from_pretrained(str(dirs[ref])).get_vocab()
    ref_arch = _arch(dirs[ref])
    for slot in SLOTS:
        if slot == ref:
            continue
        vocab = AutoTokenizer.from_pretrained(str(dirs[slot])).get_vocab()
        if vocab != ref_vocab:
            only_ref = sorted(set(ref_vocab) - set(vocab))
            only_other = sorted(set(vocab) - set(ref_vocab))
            moved = sorted(t for t in set(vocab) & set(ref_vocab) if vocab[t] != ref_vocab[t])
            raise MergeInputError(
                f"merge: tokenizers differ: {slot} checkpoint {arts[slot].uri} ({len(vocab)} tokens) vs "
                f"{ref} checkpoint {arts[ref].uri} ({len(ref_vocab)} tokens): "
                f"{len(only_ref)} only in {ref} {only_ref[:5]!r}, {len(only_other)} only in {slot} "
                f"{only_other[:5]!r}, {len(moved)} with another id {moved[:5]!r}; "
                "merging embeddings of different vocabularies mixes unrelated tokens")
        arch = _arch(dirs[slot])
        diff = [k for k in ARCH_KEYS if arch[k] != ref_arch[k]]
        if diff:
            what = ", ".join(f"{k}={arch[k]!r} vs {ref_arch[k]!r}" for k in diff)
            raise MergeInputError(
                f"merge: architectures differ: {slot} checkpoint {arts[slot].uri} vs {ref} checkpoint "
                f"{arts[ref].uri}: {what}; mergekit can only merge checkpoints of one architecture")


def mergekit_document(config: MergeConfig, refs: dict[str, str]) -> dict:
    """The mergekit YAML document (as a dict) for ``refs``: slot -> model path (or URI, for the record)."""
    def params(weight: float) -> dict:
        p = {"weight": weight}
        if config.method != "task_arithmetic":
            p["density"] = config.density
        return p
    doc = {"merge_method": config.method, "base_model": refs["base"],
           "models": [{"model": refs["thinking"], "parameters": params(config.thinking_weight)},
                      {"model": refs["domain"], "parameters": params(config.domain_weight)}],
           "dtype": config.dtype}
    if config.normalize is not None:
        doc["parameters"] = {"normalize": config.normalize}
    return doc


def _alias_dir(src: Path, root: Path) -> Path:
    """A directory of symlinks to ``src``'s files: mergekit refuses one path twice as merge input."""
    d = root / "alias"
    d.mkdir()
    for f in src.iterdir():
        (d / f.name).symlink_to(f.resolve())
    return d


def run_mergekit(config: MergeConfig, paths: dict[str, Path], out_dir: Path, scratch: Path) -> dict:
    """Run mergekit's ``run_merge`` on CPU into ``out_dir``; returns the document it ran."""
    from mergekit.config import MergeConfiguration
    from mergekit.io.tasks import LoaderCache
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions

    paths = dict(paths)
    if paths["domain"].resolve() == paths["thinking"].resolve():
        paths["domain"] = _alias_dir(paths["domain"], scratch)
    doc = mergekit_document(config, {k: str(v) for k, v in paths.items()})
    merge_config = MergeConfiguration.model_validate(doc)
    options = MergeOptions(device="cpu", copy_tokenizer=True, lazy_unpickle=False, low_cpu_memory=False,
                           write_model_card=False, random_seed=config.seed, quiet=True,
                           trust_remote_code=False, safe_serialization=True)
    try:
        run_merge(merge_config, str(out_dir), options)
    finally:
        # mergekit keeps one loader per model path in a process-wide cache: drop ours.
        cache = LoaderCache()
        for ref in merge_config.referenced_models():
            cache.loaders.pop(ref, None)
    return doc


def _distances(merged: dict, parents: dict[str, dict]) -> dict:
    base = parents["base"]
    out = {}
    with torch.no_grad():
        for slot, sd in parents.items():
            out[f"l2_to_{slot}"] = float(torch.sqrt(sum(((merged[k] - sd[k]).double() ** 2).sum() for k in merged)))
        for slot in ("thinking", "domain"):
            out[f"l2_{slot}_from_base"] = float(torch.sqrt(sum(((parents[slot][k] - base[k]).double() ** 2).sum()
                                                                 for k in base)))
        changed = sum(int((merged[k] != base[k]).sum()) for k in merged)
        out["fraction_changed_vs_base"] = changed / sum(v.numel() for v in merged.values())
    return out


def _body(config: MergeConfig, inputs: dict[str, Artifact], outputs: dict[str, ArtifactWriter]) -> None:
    t0 = time.perf_counter()
    dirs = {slot: inputs[slot].local_dir() for slot in SLOTS}
    check_compatible(inputs, dirs)
    out = outputs["checkpoint"]
    with tempfile.TemporaryDirectory(prefix="compass-merge-") as tmp:
        tmp = Path(tmp)
        raw = tmp / "mergekit_out"
        run_mergekit(config, dirs, raw, tmp)
        merge_s = time.perf_counter() - t0
        has_tok = (raw / "tokenizer.json").exists()
        if not has_tok:  # mergekit logs and goes on when it cannot copy the tokenizer
            log.warning("merge: mergekit wrote no tokenizer; using base's")
        model = _load_model(raw)  # transformers must load what mergekit wrote
        tok = _load_tokenizer(raw if has_tok else dirs["base"])
        merged = model.state_dict()
        bad = [k for k, v in merged.items() if not torch.isfinite(v).all()]
        if bad:
            raise RuntimeError(f"merge: mergekit produced non-finite weights in {bad[:5]} "
                               f"(method {config.method}, inputs {[inputs[s].uri for s in SLOTS]})")
        parents = {s: _load_model(dirs[s]).state_dict() for s in SLOTS}
        missing = sorted(set(parents["base"]) ^ set(merged))
        if missing:
            raise RuntimeError(f"merge: merged tensors do not match base's: {missing[:5]}")
        metrics = {"method": config.method, "density": config.density,
                   "thinking_weight": config.thinking_weight, "domain_weight": config.domain_weight,
                   "merge_s": merge_s, **_distances(merged, parents)}
        # Re-save through transformers: same on-disk layout as every other checkpoint.
        save_checkpoint(_canonical(model), tok, out.dir, meta={"stage": "merge", "provisional": PROVISIONAL, **metrics})
        record = mergekit_document(config, {s: inputs[s].uri for s in SLOTS})
        (out.path("mergekit_config.yml")).write_text(
            "# mergekit configuration of this merge (model paths shown as artifact URIs)\n"
            + yaml.safe_dump(record, sort_keys=False))
    log.info("merge: %s of thinking (w=%.2f) and domain (w=%.2f) onto base, density %.2f: "
             "|M-base| %.3f, |M-thinking| %.3f, |M-domain| %.3f (%.1fs)", config.method, config.thinking_weight,
             config.domain_weight, config.density, metrics["l2_to_base"], metrics["l2_to_thinking"],
             metrics["l2_to_domain"], time.perf_counter() - t0)
    out.extra.update(metrics)


def _load_model(d: Path):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32)


def _canonical(model):
    """The same weights in a model built from its config: transformers then saves it in its default
    (per-expert, pre-v5) layout, like every other checkpoint in the store. A model loaded from
    mergekit's fused tensors would be saved fused again (transformers reverts only the conversions
    it applied on load)."""
    from transformers import AutoModelForCausalLM
    fresh = AutoModelForCausalLM.from_config(model.config, dtype=model.dtype)
    fresh.load_state_dict(model.state_dict(), strict=True)
    fresh.generation_config = model.generation_config
    return fresh


def _load_tokenizer(d: Path):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(d))
    tok.padding_side = "left"
    return tok


from stages.merge.spec import SPEC, run  # noqa: E402,F401  (the stage's public contract)
