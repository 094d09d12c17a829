"""Merge stage: mergekit merges of the thinking and domain SFT checkpoints onto their base.

First it checks that base, thinking and domain share one architecture
(config.json) and one tokenizer (vocabulary), and refuses with both URIs
otherwise. A merge runs mergekit's Python API (``MergeConfiguration`` +
``run_merge``) on CPU with ``base_model`` = base, ``models`` = thinking and
domain with their weights, ``density`` and ``method`` (ties, task_arithmetic,
dare_ties). mergekit writes Qwen3-MoE experts in the fused transformers-5
layout; the kept result is loaded with transformers (which proves it loads),
checked finite and re-saved, so every checkpoint in the store has the same
on-disk layout, with the base tokenizer. Distances to its parents go in the
manifest.

Without ``sweep`` the stage makes one merge and writes an empty sweep table.
With ``sweep`` (paper §2.3: the Long-CoT weight decides the result; TIES
against TA and DARE) it draws a seeded dev suite from the ``dev`` input,
scores both parents and every candidate (method x Long-CoT weight x density)
greedily with ``compass.lm.suite_scoring`` (the evaluation stage's scoring),
keeps the candidate with the largest smallest margin to a parent on the
parents' home domains (stages/merge/sweep.py), and writes the table method x
weight -> dev scores (``sweep``) and ``summary.md``. Scores are saved after
every candidate in the run's state directory, so a run killed mid-sweep
resumes where it stopped; the best candidate's mergekit output so far is kept
there too, and the winner's is re-saved as the checkpoint at the end (it is
not merged again).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
import yaml

import pyarrow as pa

from artifacts_schema.tables import TABLE_SCHEMAS
from compass.lm.model_factory import save_checkpoint
from compass.runtime.runner import StageInputError
from compass.runtime.stage_state import load_state, save_state, state_dir_for
from compass.store.store import Artifact, ArtifactWriter
from stages.merge import sweep as sw
from stages.merge.config import MergeConfig

STATE_FILE = "sweep_state.pt"
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
    """Run mergekit's ``run_merge`` on ``config.device`` (the GPU when there is one) into ``out_dir``; returns the
    document it ran."""
    from mergekit.config import MergeConfiguration
    from mergekit.io.tasks import LoaderCache
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions

    paths = dict(paths)
    if paths["domain"].resolve() == paths["thinking"].resolve():
        paths["domain"] = _alias_dir(paths["domain"], scratch)
    doc = mergekit_document(config, {k: str(v) for k, v in paths.items()})
    merge_config = MergeConfiguration.model_validate(doc)
    from compass.lm.device import resolve_device
    options = MergeOptions(device=str(resolve_device(config.device)), copy_tokenizer=True, lazy_unpickle=False, low_cpu_memory=False,
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


def _merge_checkpoint(config: MergeConfig, inputs: dict[str, Artifact], dirs: dict[str, Path],
                      out: ArtifactWriter) -> dict:
    """Merge with ``config`` into ``out`` (checked, re-saved through transformers); returns the metrics."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="compass-merge-") as tmp:
        tmp = Path(tmp)
        raw = tmp / "mergekit_out"
        run_mergekit(config, dirs, raw, tmp)
        return _save_merge(config, inputs, dirs, raw, out, time.perf_counter() - t0)


def _save_merge(config: MergeConfig, inputs: dict[str, Artifact], dirs: dict[str, Path], raw: Path,
                out: ArtifactWriter, merge_s: float) -> dict:
    """What mergekit wrote in ``raw`` (with ``config``, in ``merge_s`` seconds), loaded, checked and re-saved
    through transformers into ``out``; returns the metrics."""
    t0 = time.perf_counter()
    has_tok = (raw / "tokenizer.json").exists()
    if not has_tok:  # mergekit logs and goes on when it cannot copy the tokenizer
        log.warning("merge: mergekit wrote no tokenizer; using base's")
    model = _load_model(raw)  # transformers must load what mergekit wrote
    tok = _load_tokenizer(raw if has_tok else dirs["base"])
    merged = model.state_dict()
    _check_finite(merged, config, inputs)
    parents = {s: _load_model(dirs[s]).state_dict() for s in SLOTS}
    missing = sorted(set(parents["base"]) ^ set(merged))
    if missing:
        raise RuntimeError(f"merge: merged tensors do not match base's: {missing[:5]}")
    metrics = {"method": config.method, "density": config.density,
               "thinking_weight": config.thinking_weight, "domain_weight": config.domain_weight,
               "merge_s": merge_s, **_distances(merged, parents)}
    # Re-save through transformers: same on-disk layout as every other checkpoint.
    save_checkpoint(_canonical(model), tok, out.dir, meta={"stage": "merge", **metrics})
    record = mergekit_document(config, {s: inputs[s].uri for s in SLOTS})
    (out.path("mergekit_config.yml")).write_text(
        "# mergekit configuration of this merge (model paths shown as artifact URIs)\n"
        + yaml.safe_dump(record, sort_keys=False))
    log.info("merge: %s of thinking (w=%.2f) and domain (w=%.2f) onto base, density %.2f: "
             "|M-base| %.3f, |M-thinking| %.3f, |M-domain| %.3f (%.1fs)", config.method, config.thinking_weight,
             config.domain_weight, config.density, metrics["l2_to_base"], metrics["l2_to_thinking"],
             metrics["l2_to_domain"], merge_s + time.perf_counter() - t0)
    return metrics


def _check_finite(sd: dict, config: MergeConfig, inputs: dict[str, Artifact]) -> None:
    bad = [k for k, v in sd.items() if not torch.isfinite(v).all()]
    if bad:
        raise RuntimeError(f"merge: mergekit produced non-finite weights in {bad[:5]} "
                           f"(method {config.method}, inputs {[inputs[s].uri for s in SLOTS]})")


# Called as on_candidate_scored(n_scored_this_run, candidate) after each candidate's result is saved
# (tests inject a kill here to prove the resume).
on_candidate_scored = None


def _score(model, tok, dev: list[dict], sweep, uri: str, device: str = "auto") -> dict:
    from compass.lm.device import resolve_device
    from compass.lm.suite_scoring import greedy_score
    model.to(resolve_device(device))             # scored where the config says; its weights stay fp32
    per_domain = sw.domain_scores(greedy_score(model, tok, dev, max_new_tokens=sweep.max_new_tokens, seed=sweep.seed,
                                               model_uri=uri, batch_size=sweep.batch_size))
    return {"domains": per_domain, "home": sw.home_scores(per_domain, sweep)}


def _drop_stale(state_dir: Path, kept: dict | None) -> None:
    """Remove candidate scratch and merges the state does not name (left by a kill between a
    merge's rename and the state's save, or between that save and the old merge's removal)."""
    for d in state_dir.glob("cand-*"):
        shutil.rmtree(d, ignore_errors=True)
    for d in state_dir.glob("kept-*"):
        if kept is None or d.name != kept["dir"]:
            shutil.rmtree(d, ignore_errors=True)


def _run_sweep(config: MergeConfig, inputs: dict[str, Artifact], dirs: dict[str, Path],
               outputs: dict[str, ArtifactWriter]) -> dict:
    """Score both parents and every candidate on dev (resuming from saved state), keep the best.

    The mergekit output of the best candidate so far is kept in the state directory (``kept-<i>``,
    named by ``state["kept"]``, replaced when a better one appears), so the winner is saved from it
    at the end without merging it again, also after a resume."""
    sweep = config.sweep
    dev_art = inputs["dev"]
    dev = sw.draw_dev(dev_art.read_table().to_pylist(), sweep)
    for w in sw.check_dev(dev, sweep, dev_art.uri):
        log.warning("merge: %s", w)
    cands = sw.candidates(config)
    state_dir = state_dir_for(outputs["checkpoint"])
    state = load_state(state_dir, STATE_FILE) or {"parents": {}, "candidates": {}}
    state.setdefault("kept", None)
    resumed = len(state["candidates"])
    state_dir.mkdir(parents=True, exist_ok=True)
    _drop_stale(state_dir, state["kept"])
    if state["parents"] or resumed:
        log.info("merge: resuming the sweep from %s (%d candidate(s) already scored)", state_dir, resumed)
    tok = _load_tokenizer(dirs["base"])
    for home in sw.HOMES:
        if home not in state["parents"]:
            state["parents"][home] = _score(_load_model(dirs[home]), tok, dev, sweep, inputs[home].uri, config.device)
            save_state(state_dir, STATE_FILE, state)
        log.info("merge: %s parent: dev thinking home %.3f, domain home %.3f", home,
                 state["parents"][home]["home"]["thinking"], state["parents"][home]["home"]["domain"])
    parents = state["parents"]
    n_new = 0
    t0 = time.perf_counter()
    for i, c in enumerate(cands):
        if c.name in state["candidates"]:
            continue
        # scratch in the state directory: the merge is moved from it (one rename) when it is the best so far
        with tempfile.TemporaryDirectory(prefix="cand-", dir=state_dir) as tmp:
            tmp = Path(tmp)
            mc = c.merge_config(config)
            t1 = time.perf_counter()
            run_mergekit(mc, dirs, tmp / "out", tmp)
            merge_s = time.perf_counter() - t1
            model = _load_model(tmp / "out")
            _check_finite(model.state_dict(), mc, inputs)
            res = _score(model, tok, dev, sweep, c.name, config.device)
            del model
            res["margins"] = sw.margins(res["home"], parents)
            state["candidates"][c.name] = res
            so_far = [(d, state["candidates"][d.name]) for d in cands if d.name in state["candidates"]]
            old = state["kept"]
            better = so_far[sw.select(so_far)][0] is c
            if better:
                os.replace(tmp / "out", state_dir / f"kept-{i}")
                state["kept"] = {"candidate": c.name, "dir": f"kept-{i}", "merge_s": merge_s}
            save_state(state_dir, STATE_FILE, state)
        if better and old is not None:
            shutil.rmtree(state_dir / old["dir"], ignore_errors=True)
        n_new += 1
        log.info("merge: %s: dev thinking home %.3f, domain home %.3f, min margin %+.3f", c.name,
                 res["home"]["thinking"], res["home"]["domain"], res["margins"]["min"])
        if on_candidate_scored is not None:
            on_candidate_scored(n_new, c)
    scored = [(c, state["candidates"][c.name]) for c in cands]
    chosen = sw.select(scored)
    best, res = scored[chosen]
    outputs["sweep"].write_table(pa.Table.from_pylist(sw.table_rows(parents, scored, chosen, sweep),
                                                      schema=TABLE_SCHEMAS["merge_sweep"]))
    kept = state["kept"]
    if kept is not None and kept["candidate"] == best.name and (state_dir / kept["dir"]).is_dir():
        metrics = _save_merge(best.merge_config(config), inputs, dirs, state_dir / kept["dir"],
                              outputs["checkpoint"], kept["merge_s"])
    else:  # not expected (the state always names the best scored candidate's merge): merge it again
        log.warning("merge: the kept merge of %s is missing from %s: merging it again", best.name, state_dir)
        metrics = _merge_checkpoint(best.merge_config(config), inputs, dirs, outputs["checkpoint"])
    outputs["checkpoint"].path("summary.md").write_text(
        sw.render_summary(parents, scored, chosen, sweep, dev_art.uri, len(dev), resumed))
    headline = {"selected": best.name, "selected_method": best.method, "selected_thinking_weight": best.thinking_weight,
                "selected_domain_weight": best.domain_weight, "selected_density": best.density,
                "dev_prompts": len(dev), "dev_scores": res["home"],
                "dev_parent_scores": {h: parents[h]["home"] for h in sw.HOMES},
                "dev_margins": res["margins"], "candidates": len(cands), "resumed_candidates": resumed,
                "sweep_s": time.perf_counter() - t0}
    log.info("merge: kept %s (dev min margin to a parent %+.3f)", best.name, res["margins"]["min"])
    return {**metrics, **headline}


def _body(config: MergeConfig, inputs: dict[str, Artifact], outputs: dict[str, ArtifactWriter]) -> None:
    dirs = {slot: inputs[slot].local_dir() for slot in SLOTS}
    check_compatible(inputs, dirs)
    if config.sweep is not None:
        if "dev" not in inputs:
            raise StageInputError("merge: the sweep scores its candidates on a dev suite: give the 'dev' input "
                                  "(a prompts table the SFT never saw, not the evaluation suites, e.g. "
                                  "data_filter's rl_prompts), or drop merge.sweep for a single merge")
        extra = _run_sweep(config, inputs, dirs, outputs)
    else:
        if "dev" in inputs:
            log.info("merge: no sweep configured: the dev input %s is not scored", inputs["dev"].uri)
        extra = _merge_checkpoint(config, inputs, dirs, outputs["checkpoint"])
        # Nothing was scored: the sweep table has no rows (configure a one-candidate sweep to score one merge).
        outputs["sweep"].write_table(TABLE_SCHEMAS["merge_sweep"].empty_table())
    for w in outputs.values():
        w.extra.update(extra)


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
