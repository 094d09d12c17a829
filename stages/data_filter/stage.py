"""Data filter stage (provisional): clean raw data, route it, and quarantine the rest.

The minimal version reads raw SFT samples and raw prompts, rejects rows that
are malformed (empty prompt or response, a ``<think>`` never closed, nothing
after ``</think>``, a verifier spec that does not parse), unverifiable (RL
prompt without a reference) or wrong (a teacher answer that does not verify
against the known reference), removes exact duplicates (normalized text hash)
and decontaminates against the eval prompts by word n-gram overlap
(``decontam_ngram``; short eval prompts are matched whole; n-grams shared by
many rows are template text and ignored). Kept reasoning samples (with
``<think>``) go to ``sft_longcot``, the others to ``sft_domain``; kept prompts
to ``rl_prompts`` with their difficulty. Every rejected row goes to
``quarantine`` with its source, row index, field, reason and the row as JSON,
and rows in = rows kept + rows quarantined is checked before anything is
written. The full version adds near-duplicate detection (MinHash), language
identification, length and repetition filters, more verifiers, and grading
of RL prompts by measured pass rate with a small model.
"""
from __future__ import annotations

import json
import logging
from collections import Counter

import pyarrow as pa

from stages.common.store import Artifact, ArtifactWriter
from stages.data_filter.config import DataFilterConfig
from stages.data_filter.filters import (Decontaminator, answer_reason, final_answer, is_reasoning, normalize,
                                        text_hash, think_reason, verifier_reason)

PROVISIONAL = True
log = logging.getLogger("compass.data_filter")

Rejection = tuple[str | None, str, str]   # field, reason, detail


def _sft_reason(cfg: DataFilterConfig, row: dict, refs: dict[str, tuple[str, str]]) -> Rejection | None:
    prompt, response = row.get("prompt") or "", row.get("response") or ""
    if not prompt.strip():
        return "prompt", "empty_prompt", ""
    if not response.strip():
        return "response", "empty_response", ""
    why = think_reason(response)
    if why:
        return "response", why, ""
    if not final_answer(response):
        return "response", "empty_answer", ""
    reference, verifier = row.get("reference"), row.get("verifier")
    if not reference:
        reference, verifier = refs.get(normalize(prompt), (None, None))
    why = verifier_reason(verifier)
    if why:
        return "verifier", why, str(verifier)
    if cfg.check_answers:
        why = answer_reason(response, reference, verifier)
        if why:
            return "response", why, f"final answer {final_answer(response)!r}, reference {reference!r}"
    return None


def _prompt_reason(cfg: DataFilterConfig, row: dict) -> Rejection | None:
    if not (row.get("prompt") or "").strip():
        return "prompt", "empty_prompt", ""
    if cfg.require_reference and not (row.get("reference") or "").strip():
        return "reference", "missing_reference", ""
    why = verifier_reason(row.get("verifier"))
    if why or (cfg.require_reference and not row.get("verifier")):
        return "verifier", why or "bad_verifier", str(row.get("verifier"))
    return None


def filter_rows(cfg: DataFilterConfig, sft_rows: list[dict], prompt_rows: list[dict],
                eval_prompts: list[str]) -> tuple[dict[str, dict[int, Rejection]], Decontaminator]:
    """Rejections per source (``sft``, ``prompts``): row index -> (field, reason, detail)."""
    refs: dict[str, tuple[str, str]] = {}
    for r in prompt_rows:
        if r.get("reference") and r.get("verifier"):
            refs.setdefault(normalize(r["prompt"]), (r["reference"], r["verifier"]))
    rejected: dict[str, dict[int, Rejection]] = {"sft": {}, "prompts": {}}
    for i, row in enumerate(sft_rows):
        why = _sft_reason(cfg, row, refs)
        if why:
            rejected["sft"][i] = why
    for i, row in enumerate(prompt_rows):
        why = _prompt_reason(cfg, row)
        if why:
            rejected["prompts"][i] = why

    # exact duplicates among the rows still kept: the first occurrence stays
    for src, rows, key in (("sft", sft_rows, lambda r: text_hash(r["prompt"], r["response"])),
                           ("prompts", prompt_rows, lambda r: text_hash(r["prompt"]))):
        first: dict[str, int] = {}
        for i, row in enumerate(rows):
            if i in rejected[src]:
                continue
            h = key(row)
            if h in first:
                rejected[src][i] = (None, "duplicate", f"same normalized text as row {first[h]}")
            else:
                first[h] = i

    decon = Decontaminator(eval_prompts, cfg.decontam_ngram, cfg.decontam_max_hits)
    candidates = {(src, i): row["prompt"] for src, rows in (("sft", sft_rows), ("prompts", prompt_rows))
                  for i, row in enumerate(rows) if i not in rejected[src]}
    for (src, i), gram in decon.flag(candidates).items():
        rejected[src][i] = ("prompt", "contaminated", f"shares eval n-gram {gram!r}")
    return rejected, decon


def _body(config: DataFilterConfig, inputs: dict[str, Artifact], outputs: dict[str, ArtifactWriter]) -> None:
    sft_tbl, prompt_tbl = inputs["sft"].read_table(), inputs["prompts"].read_table()
    eval_prompts = inputs["eval"].read_table().column("prompt").to_pylist()
    sft_rows, prompt_rows = sft_tbl.to_pylist(), prompt_tbl.to_pylist()
    rejected, decon = filter_rows(config, sft_rows, prompt_rows, eval_prompts)

    kept_sft = [i for i in range(len(sft_rows)) if i not in rejected["sft"]]
    longcot = [i for i in kept_sft if is_reasoning(sft_rows[i]["response"])]
    domain = [i for i in kept_sft if not is_reasoning(sft_rows[i]["response"])]
    kept_prompts = [i for i in range(len(prompt_rows)) if i not in rejected["prompts"]]

    q_rows = []
    for src, rows in (("sft", sft_rows), ("prompts", prompt_rows)):
        for i in sorted(rejected[src]):
            field, reason, detail = rejected[src][i]
            q_rows.append({"source": inputs[src].uri, "row_index": i, "field": field, "reason": reason,
                           "row_json": json.dumps(rows[i], ensure_ascii=False, sort_keys=True, default=str),
                           "slot": src, "detail": detail})
    reasons = {src: dict(sorted(Counter(r for _, r, _ in rejected[src].values()).items())) for src in rejected}
    summary = {
        "rows_in": {"sft": len(sft_rows), "prompts": len(prompt_rows)},
        "kept": {"sft_longcot": len(longcot), "sft_domain": len(domain), "rl_prompts": len(kept_prompts)},
        "quarantined": reasons,
        "boilerplate_ngrams": len(decon.boilerplate),
    }
    # nothing is lost silently: every input row is either kept or quarantined, once
    if len(longcot) + len(domain) + len(rejected["sft"]) != len(sft_rows) or \
            len(kept_prompts) + len(rejected["prompts"]) != len(prompt_rows):
        raise AssertionError(f"data_filter: counts do not balance: {summary}")

    outputs["sft_longcot"].write_table(sft_tbl.take(pa.array(longcot, pa.int64())))
    outputs["sft_domain"].write_table(sft_tbl.take(pa.array(domain, pa.int64())))
    outputs["rl_prompts"].write_table(prompt_tbl.take(pa.array(kept_prompts, pa.int64())))
    q_schema = pa.schema([pa.field("source", pa.string()), pa.field("row_index", pa.int64()),
                          pa.field("field", pa.string()), pa.field("reason", pa.string()),
                          pa.field("row_json", pa.string()), pa.field("slot", pa.string()),
                          pa.field("detail", pa.string())])
    outputs["quarantine"].write_table(pa.Table.from_pylist(q_rows, schema=q_schema))
    for w in outputs.values():
        w.extra.update(summary)
    log.info("sft: %d in -> %d longcot, %d domain, %d quarantined %s", len(sft_rows), len(longcot), len(domain),
             len(rejected["sft"]), reasons["sft"])
    log.info("prompts: %d in -> %d rl prompts, %d quarantined %s", len(prompt_rows), len(kept_prompts),
             len(rejected["prompts"]), reasons["prompts"])


from stages.data_filter.spec import SPEC, run  # noqa: E402,F401  (the stage's public contract)
