"""``compass gym score VERIFIER IN.jsonl OUT.jsonl``: score a JSONL file row by row (docs/gym.md).

OUT has the input's rows in the same order, each with the verifier's fields
added. A line that is not UTF-8, not JSON or not an object becomes
``{"line": N, "error": ..., "score": 0.0}``; a row the verifier cannot
score keeps its fields and gains ``error``. OUT is written to a temporary
file and renamed at the end, so a failed run leaves no half-written file.
A summary (rows, mean score, errors by reason) goes to stderr; where rows
carry a bool ``label``, it also gives the verifier's agreement with those
labels, and for ``math`` the 20 most common final statements it could not
read. Usage errors are one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter


def add_gym_parser(sub) -> argparse.ArgumentParser:
    g = sub.add_parser("gym", help="Compass-Gym verifiers: score a JSONL file",
                       description="Compass-Gym: verifiable rewards (docs/gym.md).")
    gsub = g.add_subparsers(dest="gym_command", required=True)
    s = gsub.add_parser("score", help="score IN.jsonl with a verifier, writing OUT.jsonl",
                        description="Score every row of IN.jsonl; OUT.jsonl gets the same rows in the same order "
                                    "with the verifier's fields added. VERIFIER is a verifier's name, as verifier specs "
                                    "name it (docs/gym.md lists them).")
    s.add_argument("verifier")
    s.add_argument("input", metavar="IN.jsonl")
    s.add_argument("output", metavar="OUT.jsonl")
    s.add_argument("--workers", type=int, default=None,
                   help="scoring processes (default: CPU cores; 1 without --timeout scores in this process)")
    s.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds a row may take before it gets error 'timeout' and the verifier's error score "
                        "(default 30 with workers)")
    s.add_argument("--judge", metavar="CKPT",
                   help="genrm (a learned judge): the GenRM checkpoint, in any form `compass artifacts ls` shows: "
                        "its URI, its version folder, checkpoint/NAME[/VERSION] in --store, or the model folder")
    s.add_argument("--store", default=None, metavar="URI",
                   help="store that --judge checkpoint/NAME is looked up in (default: $COMPASS_STORE or ./artifacts)")
    s.add_argument("--store-option", action="append", default=[], metavar="KEY=VALUE",
                   help="fsspec option for the store, repeatable (e.g. endpoint_url=http://127.0.0.1:8333)")
    s.add_argument("--swap-check", action="store_true", help="genrm: ask twice with positions swapped")
    s.add_argument("--max-new-tokens", type=int, default=256, help="genrm: judge generation budget")
    return g


def read_rows(path: str):
    """Yield ``(line_no, row_or_None, error_or_None)`` for each non-blank line of a JSONL file."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield n, None, f"invalid UTF-8 at byte {e.start}"
                continue
            try:
                row = json.loads(text)
            except (ValueError, RecursionError) as e:
                yield n, None, f"malformed JSON ({str(e)[:120]})"
                continue
            if not isinstance(row, dict):
                yield n, None, f"a row must be a JSON object, got {type(row).__name__}"
                continue
            yield n, row, None


def _bad_line(n: int, error: str) -> dict:
    return {"line": n, "error": error, "reason": "not_an_object" if error.startswith("a row must") else "bad_line",
            "score": 0.0}


def _split(items: list) -> tuple[list, list]:
    """(index, row) of the rows to score, and the output list with unreadable lines already filled in."""
    todo = [(i, row) for i, (n, row, err) in enumerate(items) if row is not None]
    out: list[dict | None] = [None if row is not None else _bad_line(n, err) for n, row, err in items]
    return todo, out


def _score_rows(verifier: str, items: list, workers: int | None, timeout: float | None) -> list[dict]:
    from compass.progress import progress
    from compass.gym.rows import merge_fields, score_row
    todo, out = _split(items)
    if workers == 1 and timeout is None:     # in this process: no deadline to enforce
        for i, row in progress(todo, desc=f"gym {verifier}", unit="row"):
            out[i] = score_row(verifier, row)
        return out
    from compass.gym.service import DEFAULT_TIMEOUT_S, RewardService
    with RewardService(workers, default_timeout_s=timeout or DEFAULT_TIMEOUT_S) as svc:
        futures = [(i, row, svc.submit(verifier, row)) for i, row in todo]
        for i, row, fut in progress(futures, desc=f"gym {verifier}", unit="row"):
            res = fut.result()
            out[i] = merge_fields(row, {**res.fields, "score": res.score, "error": res.error, "reason": res.reason})
    return out


class JudgeError(ValueError):
    """--judge names no checkpoint: one line, exit code 2."""


def _is_model_folder(path: str) -> bool:
    """A Hugging Face model folder that is not inside a stored artifact (e.g. copied out of one)."""
    return os.path.isfile(os.path.join(path, "config.json")) and not any(
        os.path.isfile(os.path.join(d, "manifest.json")) for d in (path, os.path.dirname(os.path.abspath(path))))


def judge_dir(ref: str, store_root: str | None, store_options: list[str]) -> str:
    """The local model folder of the checkpoint ``ref`` names (an artifact is verified and, from a remote
    store, downloaded first)."""
    from compass.runtime.artifact_ref import open_ref
    from compass.store.options import parse_store_options
    from compass.store.store import ArtifactError, ArtifactStore
    if os.path.isdir(ref) and _is_model_folder(ref):
        return ref
    try:
        store = ArtifactStore(store_root or os.environ.get("COMPASS_STORE") or "./artifacts",
                              storage_options=parse_store_options(store_options), create=False)
        art = open_ref(ref, store)
        if art.kind != "checkpoint":
            raise JudgeError(f"--judge {ref}: a {art.kind} artifact ({art.uri}), not a checkpoint")
        path = str(art.local_dir())
    except ArtifactError as e:
        raise JudgeError(f"--judge {ref}: {e}") from None
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise JudgeError(f"--judge {ref}: {art.uri} holds no model (no config.json)")
    return path


def _judge_rows(verifier, args, items: list) -> list[dict]:
    """A learned judge's rows: all at once through the checkpoint ``--judge`` names."""
    from compass.gym.rows import merge_fields
    todo, out = _split(items)
    fields, counters = verifier.judge_rows([row for _, row in todo], judge=args.judge,
                                           max_new_tokens=args.max_new_tokens, swap_check=args.swap_check)
    for (i, row), added in zip(todo, fields):
        out[i] = merge_fields(row, added)
    print(f"judge: {json.dumps(counters)}", file=sys.stderr)
    return out


def _dumps(row: dict) -> str:
    """One JSONL line: text as is, unless it holds lone surrogates (not UTF-8), then \\u escapes."""
    text = json.dumps(row, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(row, ensure_ascii=True)
    return text


def reason_counts(rows: list[dict]) -> tuple[Counter, Counter]:
    """(errors, other reasons) by reason code: rows that could not be scored, and scored rows whose
    verifier said why they fell short (``compass.gym.reasons``)."""
    errors, causes = Counter(), Counter()
    for r in rows:
        if r.get("error"):
            errors[r.get("reason") or "unknown"] += 1
        elif r.get("reason"):
            causes[r["reason"]] += 1
    return errors, causes


def summary(verifier: str, rows: list[dict], output: str) -> str:
    """The lines printed after scoring: rows, mean score, then errors and other reasons by code, most first."""
    mean = sum(r["score"] for r in rows) / len(rows) if rows else 0.0
    errors, causes = reason_counts(rows)
    lines = [f"scored {len(rows)} rows with '{verifier}': mean score {mean:.4f}, "
             f"{sum(errors.values())} unscorable -> {output}"]
    for title, counts in (("unscorable rows by reason", errors), ("low scores by reason", causes)):
        if counts:
            lines.append(f"  {title}:")
            width = max(len(k) for k in counts)
            lines += [f"    {k:<{width}}  {v:>7,}" for k, v in counts.most_common()]
    return "\n".join(lines + label_lines(rows) + unparsed_lines(rows))


def label_lines(rows: list[dict]) -> list[str]:
    """Agreement with the rows' own labels (a bool ``label`` beside the verifier's ``correct``): how much
    the verifier misses on a user's own labelled outputs. Nothing when no row carries both."""
    pairs = [(r["label"], r["correct"]) for r in rows
             if isinstance(r.get("label"), bool) and isinstance(r.get("correct"), bool)]
    if not pairs:
        return []
    agree = sum(lab == got for lab, got in pairs)
    missed = sum(lab and not got for lab, got in pairs)
    accepted = sum(got and not lab for lab, got in pairs)
    return [f"  agreement with the rows' labels: {agree / len(pairs):.4f} ({agree:,} of {len(pairs):,}): "
            f"{missed:,} labelled correct scored wrong, {accepted:,} labelled wrong scored correct"]


def unparsed_lines(rows: list[dict], top: int = 20) -> list[str]:
    """The most common final statements the verifier could not read (``unparsed_final_statement``)."""
    counts = Counter(" ".join(str(r["answer"]).split())[:100] for r in rows
                     if r.get("reason") == "unparsed_final_statement" and r.get("answer") is not None)
    if not counts:
        return []
    return ([f"  final statements that could not be read ({sum(counts.values()):,} rows; the {top} most common):"]
            + [f"    {v:>7,}  {k}" for k, v in counts.most_common(top)])


def run_gym(args) -> int:
    if args.gym_command != "score":
        return 2
    from compass.gym.registry import get_verifier
    try:
        verifier = get_verifier(args.verifier)
    except ValueError as e:                  # unknown, or an old name: the message names the right one
        print(f"error: {e}", file=sys.stderr)
        return 2
    if verifier.needs_judge and not args.judge:
        print(f"error: {args.verifier} needs --judge CKPT (a GenRM checkpoint: URI, folder or "
              f"checkpoint/NAME in --store)", file=sys.stderr)
        return 2
    if os.path.isdir(args.input):
        print(f"error: {args.input} is a folder; give one JSONL file", file=sys.stderr)
        return 2
    if not os.path.isfile(args.input):
        print(f"error: no such input file: {args.input}", file=sys.stderr)
        return 2
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
        print(f"error: cannot write the output file in {out_dir}", file=sys.stderr)
        return 2
    if args.workers is not None and args.workers < 1:
        print("error: --workers must be >= 1", file=sys.stderr)
        return 2
    if args.timeout is not None and not (args.timeout > 0 and args.timeout != float("inf")):
        print(f"error: --timeout must be a number of seconds > 0, got {args.timeout:g}", file=sys.stderr)
        return 2
    if verifier.needs_judge:
        try:
            args.judge = judge_dir(args.judge, args.store, args.store_option)
        except (JudgeError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    items = list(read_rows(args.input))
    rows = _judge_rows(verifier, args, items) if verifier.needs_judge else \
        _score_rows(args.verifier, items, args.workers, args.timeout)
    tmp = f"{args.output}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(_dumps(row) + "\n")
        os.replace(tmp, args.output)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    print(summary(args.verifier, rows, args.output), file=sys.stderr)
    return 0
