"""Evaluation stage (provisional): accuracy of a checkpoint on held-out suites.

The minimal version loads the checkpoint, samples ``samples_per_prompt``
completions for every eval prompt with transformers ``generate`` (greedy by
default, batched, prompts sorted by length), scores each with the gym
verifier named in the prompt's ``verifier`` column, and writes one
``eval_results`` row per sample plus a ``report`` artifact: ``report.md``
(accuracy per suite and per difficulty, examples) and ``summary.json``. The
suite of a prompt is its ``suite`` column when the table has one, else its
``domain``. The full version adds pass@k and majority voting, the public
suites (MATH-500, AIME, IFEval, multilingual MCQ), GenRM-judged suites,
vLLM generation, comparisons between checkpoints and plots.
"""
from __future__ import annotations

import json
import logging
from collections import defaultdict

import pyarrow as pa

from stages.common.lm import sample
from stages.common.model_factory import load_checkpoint
from stages.common.progress import progress
from stages.common.store import Artifact, ArtifactWriter
from stages.evaluation.config import EvalConfig
from stages.gym.provisional import THINK_CLOSE, score

PROVISIONAL = True
log = logging.getLogger("compass.evaluation")

RESULTS_SCHEMA = pa.schema([
    pa.field("model", pa.string()), pa.field("suite", pa.string()), pa.field("prompt_id", pa.string()),
    pa.field("sample_idx", pa.int32()), pa.field("response", pa.string()), pa.field("score", pa.float64()),
    pa.field("correct", pa.bool_()), pa.field("difficulty", pa.int32()), pa.field("num_tokens", pa.int32()),
    pa.field("finished", pa.bool_()),
])


def generate_and_score(config: EvalConfig, model, tok, rows: list[dict], model_uri: str) -> list[dict]:
    """One result dict per (prompt, sample), in the order of ``rows``."""
    order = sorted(range(len(rows)), key=lambda i: (len(rows[i]["prompt"]), i))
    completions: dict[int, list[dict]] = {}
    bs = config.batch_size
    for b, start in enumerate(progress(range(0, len(order), bs), total=-(-len(order) // bs), desc="eval",
                                       unit="batch")):
        idx = order[start:start + bs]
        outs = sample(model, tok, [rows[i]["prompt"] for i in idx], n=config.samples_per_prompt,
                      max_new_tokens=config.max_new_tokens, temperature=config.temperature, seed=config.seed + b)
        completions.update(zip(idx, outs))
    results = []
    for i, row in enumerate(rows):
        suite = row.get("suite") or row["domain"]
        for k, c in enumerate(completions[i]):
            s = score(row["verifier"], c["text"], row["reference"])
            results.append({"model": model_uri, "suite": suite, "prompt_id": row["id"], "sample_idx": k,
                            "response": c["text"], "score": s, "correct": s >= 1.0,
                            "difficulty": row.get("difficulty"), "num_tokens": len(c["ids"]),
                            "finished": tok.eos_token_id in c["ids"]})
    return results


def summarize(results: list[dict]) -> dict:
    """Per suite: prompts, samples, accuracy (mean of ``correct``), mean score, mean tokens,
    share of samples that ended (eos) and accuracy per difficulty."""
    by_suite: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        by_suite[r["suite"]].append(r)
    suites = {}
    for name in sorted(by_suite):
        rs = by_suite[name]
        by_diff: dict[int, list[bool]] = defaultdict(list)
        for r in rs:
            if r["difficulty"] is not None:
                by_diff[int(r["difficulty"])].append(r["correct"])
        suites[name] = {
            "prompts": len({r["prompt_id"] for r in rs}),
            "samples": len(rs),
            "accuracy": sum(r["correct"] for r in rs) / len(rs),
            "mean_score": sum(r["score"] for r in rs) / len(rs),
            "mean_tokens": sum(r["num_tokens"] for r in rs) / len(rs),
            "finished_rate": sum(r["finished"] for r in rs) / len(rs),
            "closed_think_rate": sum(THINK_CLOSE in r["response"] for r in rs) / len(rs),
            "accuracy_by_difficulty": {str(d): sum(v) / len(v) for d, v in sorted(by_diff.items())},
        }
    n = len(results)
    return {"suites": suites, "samples": n,
            "overall_accuracy": (sum(r["correct"] for r in results) / n) if n else None}


def greedy_score(model, tok, rows: list[dict], *, max_new_tokens: int, seed: int, model_uri: str,
                 batch_size: int | None = None) -> dict:
    """Greedy, one sample per prompt: ``summarize(generate_and_score(...))`` of ``model`` on ``rows``
    (``batch_size`` None: EvalConfig's). The model is in eval mode meanwhile, then back in its mode.
    The scorer of the SFT stage's held-out suites and of the merge sweep's dev suite."""
    cfg = EvalConfig(seed=seed, samples_per_prompt=1, max_new_tokens=max_new_tokens, temperature=0.0,
                     report_examples=0, **({} if batch_size is None else {"batch_size": batch_size}))
    was_training = model.training
    model.eval()
    try:
        return summarize(generate_and_score(cfg, model, tok, rows, model_uri))
    finally:
        model.train(was_training)


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
    results = generate_and_score(config, model, tok, rows, model_art.uri)
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
