"""Evaluation stage: accuracy of every checkpoint a run produced, on held-out suites.

Loads each checkpoint given (``model``, the one evaluated: ``ckpt_final`` in the pipeline; optionally
``base``, ``sft_longcot``, ``sft_domain``, ``merged``, ``phase1``: the earlier ones), samples
``samples_per_prompt`` completions for every prompt of ``suites`` through the RL engine's rollout
backend (``backend``: the native KV-cache decoder where it supports the model, else transformers
``generate``; or vLLM; on ``workers`` Ray actors when set; greedy by default, batched, prompts sorted by
length: ``compass.lm.suite_scoring``, ``compass.rl.rollout.sampler``), scores each
with the gym verifier named in the prompt's ``verifier`` column, and writes one ``eval_results`` row
per (checkpoint, sample) plus a ``report`` artifact. ``report.md``: the checkpoint × suite table with
the change each stage made (the paper's Tables 2–5 shape: a stage against the checkpoint it started
from), each figure ± its standard error over prompts and each change ± its SE paired by prompt, the same table
for the mean score (partial credit) and, with ``sampled``, for mean@k from a second decoding of the same run (k
samples per prompt at a temperature; rows marked ``decoding``), pass@k / mean@k / maj@k with several samples
(``compass.lm.sample_metrics``), then the evaluated
checkpoint's details (per suite: accuracy, mean score, finished and closed-``</think>`` rates, mean
length, accuracy per difficulty, the verifiers' reasons; example responses); ``checkpoints.png`` the
table as bars. ``summary.json`` holds the same numbers. The suite of a prompt is its ``suite`` column when the table has one, else its
``domain``. The evaluated checkpoint's accuracy per suite and every checkpoint's go in the manifests'
``extra``.

With a ``genrm`` input (the pipeline gives the run's GenRM), the samples of open-ended prompts (verifier
``title_rules``: product titles) and of ``genrm`` ones are judged by it against the reference in both
orders: their score is the judge's, and the report gives win / tie / loss, malformed verdicts, swap
consistency and agreement with the rules per checkpoint (``stages/evaluation/judged.py``).

With ``lm_eval`` set, lm-evaluation-harness tasks run on the chosen checkpoints too (``lm_eval.json`` and a
table in the report). Public suites (MATH-500, AIME, IFEval, ...) are not bundled; an imported ``prompts``
table can stand in for ``eval_prompts`` (docs/import.md).
"""
from __future__ import annotations

import json
import logging
from collections import defaultdict

import pyarrow as pa

from compass.lm.device import place_for_inference
from compass.gym.genrm_judge import GenRMJudge
from compass.gym.reasons import is_verifier_fault
from compass.gym.score import needs_judge
from compass.lm.model_factory import load_checkpoint
from compass.store.store import Artifact, ArtifactWriter
from compass.lm.lm_eval_adapter import run_lm_eval
from compass.lm.sample_metrics import k_metrics, paired_se, values_by_prompt
from compass.lm.suite_scoring import generate_and_score, summarize
from compass.rl.rollout.sampler import open_sampler
from stages.evaluation.config import EvalConfig
from stages.evaluation.judged import judge_results, judged_rows, judged_summary, judged_table
from stages.evaluation.spec import CHECKPOINTS

log = logging.getLogger("compass.evaluation")

RESULTS_SCHEMA = pa.schema([
    pa.field("checkpoint", pa.string()), pa.field("model", pa.string()), pa.field("suite", pa.string()),
    pa.field("language", pa.string()), pa.field("prompt_id", pa.string()),
    pa.field("sample_idx", pa.int32()), pa.field("response", pa.string()), pa.field("score", pa.float64()),
    pa.field("correct", pa.bool_()), pa.field("difficulty", pa.int32()), pa.field("num_tokens", pa.int32()),
    pa.field("finished", pa.bool_()), pa.field("reason", pa.string()),
    # "main": the config's decoding (greedy by default); "sampled": the mean@k pass (config ``sampled``)
    pa.field("decoding", pa.string()),
    # judged by the GenRM (stages/evaluation/judged.py); null elsewhere
    pa.field("verdict", pa.string()), pa.field("consistent", pa.bool_()), pa.field("rule_score", pa.float64()),
])
TOP_REASONS = 10
LABELS = {"base": "base", "sft_longcot": "Long-CoT SFT", "sft_domain": "domain SFT", "merged": "merged",
          "phase1": "reasoning RL", "model": "final"}


def _parent(slot: str, present: list[str]) -> str | None:
    """The checkpoint ``slot``'s stage started from, or the nearest earlier one that was evaluated."""
    p = CHECKPOINTS[slot]
    while p is not None and p not in present:
        p = CHECKPOINTS[p]
    return p


def per_prompt(rows: list[dict]) -> dict[str, dict[str, dict[str, list[float]]]]:
    """suite -> metric ("accuracy": correct as 0/1, "mean_score": score) -> prompt id -> its samples' values:
    what the standard errors and the paired changes are computed from."""
    by_suite: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_suite[r["suite"]].append(r)
    return {suite: {"accuracy": values_by_prompt(rs, "correct"), "mean_score": values_by_prompt(rs, "score")}
            for suite, rs in by_suite.items()}


def _pm(x: float | None, se: float | None) -> str:
    return "—" if x is None else f"{x:.3f}" + ("" if se is None else f" ± {se:.3f}")


def _delta(x: float, old: float, new_vals: dict | None, old_vals: dict | None) -> str:
    se = paired_se(new_vals, old_vals) if new_vals is not None and old_vals is not None else None
    return f" ({x - old:+.3f}" + ("" if se is None else f" ± {se:.3f}") + ")"


def _all_prompts(v: dict, metric: str) -> dict | None:
    pp = v.get("per_prompt")
    return {pid: vals for suite in pp.values() for pid, vals in suite[metric].items()} if pp else None


def checkpoint_table(by_ckpt: dict[str, dict], metric: str = "accuracy", decoding: str = "main") -> list[str]:
    """Markdown: one row per checkpoint (recipe order), ``metric`` (accuracy or mean_score) per suite and
    overall, each ± its standard error over prompts, with the change from the checkpoint its stage started
    from (± the SE of that change, paired by prompt). ``decoding``: "main" or "sampled" (the mean@k pass)."""
    def view(v):
        return v if decoding == "main" else v.get("sampled")
    present = [slot for slot, v in by_ckpt.items() if view(v)]
    suites = sorted({s for slot in present for s in view(by_ckpt[slot])["suites"]})
    lines = ["| checkpoint | " + " | ".join(suites) + " | overall |", "|---|" + "---:|" * (len(suites) + 1)]
    for slot in present:
        v, p = view(by_ckpt[slot]), _parent(slot, present)
        parent = view(by_ckpt[p]) if p else None
        cells = []
        for s in suites:
            cur, old = v["suites"].get(s, {}), parent["suites"].get(s, {}) if parent else {}
            x = cur.get(metric)
            cell = _pm(x, cur.get(f"{metric}_se"))
            if x is not None and old.get(metric) is not None:
                pp, op = v.get("per_prompt", {}).get(s), parent.get("per_prompt", {}).get(s)
                cell += _delta(x, old[metric], pp and pp[metric], op and op[metric])
            cells.append(cell)
        x, old = v.get(f"overall_{metric}"), parent.get(f"overall_{metric}") if parent else None
        cell = _pm(x, v.get(f"overall_{metric}_se"))
        if x is not None and old is not None:
            cell += _delta(x, old, _all_prompts(v, metric), _all_prompts(parent, metric))
        cells.append(cell)
        lines.append(f"| {LABELS[slot]} | " + " | ".join(cells) + " |")
    return lines


def language_table(by_ckpt: dict[str, dict]) -> list[str]:
    """Markdown: accuracy per language of every suite whose prompts come in several languages (the paper's
    multilingual tables), one column per checkpoint; [] when no suite has two languages."""
    rows = []
    for suite in sorted({s for v in by_ckpt.values() for s in v["suites"]}):
        langs = sorted({lang for v in by_ckpt.values() for lang in v["suites"].get(suite, {}).get("accuracy_by_language", {})})
        if len(langs) < 2:
            continue
        for lang in langs:
            n = next((v["suites"][suite]["samples_by_language"].get(lang) for v in by_ckpt.values()
                      if suite in v["suites"]), None)
            cells = []
            for v in by_ckpt.values():
                acc = v["suites"].get(suite, {}).get("accuracy_by_language", {}).get(lang)
                cells.append("—" if acc is None else f"{acc:.3f}")
            rows.append(f"| {suite} | {lang} | {n} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    return (["| suite | language | samples | " + " | ".join(LABELS[s] for s in by_ckpt) + " |",
             "|---|---|---:|" + "---:|" * len(by_ckpt)] + rows)


def lm_eval_table(lm_eval: dict[str, dict]) -> list[str]:
    """Markdown: one row per (task, metric), one column per checkpoint lm-eval ran on."""
    if not lm_eval:
        return []
    keys = sorted({(t, k) for m in lm_eval.values() for t, ms in m.items() for k in ms if k != "samples"})
    lines = ["| task | metric | " + " | ".join(LABELS[s] for s in lm_eval) + " |",
             "|---|---|" + "---:|" * len(lm_eval)]
    for t, k in keys:
        cells = [f"{m[t][k]:.3f}" if k in m.get(t, {}) else "—" for m in lm_eval.values()]
        lines.append(f"| {t} | {k} | " + " | ".join(cells) + " |")
    return lines


def k_table(by_ckpt: dict[str, dict]) -> list[str]:
    """Markdown: pass@k / mean@k / maj@k per checkpoint and suite (several samples per prompt)."""
    lines = ["| checkpoint | suite | k | mean@k | maj@k | pass@k (k = 1, 2, 4, ...) |", "|---|---|---:|---:|---:|---|"]
    for slot, v in by_ckpt.items():
        for suite, m in v["k"].items():
            passes = ", ".join(f"@{k} {x:.3f}" for k, x in m["pass"].items())
            lines.append(f"| {LABELS[slot]} | {suite} | {m['k']} | {m['mean']:.3f} | {m['maj']:.3f} | {passes} |")
    return lines


def plot_checkpoints(by_ckpt: dict[str, dict], path) -> None:
    """``checkpoints.png``: accuracy per suite, one bar per checkpoint in recipe order."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    suites = sorted({s for v in by_ckpt.values() for s in v["suites"]})
    width = 0.8 / max(len(by_ckpt), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(suites)), 3.6))
    for i, (slot, v) in enumerate(by_ckpt.items()):
        xs = [j + (i - (len(by_ckpt) - 1) / 2) * width for j in range(len(suites))]
        ax.bar(xs, [v["suites"].get(s, {}).get("accuracy", 0.0) for s in suites], width, label=LABELS[slot])
    ax.set_xticks(range(len(suites)), suites)
    ax.set_ylabel("held-out accuracy")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, ncols=min(len(by_ckpt), 6), loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


SE_NOTE = ("Each figure ± one standard error over prompts; in brackets, the change from the checkpoint the stage "
           "started from, ± its standard error paired by prompt.")


def _decoding(temperature: float) -> str:
    return "greedy" if temperature == 0 else f"temperature {temperature}"


def scoreboard(by_ckpt: dict[str, dict], config: EvalConfig, heading: str = "###") -> list[str]:
    """Markdown: the mean score table, then with ``config.sampled`` the mean@k and its mean score tables."""
    lines = ["", f"{heading} Mean score (partial credit, the scale RL rewards)", ""]
    lines += checkpoint_table(by_ckpt, "mean_score")
    if config.sampled:
        k, t = config.sampled.k, config.sampled.temperature
        lines += ["", f"{heading} mean@{k} at temperature {t} ({k} samples per prompt, the same run)", ""]
        lines += checkpoint_table(by_ckpt, "accuracy", "sampled")
        lines += ["", f"{heading} Mean score, {k} samples per prompt at temperature {t}", ""]
        lines += checkpoint_table(by_ckpt, "mean_score", "sampled")
    return lines


def summary_md(by_ckpt: dict[str, dict], config: EvalConfig, lm_eval: dict | None = None) -> str:
    """The held-out results in short, for orchestrators (``compass.runtime.stage_summary``)."""
    lines = [f"## Held-out accuracy ({_decoding(config.temperature)}, {config.samples_per_prompt} sample(s) per "
             f"prompt)", "", SE_NOTE, ""]
    lines += checkpoint_table(by_ckpt)
    lines += ["", "![accuracy per suite and checkpoint](checkpoints.png)"]
    lines += scoreboard(by_ckpt, config)
    if langs := language_table(by_ckpt):
        lines += ["", "### Per language", ""] + langs
    if config.samples_per_prompt > 1:
        lines += ["", "### pass@k, mean@k, maj@k", ""] + k_table(by_ckpt)
    if judged := judged_table(by_ckpt, LABELS):
        lines += ["", "### Judged by the GenRM (both orders, against the reference)", ""] + judged
    if lm_eval:
        lines += ["", "### lm-evaluation-harness", ""] + lm_eval_table(lm_eval)
    return "\n".join(lines) + "\n"


def render_report(model_uri: str, config: EvalConfig, summary: dict, results: list[dict],
                  prompts: dict[str, dict], by_ckpt: dict[str, dict] | None = None,
                  lm_eval: dict | None = None) -> str:
    lines = ["# Evaluation report", "", f"Model: `{model_uri}`", "",
             f"Sampling: {_decoding(config.temperature)}, "
             f"{config.samples_per_prompt} sample(s) per prompt, at most {config.max_new_tokens} new tokens"
             + (f"; and {config.sampled.k} samples per prompt at temperature {config.sampled.temperature} (mean@k)"
                if config.sampled else "") + ".", ""]
    if by_ckpt and len(by_ckpt) > 1:
        lines += ["## Every checkpoint of the run", "",
                  "Accuracy per suite; in brackets, the change from the checkpoint the stage started from "
                  "(SFT: base; merge: Long-CoT SFT; reasoning RL: merged; final: reasoning RL). " + SE_NOTE, ""]
        lines += checkpoint_table(by_ckpt) + [""]
        lines += ["![accuracy per suite and checkpoint](checkpoints.png)"]
        lines += scoreboard(by_ckpt, config, "###") + [""]
        lines += ["Checkpoints: " + ", ".join(f"{LABELS[s]} `{v['uri']}`" for s, v in by_ckpt.items()), ""]
    if by_ckpt and (langs := language_table(by_ckpt)):
        lines += ["## Per language", "", "Accuracy of each multilingual suite per prompt language.", ""]
        lines += langs + [""]
    if by_ckpt and config.samples_per_prompt > 1:
        lines += ["## pass@k, mean@k, maj@k", ""] + k_table(by_ckpt) + [""]
    if by_ckpt and (judged := judged_table(by_ckpt, LABELS)):
        lines += ["## Judged by the GenRM", "",
                  "The open-ended suites' samples, judged by the run's GenRM against the reference in both orders "
                  "(the sample as Response A, then as B). Their accuracy above is the judge's: 1 when both orders "
                  "say better-or-equal. win / tie / loss: the two verdicts added (A +1, TIE 0, B -1; two that "
                  "disagree are a tie); malformed: a verdict not well formed; swap-consistent: both orders gave "
                  "the same verdict; rules agree: the rules verifier's pass equals the judge's.", ""]
        lines += judged + [""]
    if lm_eval:
        lines += ["## lm-evaluation-harness", "",
                  f"Tasks {', '.join(config.lm_eval.tasks)} (lm-eval's own metrics and prompts"
                  + (f", limit {config.lm_eval.limit} documents" if config.lm_eval.limit else "") + "; `lm_eval.json`).",
                  ""] + lm_eval_table(lm_eval) + [""]
    lines += [f"## {LABELS['model']} checkpoint", "",
              "| suite | prompts | samples | accuracy ± SE | mean score ± SE | finished | closed </think> | mean tokens |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in summary["suites"].items():
        lines.append(f"| {name} | {s['prompts']} | {s['samples']} | {_pm(s['accuracy'], s.get('accuracy_se'))} | "
                     f"{_pm(s['mean_score'], s.get('mean_score_se'))} | "
                     f"{s['finished_rate']:.2f} | {s['closed_think_rate']:.2f} | {s['mean_tokens']:.1f} |")
    if summary["overall_accuracy"] is not None:
        lines += ["", f"Overall accuracy: **{_pm(summary['overall_accuracy'], summary.get('overall_accuracy_se'))}** "
                      f"over {summary['samples']} samples."]
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


def suite_rows(inputs: dict[str, Artifact]) -> list[dict]:
    """The prompts of ``suites`` and of every ``suites:LABEL`` input, in slot order. A row of a labelled
    input without a ``suite`` of its own is in suite LABEL (an imported GSM8K's rows are ``gsm8k``, not the
    world's ``math``). A prompt id in two inputs is an error naming both."""
    rows: list[dict] = []
    seen: dict[str, str] = {}
    for slot in sorted(s for s in inputs if SPEC.base_slot(s) == "suites"):
        label = slot.partition(":")[2]
        for r in inputs[slot].read_table().to_pylist():
            if r["id"] in seen:
                raise ValueError(f"evaluation: prompt id {r['id']!r} is in both {seen[r['id']]} and "
                                 f"{inputs[slot].uri}: suite inputs must not share prompts")
            seen[r["id"]] = inputs[slot].uri
            if label and not r.get("suite"):
                r["suite"] = label
            rows.append(r)
    return rows


def _judge(config: EvalConfig, inputs: dict[str, Artifact], rows: list[dict]) -> tuple[GenRMJudge | None, set]:
    """The GenRM judge and the ids of the prompts it judges; (None, set()) when there is nothing to judge.
    A prompt only the learned judge can score (verifier ``genrm``) without a genrm input is an error."""
    ids = judged_rows(rows)
    learned = sorted({r.get("suite") or r["domain"] for r in rows if needs_judge(r["verifier"])})
    if learned and ("genrm" not in inputs or not config.genrm_judge):
        raise ValueError(f"evaluation: suite(s) {', '.join(learned)} are scored by the learned judge (verifier "
                         f"'genrm'), but {'no genrm checkpoint is an input' if 'genrm' not in inputs else 'genrm_judge is off'}")
    if not ids or "genrm" not in inputs or not config.genrm_judge:
        return None, set()
    log.info("judging %d open-ended prompts with the GenRM %s, in both orders", len(ids), inputs["genrm"].uri)
    judge = GenRMJudge.from_checkpoint(str(inputs["genrm"].local_dir()), max_new_tokens=config.genrm_max_new_tokens,
                                       batch_size=config.genrm_batch_size, swap_check=True, device=config.device)
    return judge, ids


def _figures(v: dict) -> dict:
    """The numbers of one checkpoint (and decoding) that summary.json keeps: overall and per suite, accuracy and
    mean score, each with its standard error over prompts."""
    out = {f"overall_{m}{se}": v[f"overall_{m}{se}"] for m in ("accuracy", "mean_score") for se in ("", "_se")}
    out.update({f"{m}{se}": {k: x[f"{m}{se}"] for k, x in v["suites"].items()}
                for m in ("accuracy", "mean_score") for se in ("", "_se")})
    return out


def _body(config: EvalConfig, inputs: dict[str, Artifact], outputs: dict[str, ArtifactWriter]) -> None:
    rows = suite_rows(inputs)
    prompts = {r["id"]: r for r in rows}
    judge, judged_ids = _judge(config, inputs, rows)
    results: list[dict] = []
    by_ckpt: dict[str, dict] = {}
    lm_eval: dict[str, dict] = {}                     # slot -> task -> {"metric,filter": value}
    for slot in [s for s in CHECKPOINTS if s in inputs]:          # recipe order, the evaluated one last
        art = inputs[slot]
        model, tok = load_checkpoint(art.local_dir())
        place_for_inference(model, config.device, config.precision)
        with open_sampler(config.backend, model, tok, workers=config.workers) as generate:
            log.info("evaluating %s (%s) on %d prompts x %d sample(s), %s%s", LABELS[slot], art.uri, len(rows),
                     config.samples_per_prompt, getattr(generate, "backend", "hf"),
                     f" on {config.workers} Ray workers" if config.workers else "")
            got = generate_and_score(model, tok, rows, art.uri, samples_per_prompt=config.samples_per_prompt,
                                     max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                                     seed=config.seed, batch_size=config.batch_size, generate=generate)
            sampled = []
            if config.sampled and config.sampled.covers(slot):     # mean@k: the same model, sampler, prompts
                log.info("%s: %d samples per prompt at temperature %s", LABELS[slot], config.sampled.k,
                         config.sampled.temperature)
                sampled = generate_and_score(model, tok, rows, art.uri, samples_per_prompt=config.sampled.k,
                                             max_new_tokens=config.max_new_tokens,
                                             temperature=config.sampled.temperature, seed=config.seed + 1,
                                             batch_size=config.batch_size, generate=generate)
        if config.lm_eval and slot in config.lm_eval.checkpoints:
            le = config.lm_eval
            log.info("%s: lm-evaluation-harness tasks %s", LABELS[slot], ", ".join(le.tasks))
            lm_eval[slot] = run_lm_eval(model, tok, le.tasks, include_path=le.include_path, limit=le.limit,
                                        num_fewshot=le.num_fewshot, batch_size=le.batch_size, seed=config.seed)
            log.info("%s: lm-eval %s", LABELS[slot], "; ".join(
                f"{t} " + ", ".join(f"{k} {v:.3f}" for k, v in m.items() if k != "samples")
                for t, m in lm_eval[slot].items()))
        del model
        for decoding, rs in (("main", got), ("sampled", sampled)):
            for r in rs:
                r["checkpoint"], r["decoding"] = slot, decoding
            if judge is not None and rs:
                judge_results(judge, rs, prompts, judged_ids)
        results += got + sampled
        by_ckpt[slot] = {"uri": art.uri, **summarize(got), "k": k_metrics(got), "per_prompt": per_prompt(got)}
        if sampled:
            by_ckpt[slot]["sampled"] = {**summarize(sampled), "per_prompt": per_prompt(sampled)}
        if judge is not None:
            by_ckpt[slot]["judged"] = judged_summary(got)
        log.info("%s: %s", LABELS[slot], ", ".join(f"{k} {v['accuracy']:.3f}" for k, v in by_ckpt[slot]["suites"].items()))
    model_art = inputs["model"]
    final = [r for r in results if r["checkpoint"] == "model" and r["decoding"] == "main"]
    summary = {k: v for k, v in by_ckpt["model"].items() if k not in ("uri", "k", "per_prompt", "sampled")}
    outputs["results"].write_table(pa.Table.from_pylist(results, schema=RESULTS_SCHEMA))
    rep = outputs["report"]
    checkpoints = {s: {"label": LABELS[s], "uri": v["uri"], **_figures(v), "k_metrics": v["k"],
                       "judged": v.get("judged", {})} for s, v in by_ckpt.items()}
    for s, v in by_ckpt.items():
        if "sampled" in v:
            checkpoints[s]["sampled"] = {"k": config.sampled.k, "temperature": config.sampled.temperature,
                                         **_figures(v["sampled"])}
    if judge is not None:
        summary["genrm"] = {"checkpoint": inputs["genrm"].uri, **judge.counters()}
    rep.path("summary.json").write_text(json.dumps({"model": model_art.uri, "config": config.model_dump(mode="json"),
                                                    **summary, "checkpoints": checkpoints, "lm_eval": lm_eval,
                                                    "checkpoint_order": list(checkpoints)},   # JSON sorts keys
                                                   indent=2, sort_keys=True) + "\n")
    if lm_eval:
        rep.path("lm_eval.json").write_text(json.dumps(lm_eval, indent=2, sort_keys=True) + "\n")
    rep.path("summary.md").write_text(summary_md(by_ckpt, config, lm_eval))      # what the Prefect UI shows
    plot_checkpoints(by_ckpt, rep.path("checkpoints.png"))
    rep.path("report.md").write_text(render_report(model_art.uri, config, summary, final,
                                                   {r["id"]: r for r in rows}, by_ckpt, lm_eval))
    extra = {"model": model_art.uri, "overall_accuracy": summary["overall_accuracy"], "samples": len(final),
             "accuracy": {k: s["accuracy"] for k, s in summary["suites"].items()},
             "checkpoints": {s: v["accuracy"] for s, v in checkpoints.items()}}
    if judge is not None:
        extra["genrm"] = inputs["genrm"].uri
        extra["judged"] = by_ckpt["model"].get("judged", {})
    if lm_eval:
        extra["lm_eval"] = lm_eval
    for w in outputs.values():
        w.extra.update(extra)


from stages.evaluation.spec import SPEC, run  # noqa: E402,F401  (the stage's public contract)
