"""Generate on prompt suites and score every sample with the gym's verifiers: the evaluation
stage's generation, and the greedy scorer the SFT stage and the merge sweep use on their suites."""
from __future__ import annotations

from collections import defaultdict

import itertools

from compass.gym.bfcl.converse import converse
from compass.gym.score import THINK_CLOSE, judge, needs_judge, parse_verifier
from compass.lm.chat import sample
from compass.lm.sample_metrics import prompt_se, values_by_prompt
from compass.progress import progress


def generate_and_score(model, tok, rows: list[dict], model_uri: str, *, samples_per_prompt: int,
                       max_new_tokens: int, temperature: float, seed: int, batch_size: int,
                       generate=None) -> list[dict]:
    """One result dict per (prompt, sample), in the order of ``rows``: ``samples_per_prompt`` samples of at
    most ``max_new_tokens`` (``temperature`` 0: greedy), ``batch_size`` prompts per generate call, prompts
    sorted by length; each scored by the gym verifier named in the row's ``verifier`` (a row of the learned
    judge, ``genrm``, scores 0 here: the caller that holds a GenRM checkpoint judges it, as the evaluation
    stage does). The suite of a row is its ``suite`` when it has one, else its ``domain``. ``generate``: a function like
    ``compass.lm.chat.sample`` (default: it), e.g. ``compass.rl.rollout.sampler.sampler``'s.
    A row scored by ``bfcl_multi_turn`` is a conversation: each sample is held turn by turn with the
    row's tools (``compass.gym.bfcl.converse``), ``max_new_tokens`` per reply."""
    talk = [i for i, r in enumerate(rows) if parse_verifier(r["verifier"]).get("type") == "bfcl_multi_turn"]
    order = sorted(set(range(len(rows))) - set(talk), key=lambda i: (len(rows[i]["prompt"]), i))
    completions: dict[int, list[dict]] = {}
    if talk:
        seeds = itertools.count(seed + 1_000_003)       # a fresh seed per reply batch
        for _ in range(samples_per_prompt):
            def one_each(prompts):
                outs = []
                for at in range(0, len(prompts), batch_size):
                    outs += (generate or sample)(model, tok, prompts[at:at + batch_size], n=1,
                                                 max_new_tokens=max_new_tokens, temperature=temperature,
                                                 seed=next(seeds))
                return [o[0] for o in outs]
            for i, c in zip(talk, converse(one_each, [rows[i] for i in talk])):
                completions.setdefault(i, []).append(c)
    bs = batch_size
    for b, start in enumerate(progress(range(0, len(order), bs), total=-(-len(order) // bs), desc="eval",
                                       unit="batch")):
        idx = order[start:start + bs]
        outs = (generate or sample)(model, tok, [rows[i]["prompt"] for i in idx], n=samples_per_prompt,
                      max_new_tokens=max_new_tokens, temperature=temperature, seed=seed + b)
        completions.update(zip(idx, outs))
    results = []
    for i, row in enumerate(rows):
        suite = row.get("suite") or row["domain"]
        spec = parse_verifier(row["verifier"])          # once per row, not per sample
        learned = needs_judge(spec)                     # the GenRM itself: only its caller can score these
        for k, c in enumerate(completions[i]):
            s, reason = (0.0, None) if learned else judge(spec, c["text"], row["reference"])
            results.append({"model": model_uri, "suite": suite, "language": row.get("language"),
                            "prompt_id": row["id"], "sample_idx": k,
                            "response": c["text"], "score": s, "correct": s >= 1.0, "reason": reason,
                            "difficulty": row.get("difficulty"), "num_tokens": len(c["ids"]),
                            "finished": tok.eos_token_id in c.get("last_ids", c["ids"])})
    return results


def _by_prompt(rows: list[dict], field: str) -> list[list[float]]:
    return list(values_by_prompt(rows, field).values())


def summarize(results: list[dict]) -> dict:
    """Per suite: prompts, samples, accuracy (mean of ``correct``) and mean score, each with its standard error
    over prompts (``compass.lm.sample_metrics.prompt_se``), mean tokens,
    share of samples that ended (eos), accuracy per difficulty and per language (where rows carry one);
    overall: the verifiers' reasons by count."""
    by_suite: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        by_suite[r["suite"]].append(r)
    suites = {}
    for name in sorted(by_suite):
        rs = by_suite[name]
        by_diff: dict[int, list[bool]] = defaultdict(list)
        by_lang: dict[str, list[bool]] = defaultdict(list)
        for r in rs:
            if r["difficulty"] is not None:
                by_diff[int(r["difficulty"])].append(r["correct"])
            if r.get("language"):
                by_lang[r["language"]].append(r["correct"])
        suites[name] = {
            "prompts": len({r["prompt_id"] for r in rs}),
            "samples": len(rs),
            "accuracy": sum(r["correct"] for r in rs) / len(rs),
            "accuracy_se": prompt_se(_by_prompt(rs, "correct")),
            "mean_score": sum(r["score"] for r in rs) / len(rs),
            "mean_score_se": prompt_se(_by_prompt(rs, "score")),
            "mean_tokens": sum(r["num_tokens"] for r in rs) / len(rs),
            "finished_rate": sum(r["finished"] for r in rs) / len(rs),
            "closed_think_rate": sum(THINK_CLOSE in r["response"] for r in rs) / len(rs),
            "accuracy_by_difficulty": {str(d): sum(v) / len(v) for d, v in sorted(by_diff.items())},
            "accuracy_by_language": {lang: sum(v) / len(v) for lang, v in sorted(by_lang.items())},
            "samples_by_language": {lang: len(v) for lang, v in sorted(by_lang.items())},
        }
    n = len(results)
    reasons: dict[str, int] = defaultdict(int)
    for r in results:
        if r.get("reason"):
            reasons[r["reason"]] += 1
    return {"suites": suites, "samples": n,
            "overall_accuracy": (sum(r["correct"] for r in results) / n) if n else None,
            "overall_accuracy_se": prompt_se(_by_prompt(results, "correct")),
            "overall_mean_score": (sum(r["score"] for r in results) / n) if n else None,
            "overall_mean_score_se": prompt_se(_by_prompt(results, "score")),
            # why samples scored low, as the verifiers said (compass.gym.reasons), most frequent first
            "reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))}


def greedy_score(model, tok, rows: list[dict], *, max_new_tokens: int, seed: int, model_uri: str,
                 batch_size: int = 128) -> dict:
    """Greedy, one sample per prompt: ``summarize(generate_and_score(...))`` of ``model`` on ``rows``.
    The model is in eval mode meanwhile, then back in its mode. The scorer of the SFT stage's
    held-out suites and of the merge sweep's dev suite."""
    was_training = model.training
    model.eval()
    try:
        return summarize(generate_and_score(model, tok, rows, model_uri, samples_per_prompt=1,
                                            max_new_tokens=max_new_tokens, temperature=0.0, seed=seed,
                                            batch_size=batch_size))
    finally:
        model.train(was_training)
