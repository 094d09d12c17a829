"""Evaluation stage: accuracy of a checkpoint on held-out suites.

Loads the checkpoint (``model``; ``ckpt_final`` in the pipeline), samples ``samples_per_prompt``
completions for every prompt of ``suites`` with transformers ``generate`` (greedy by default,
batched, prompts sorted by length: ``compass.lm.suite_scoring``), scores each with the gym
verifier named in the prompt's ``verifier`` column, and writes one ``eval_results`` row per
sample plus a ``report`` artifact: ``report.md`` (per suite: accuracy, mean score, finished and
closed-``</think>`` rates, mean length, accuracy per difficulty; example responses) and
``summary.json``. The suite of a prompt is its ``suite`` column when the table has one, else its
``domain``. Overall and per-suite accuracy go in the manifests' ``extra``.

Not done: pass@k and majority voting, GenRM-judged suites, vLLM generation and comparisons
between checkpoints. Public suites (MATH-500, AIME, IFEval, ...) are not bundled; an imported
``prompts`` table can stand in for ``eval_prompts`` (docs/import.md).
"""
from __future__ import annotations

import json
import logging
from collections import defaultdict

import pyarrow as pa

from compass.gym.reasons import is_verifier_fault
from compass.lm.model_factory import load_checkpoint
from compass.store.store import Artifact, ArtifactWriter
from stages.evaluation.config import EvalConfig
from compass.lm.suite_scoring import generate_and_score, summarize

log = logging.getLogger("compass.evaluation")

RESULTS_SCHEMA = pa.schema([
    pa.field("model", pa.string()), pa.field("suite", pa.string()), pa.field("prompt_id", pa.string()),
    pa.field("sample_idx", pa.int32()), pa.field("response", pa.string()), pa.field("score", pa.float64()),
    pa.field("correct", pa.bool_()), pa.field("difficulty", pa.int32()), pa.field("num_tokens", pa.int32()),
    pa.field("finished", pa.bool_()), pa.field("reason", pa.string()),
])
TOP_REASONS = 10


def render_report(model_uri: str, config: EvalConfig, summary: dict, results: list[dict],
                  prompts: dict[str, dict]) -> str:
    lines = ["# Evaluation report", "", f"Model: `{model_uri}`", "",
             f"Sampling: {'greedy' if config.temperature == 0 else f'temperature {config.temperature}'}, "
             f"{config.samples_per_prompt} sample(s) per prompt, at most {config.max_new_tokens} new tokens.", "",
             "| suite | prompts | samples | accuracy | mean score | finished | closed </think> | mean tokens |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in summary["suites"].items():
        lines.append(f"| {name} | {s['prompts']} | {s['samples']} | {s['accuracy']:.3f} | {s['mean_score']:.3f} | "
                     f"{s['finished_rate']:.2f} | {s['closed_think_rate']:.2f} | {s['mean_tokens']:.1f} |")
    if summary["overall_accuracy"] is not None:
        lines += ["", f"Overall accuracy: **{summary['overall_accuracy']:.3f}** over {summary['samples']} samples."]
    for name, s in summary["suites"].items():
        if s["accuracy_by_difficulty"]:
            lines += ["", f"## {name}: accuracy by difficulty", "", "| difficulty | accuracy |", "|---:|---:|"]
            lines += [f"| {d} | {a:.3f} |" for d, a in s["accuracy_by_difficulty"].items()]
    if summary.get("reasons"):
        lines += ["", f"## Why samples scored low: the {TOP_REASONS} most frequent verifier reasons", "",
                  "| reason | samples | fault |", "|---|---:|---|"]
        lines += [f"| `{code}` | {n} | {'verifier or data' if is_verifier_fault(code) else 'response'} |"
                  for code, n in list(summary["reasons"].items())[:TOP_REASONS]]
    if config.report_examples:
        lines += ["", "## Examples"]
        shown: dict[str, int] = defaultdict(int)
        for r in results:
            if shown[r["suite"]] >= config.report_examples:
                continue
            shown[r["suite"]] += 1
            p = prompts[r["prompt_id"]]
            lines += ["", f"**{r['suite']} / {r['prompt_id']}** (reference `{p['reference']}`, score {r['score']:.1f})",
                      "", "```text", p["prompt"], "--- response ---", r["response"], "```"]
    return "\n".join(lines) + "\n"


def _body(config: EvalConfig, inputs: dict[str, Artifact], outputs: dict[str, ArtifactWriter]) -> None:
    model_art = inputs["model"]
    rows = inputs["suites"].read_table().to_pylist()
    model, tok = load_checkpoint(model_art.local_dir())
    log.info("evaluating %s on %d prompts x %d sample(s)", model_art.uri, len(rows), config.samples_per_prompt)
    results = generate_and_score(model, tok, rows, model_art.uri, samples_per_prompt=config.samples_per_prompt,
                                 max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                                 seed=config.seed, batch_size=config.batch_size)
    summary = summarize(results)
    outputs["results"].write_table(pa.Table.from_pylist(results, schema=RESULTS_SCHEMA))
    rep = outputs["report"]
    rep.path("summary.json").write_text(json.dumps({"model": model_art.uri, "config": config.model_dump(mode="json"),
                                                    **summary}, indent=2, sort_keys=True) + "\n")
    rep.path("report.md").write_text(render_report(model_art.uri, config, summary, results,
                                                   {r["id"]: r for r in rows}))
    extra = {"model": model_art.uri, "overall_accuracy": summary["overall_accuracy"], "samples": len(results),
             "accuracy": {k: s["accuracy"] for k, s in summary["suites"].items()}}
    for w in outputs.values():
        w.extra.update(extra)
    for name, s in summary["suites"].items():
        log.info("%s: accuracy %.3f over %d samples", name, s["accuracy"], s["samples"])


from stages.evaluation.spec import SPEC, run  # noqa: E402,F401  (the stage's public contract)
