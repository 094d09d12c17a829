"""``compass eval compare A B``: two runs' held-out results side by side.

A and B are each an evaluation ``report`` artifact URI, or a store root whose latest ``eval_report`` is
taken. Rows: every (checkpoint, suite) either report has; columns A, B and B − A.
"""
from __future__ import annotations

import json
import sys

from compass.store.layout import ArtifactError
from compass.store.store import Artifact, ArtifactStore

REPORT_NAME = "eval_report"      # the pipeline's evaluation report artifact


def add_eval_parser(sub) -> None:
    e = sub.add_parser("eval", help="compare evaluation reports of two runs")
    esub = e.add_subparsers(dest="eval_command", required=True)
    c = esub.add_parser("compare", help="two runs' held-out accuracy per checkpoint and suite, and the change")
    c.add_argument("a", help="report artifact URI, or a store root (its latest eval_report)")
    c.add_argument("b", help="the same for the second run")
    c.add_argument("--store-option", action="append", default=[], metavar="KEY=VALUE",
                   help="options of both stores (s3: endpoint_url=..., key=...)")
    c.add_argument("--json", action="store_true", help="also print one JSON line with the rows")


def load_summary(ref: str, storage_options: dict) -> tuple[str, dict]:
    """(report URI, its summary.json) for a report URI or a store root."""
    if "/report/" in ref:
        root = ref.split("/report/")[0]
        art = Artifact.open_uri(ref, ArtifactStore(root, storage_options=storage_options, create=False))
    else:
        art = ArtifactStore(ref, storage_options=storage_options, create=False).get("report", REPORT_NAME)
    return art.uri, json.loads(art.read_bytes("summary.json"))


def accuracy_by_checkpoint(summary: dict, key: str = "accuracy") -> dict[str, dict[str, float]]:
    """label -> suite -> accuracy (or ``key``: ``accuracy_se``, ``mean_score``, …; absent in reports written before
    it existed: {}); a report from before per-checkpoint evaluation has only its model."""
    if summary.get("checkpoints"):
        ckpts = summary["checkpoints"]
        order = summary.get("checkpoint_order") or list(ckpts)      # recipe order (the JSON's keys are sorted)
        return {ckpts[s].get("label", s): dict(ckpts[s].get(key) or {}) for s in order if s in ckpts}
    return {"final": {s: v[key] for s, v in summary.get("suites", {}).items() if v.get(key) is not None}}


def compare(a: dict, b: dict) -> list[dict]:
    """Rows of (checkpoint, suite, a, b, delta) in A's checkpoint order, then B's others; None where absent."""
    acc_a, acc_b = accuracy_by_checkpoint(a), accuracy_by_checkpoint(b)
    rows = []
    for ck in list(acc_a) + [c for c in acc_b if c not in acc_a]:
        suites = sorted(set(acc_a.get(ck, {})) | set(acc_b.get(ck, {})))
        for s in suites:
            x, y = acc_a.get(ck, {}).get(s), acc_b.get(ck, {}).get(s)
            rows.append({"checkpoint": ck, "suite": s, "a": x, "b": y,
                         "delta": None if x is None or y is None else y - x})
    return rows


def run_eval(args) -> int:
    opts = dict(kv.split("=", 1) for kv in args.store_option)
    try:
        ua, sa = load_summary(args.a, opts)
        ub, sb = load_summary(args.b, opts)
    except (ArtifactError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = compare(sa, sb)
    f = lambda v, sign="": "—" if v is None else format(v, f"{sign}.3f")      # noqa: E731
    print(f"A: {ua}\nB: {ub}\n")
    print(f"{'checkpoint':<14} {'suite':<16} {'A':>7} {'B':>7} {'B − A':>7}")
    for r in rows:
        print(f"{r['checkpoint']:<14} {r['suite']:<16} {f(r['a']):>7} {f(r['b']):>7} {f(r['delta'], '+'):>7}")
    if args.json:
        print(json.dumps({"a": ua, "b": ub, "rows": rows}))
    return 0
