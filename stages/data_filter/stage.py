"""Data filter stage: clean raw data, route it, and quarantine the rest, streaming.

Reads raw SFT samples and raw RL prompts batch by batch (``DataFilterConfig.batch_rows``)
and screens every row (``screen.py``: malformed fields, reasoning structure and answers,
harmful content, exact and near duplicates, eval contamination). Kept reasoning samples
(with ``<think>``) stream to ``sft_longcot``, the other kept samples to ``sft_domain``;
kept prompts are collected (far fewer than SFT rows) and written to ``rl_prompts`` in one
place; every rejected row streams to ``quarantine`` with its source, row index, field,
reason, detail and the row as JSON. Before anything is committed, rows in = rows kept +
rows quarantined is checked per input, and every writer's ``extra`` gets the counts per
reason. Memory stays bounded: one batch of rows, the duplicate indexes (about 1 KiB per
kept row) and the kept prompts. See docs/data_filter.md.
"""
from __future__ import annotations

import json
import logging

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from artifacts_schema.tables import TABLE_SCHEMAS
from compass.store.store import Artifact, ArtifactWriter
from compass.store.layout import TABLE_FILE
from stages.data_filter import quality
from stages.data_filter.config import DataFilterConfig
from compass.dedup.decontam import Decontaminator
from stages.data_filter.harm import lookup as harm_filter
from stages.data_filter.screen import Screen
from compass.dedup.text import ngram_tokens
from compass.gym.score import THINK_OPEN

log = logging.getLogger("compass.data_filter")

QUARANTINE_SCHEMA = pa.schema([pa.field("source", pa.string()), pa.field("row_index", pa.int64()),
                               pa.field("field", pa.string()), pa.field("reason", pa.string()),
                               pa.field("row_json", pa.string()), pa.field("slot", pa.string()),
                               pa.field("detail", pa.string())])


def decontaminator(cfg: DataFilterConfig, evals: Artifact) -> Decontaminator:
    """The eval side of decontamination, from the eval prompts table (streamed; rows with bad text skipped)."""
    toks, suites, ids = [], [], []
    for batch in evals.iter_batches(batch_size=cfg.batch_rows):
        cols, why = quality.scan_batch(batch, cfg.max_field_chars)
        for i in range(batch.num_rows):
            if why[i] is None:
                toks.append(ngram_tokens(cols["prompt"][i]))
                suites.append(f"{cols['domain'][i]}/{cols['task'][i]}")
                ids.append(cols["id"][i])
    return Decontaminator(toks, n=cfg.decontam_ngram, max_hits=cfg.decontam_max_hits,
                          template_share=cfg.decontam_template_share, min_tokens=cfg.decontam_min_tokens,
                          suites=suites, ids=ids)


def _quarantine(source: Artifact, slot: str, start: int, why: list, batch: pa.RecordBatch) -> pa.Table | None:
    bad = [i for i, w in enumerate(why) if w is not None]
    if not bad:
        return None
    cols, _ = quality.scan_batch(batch.take(pa.array(bad, pa.int64())), 1 << 62)   # the rows' values, decoded safely
    rows = []
    for k, i in enumerate(bad):
        field, reason, detail = why[i]
        row = {name: values[k] for name, values in cols.items()}
        rows.append({"source": source.uri, "row_index": start + i, "field": field, "reason": reason,
                     "row_json": json.dumps(row, ensure_ascii=False, sort_keys=True, default=str),
                     "slot": slot, "detail": detail})
    return pa.Table.from_pylist(rows, schema=QUARANTINE_SCHEMA)


def _screen(source: Artifact, screen: Screen, cfg: DataFilterConfig, write_quarantine):
    """Yield (batch, kept row positions) per batch; rejected rows go to the quarantine. The per-row
    work runs here, or on Ray Data workers when ``ray_workers`` > 0 (the decisions stay here)."""
    if cfg.ray_workers:
        from stages.data_filter.ray_rows import ray_features
        pairs = ray_features(source, screen.work, cfg)
    else:
        pairs = ((batch, None) for batch in source.iter_batches(batch_size=cfg.batch_rows))
    for batch, features in pairs:
        start = screen.rows_in
        why = screen.batch(batch) if features is None else screen.decide(batch, features)
        q = _quarantine(source, screen.slot, start, why, batch)
        if q is not None:
            write_quarantine(q)
        yield batch, [i for i, w in enumerate(why) if w is None]


def _body(config: DataFilterConfig, inputs: dict[str, Artifact], outputs: dict[str, ArtifactWriter]) -> None:
    decon = decontaminator(config, inputs["eval"])
    harm = harm_filter(config.harm_filter)
    kept = {"sft_longcot": 0, "sft_domain": 0}
    with outputs["quarantine"].table_writer() as write_quarantine:
        # Prompts first: their references let the SFT pass check teacher answers.
        prompts = Screen(config, "prompts", decon, harm, rows_hint=inputs["prompts"].manifest.rows or 1)
        kept_prompts = [batch.take(pa.array(idx, pa.int64()))
                        for batch, idx in _screen(inputs["prompts"], prompts, config, write_quarantine) if idx]
        sft = Screen(config, "sft", decon, harm, refs=prompts.refs, rows_hint=inputs["sft"].manifest.rows or 1)
        with outputs["sft_longcot"].table_writer() as write_longcot, \
                outputs["sft_domain"].table_writer() as write_domain:
            for batch, idx in _screen(inputs["sft"], sft, config, write_quarantine):
                responses = batch.column("response").take(pa.array(idx, pa.int64()))
                reasoning = pc.match_substring(responses, THINK_OPEN).to_pylist()   # kept rows: valid text
                for name, write, rows in (("sft_longcot", write_longcot, [i for i, r in zip(idx, reasoning) if r]),
                                          ("sft_domain", write_domain, [i for i, r in zip(idx, reasoning) if not r])):
                    if rows:
                        write(batch.take(pa.array(rows, pa.int64())))
                        kept[name] += len(rows)
        prompts.refs.clear()

    # ---- rl_prompts: the one place kept prompts are written ----------------------------------
    # The SFT outputs are closed here (readable from outputs["sft_longcot"].path(...)), so a
    # step that needs the whole table of kept prompts (difficulty grading) goes right here.
    rl_prompts = (pa.Table.from_batches(kept_prompts, schema=prompts.schema) if prompts.schema is not None
                  else TABLE_SCHEMAS["prompts"].empty_table())
    rl_prompts, grading = _grade(config, rl_prompts, outputs, inputs.get("base"))
    outputs["rl_prompts"].write_table(rl_prompts)
    kept["rl_prompts"] = rl_prompts.num_rows
    # -------------------------------------------------------------------------------------------

    summary = {
        "rows_in": {"sft": sft.rows_in, "prompts": prompts.rows_in},
        "kept": kept,
        "quarantined": {"sft": dict(sorted(sft.reasons.items())), "prompts": dict(sorted(prompts.reasons.items()))},
        "decontamination": {"hits": sum(sft.eval_hits.values()) + sum(prompts.eval_hits.values()),
                            "eval_prompts_leaked": len(set(sft.eval_hits) | set(prompts.eval_hits)),
                            **decon.stats()},
        "harm_filter": config.harm_filter,
        "grading": grading,
    }
    _check_balance(summary, inputs, outputs)
    for w in outputs.values():
        w.extra.update(summary)
    log.info("sft: %d in -> %d longcot, %d domain, quarantined %s", sft.rows_in, kept["sft_longcot"],
             kept["sft_domain"], summary["quarantined"]["sft"])
    log.info("prompts: %d in -> %d rl prompts, quarantined %s", prompts.rows_in, kept["rl_prompts"],
             summary["quarantined"]["prompts"])
    log.info("decontamination: %s", summary["decontamination"])
    log.info("screen stats: %s", json.dumps({"sft": sft.summary(), "prompts": prompts.summary()}))


def _grade(config: DataFilterConfig, prompts: pa.Table, outputs: dict[str, ArtifactWriter],
           base: Artifact | None) -> tuple[pa.Table, dict]:
    """Difficulty by the grader's pass rate (``grading.py``); the grader trains on the kept SFT rows."""
    g = config.grading
    if not g.enabled or prompts.num_rows == 0:
        return prompts, {"graded": 0}
    if base is None and not g.model:
        log.warning("rl_prompts left ungraded: no grader (set grading.model, or give the stage a 'base' "
                    "checkpoint to train one from)")
        return prompts, {"graded": 0, "why": "no grader model"}
    from stages.data_filter.grading import grade
    sft = pa.concat_tables([pq.read_table(outputs[name].path(TABLE_FILE)) for name in ("sft_longcot", "sft_domain")],
                           promote_options="permissive")
    return grade(g, prompts, sft, base.local_dir() if base is not None else None)


def _check_balance(summary: dict, inputs: dict[str, Artifact], outputs: dict[str, ArtifactWriter]) -> None:
    """Nothing is lost silently: every input row is kept or quarantined, once. Raises before commit."""
    kept, quarantined = summary["kept"], summary["quarantined"]
    problems = []
    for slot, kept_n in (("sft", kept["sft_longcot"] + kept["sft_domain"]), ("prompts", kept["rl_prompts"])):
        declared, read = inputs[slot].manifest.rows, summary["rows_in"][slot]
        if read != declared or kept_n + sum(quarantined[slot].values()) != read:
            problems.append(f"{slot}: {declared} rows declared, {read} read, {kept_n} kept, "
                            f"{sum(quarantined[slot].values())} quarantined")
    written = {name: outputs[name].rows for name in ("sft_longcot", "sft_domain", "rl_prompts")}
    if written != {name: kept[name] for name in written}:
        problems.append(f"rows written {written} != rows kept {kept}")
    q_total = sum(sum(q.values()) for q in quarantined.values())
    if outputs["quarantine"].rows != q_total:
        problems.append(f"{outputs['quarantine'].rows} quarantine rows written, {q_total} counted")
    if problems:
        raise AssertionError(f"data_filter: counts do not balance: {'; '.join(problems)}")


from stages.data_filter.spec import SPEC, run  # noqa: E402,F401  (the stage's public contract)
