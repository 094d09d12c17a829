"""``compass artifacts ls|show|head|lineage|verify|gc``: inspect a versioned artifact store.

Every subcommand takes ``--store URI`` (default ``$COMPASS_STORE`` or ``./artifacts``; ``s3://bucket/prefix``
works too), ``--store-option KEY=VALUE`` (repeatable, fsspec/s3fs options such as ``endpoint_url``;
``a.b=v`` sets nested keys, ``true``/``false``/``null`` and JSON objects are decoded) and ``--json``
(one JSON document on stdout instead of the human tables).

Artifacts are named by URI (``{root}/{kind}/{name}/{version}``), by their folder, or, inside the store,
by ``KIND/NAME`` (its ``latest`` version) or ``KIND/NAME/VERSION`` (a unique version prefix is enough).
Errors are one line on stderr and exit code 2.

    python -m compass.cli.artifacts ls --kind prompts
    python -m compass.cli.artifacts show checkpoint/thinking_ckpt
    python -m compass.cli.artifacts head quarantine/gsm8k_quarantine
    python -m compass.cli.artifacts lineage checkpoint/ckpt_final
    python -m compass.cli.artifacts gc --dry-run --prune
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from datetime import datetime

from compass.store.options import parse_store_options as _parse_store_options

DEFAULT_STORE = "./artifacts"
DESCRIPTION = ("Inspect a versioned artifact store: list artifacts, show one, print its lineage, "
               "verify checksums and schemas, collect garbage.")


class CLIError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


# -- parser --------------------------------------------------------------------

def _common_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--store", default=None, metavar="URI",
                   help=f"store root: a path, file://… or s3://bucket/prefix "
                        f"(default: $COMPASS_STORE or {DEFAULT_STORE})")
    p.add_argument("--store-option", action="append", default=[], metavar="KEY=VALUE",
                   help="fsspec storage option, repeatable (e.g. endpoint_url=http://127.0.0.1:8333)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    return p


def _add_subcommands(sub) -> None:
    common = _common_options()
    ls = sub.add_parser("ls", parents=[common], help="list committed artifacts",
                        description="List committed artifacts (a version without a manifest does not exist).")
    ls.add_argument("--kind", help="only this kind (prompts, checkpoint, …)")
    ls.add_argument("--name", help="only this artifact name")

    show = sub.add_parser("show", parents=[common], help="one artifact's manifest and files")
    show.add_argument("target", metavar="URI_OR_KIND/NAME[/VERSION]")

    head = sub.add_parser("head", parents=[common], help="a table's first rows (a quarantine: counts by reason)",
                          description="Print a table artifact's first rows; for a quarantine table, first the "
                                      "rows by reason, with one example detail each.")
    head.add_argument("target", metavar="URI_OR_KIND/NAME[/VERSION]")
    head.add_argument("-n", "--rows", type=int, default=10, help="how many rows (default 10)")
    head.add_argument("--columns", metavar="A,B,…", help="only these columns (default: all; for a "
                                                         "quarantine: row_index, field, reason, detail)")
    head.add_argument("--width", type=int, default=48, help="cut each cell to this many characters (default 48)")

    lin = sub.add_parser("lineage", parents=[common], help="the tree of artifacts an artifact was made from")
    lin.add_argument("target", metavar="URI_OR_KIND/NAME[/VERSION]")

    ver = sub.add_parser("verify", parents=[common], help="check files against the manifest and the table schema",
                         description="Verify checksums (and, for tables, the schema and row count) of one "
                                     "artifact, or of every committed artifact when none is named.")
    ver.add_argument("target", nargs="?", metavar="URI_OR_KIND/NAME[/VERSION]")
    ver.add_argument("--kind", help="with no target: only this kind")
    ver.add_argument("--name", help="with no target: only this name")

    gc = sub.add_parser("gc", parents=[common], help="remove what no reader can see",
                        description="Remove versions that never committed and payloads of attempts that lost "
                                    "a commit race or crashed, once older than --grace. With --prune, also "
                                    "committed versions no LATEST alias reaches through lineage.")
    gc.add_argument("--grace", type=float, default=24 * 3600.0, metavar="SECONDS",
                    help="leave anything younger than this alone (default 3600: a writer may still be busy)")
    gc.add_argument("--prune", action="store_true", help="also remove committed versions unreachable from LATEST")
    gc.add_argument("--dry-run", action="store_true", help="only print what would be removed")


def add_artifacts_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``artifacts`` (with ls/show/lineage/verify/gc) to a CLI's subparsers; dispatch with ``run_artifacts``."""
    p = subparsers.add_parser("artifacts", help="inspect the artifact store (ls, show, head, lineage, verify, gc)",
                              description=DESCRIPTION)
    sub = p.add_subparsers(dest="artifacts_command", required=True, metavar="{ls,show,head,lineage,verify,gc}")
    _add_subcommands(sub)
    p.set_defaults(func=run_artifacts)
    return p


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="compass artifacts", description=DESCRIPTION)
    sub = ap.add_subparsers(dest="artifacts_command", required=True, metavar="{ls,show,head,lineage,verify,gc}")
    _add_subcommands(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_artifacts(args)


# -- helpers -------------------------------------------------------------------

def parse_store_options(items: list[str]) -> dict:
    try:
        return _parse_store_options(items)
    except ValueError as e:
        raise CLIError(str(e)) from None


def open_store(args):
    from fsspec.core import split_protocol

    from compass.store.store import ArtifactStore
    root = args.store or os.environ.get("COMPASS_STORE") or DEFAULT_STORE
    options = parse_store_options(args.store_option)
    protocol, path = split_protocol(root)
    if protocol in (None, "file", "local") and not os.path.isdir(path):
        raise CLIError(f"no artifact store at {root} (directory not found; pass --store or set COMPASS_STORE)")
    return ArtifactStore(root, storage_options=options, create=False)


def resolve(store, target: str):
    """An artifact from a URI, a folder, ``KIND/NAME`` (latest) or ``KIND/NAME/VERSION`` (unique prefix
    allowed): ``compass.runtime.artifact_ref.open_ref``."""
    from compass.runtime.artifact_ref import open_ref
    return open_ref(target, store)


def human_size(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _when(created_at: str) -> str:
    try:
        return datetime.fromisoformat(created_at).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return created_at


def table(rows: list[list], header: list[str], right: set[int] = frozenset()) -> str:
    cells = [[str(c) for c in r] for r in [header, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def fmt(r):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    return "\n".join([fmt(cells[0]), fmt(["-" * w for w in widths]), *[fmt(r) for r in cells[1:]]])


table_text = table  # the name ``table`` is taken by pyarrow tables inside cmd_head


def _size(manifest) -> int:
    return sum(f.size for f in manifest.files)


def _summary(store, m, latest: dict) -> dict:
    return {"uri": store.uri(m.kind, m.name, m.version), "kind": m.kind, "name": m.name, "version": m.version,
            "producer": m.producer, "stage": m.stage, "rows": m.rows, "size_bytes": _size(m),
            "files": len(m.files), "created_at": m.created_at, "table_schema": m.table_schema,
            "latest": latest.get((m.kind, m.name)) == m.version}


def _latest_map(store, manifests) -> dict:
    return {(k, n): store.latest_version(k, n) for k, n in {(m.kind, m.name) for m in manifests}}


def _emit_json(doc) -> None:
    print(json.dumps(doc, indent=2, default=str))


# -- subcommands -----------------------------------------------------------------

def cmd_ls(args, store) -> int:
    manifests = store.list(args.kind, args.name)
    latest = _latest_map(store, manifests)
    rows = [_summary(store, m, latest) for m in manifests]
    if args.json:
        _emit_json(rows)
        return 0
    if not rows:
        what = " ".join(f"{k} {v}" for k, v in (("kind", args.kind), ("name", args.name)) if v)
        print(f"no committed artifacts{' with ' + what if what else ''} in {store.root}")
        return 0
    print(table([[r["kind"], r["name"], r["version"], r["producer"],
                  "-" if r["rows"] is None else f"{r['rows']:,}", human_size(r["size_bytes"]),
                  _when(r["created_at"]), "latest" if r["latest"] else ""] for r in rows],
                ["KIND", "NAME", "VERSION", "PRODUCER", "ROWS", "SIZE", "CREATED", "LATEST"], right={4, 5}))
    print(f"\n{len(rows)} artifact version(s) in {store.root}")
    return 0


def cmd_show(args, store) -> int:
    art = resolve(store, args.target)
    m = art.manifest
    is_latest = art.store.latest_version(m.kind, m.name) == m.version
    if args.json:
        _emit_json({"uri": art.uri, "latest": is_latest, "size_bytes": _size(m), **m.model_dump(mode="json")})
        return 0
    fields = [("uri", art.uri), ("kind", m.kind), ("name", m.name),
              ("version", m.version + ("  (latest)" if is_latest else "")),
              ("producer", f"{m.producer} (stage {m.stage})"), ("created", _when(m.created_at)),
              ("config", m.config_fingerprint), ("code", m.code_version)]
    if m.table_schema:
        fields += [("schema", m.table_schema), ("rows", f"{m.rows:,}" if m.rows is not None else "-")]
    fields += [("size", f"{human_size(_size(m))} in {len(m.files)} file(s)"), ("payload", m.payload_dir)]
    w = max(len(k) for k, _ in fields)
    for k, v in fields:
        print(f"{k.ljust(w)}  {v}")
    if m.inputs:
        print("\ninputs:")
        print(table([[r.slot, f"{r.kind}/{r.name}/{r.version}", r.uri] for r in m.inputs],
                    ["SLOT", "ARTIFACT", "URI"]))
    if m.extra:
        print("\nextra:")
        for k, v in m.extra.items():
            text = v if isinstance(v, str) else json.dumps(v, default=str)
            print(f"  {k}: {text if len(text) <= 200 else text[:197] + '...'}")
    print("\nfiles:")
    print(table([[f.path, human_size(f.size), f.sha256[:16]] for f in m.files] or [["(none)", "", ""]],
                ["PATH", "SIZE", "SHA256"], right={1}))
    return 0


QUARANTINE_COLUMNS = ("row_index", "field", "reason", "detail")


def reason_counts(table) -> list[tuple[str, int, str]]:
    """(reason, rows, first detail or row_json) of a quarantine table, most rows first."""
    reasons = table.column("reason").to_pylist()
    why = table.column("detail" if "detail" in table.column_names else "row_json").to_pylist()
    counts: dict[str, list] = {}
    for r, d in zip(reasons, why):
        counts.setdefault(r, [0, d])[0] += 1
    return sorted(((r, n, d or "") for r, (n, d) in counts.items()), key=lambda x: (-x[1], x[0]))


def _cell(v, width: int) -> str:
    text = " ".join((v if isinstance(v, str) else json.dumps(v, default=str, ensure_ascii=False)).split())
    return text if len(text) <= width else text[:max(width - 1, 1)] + "…"


def cmd_head(args, store) -> int:
    from artifacts_schema import TABLE_SCHEMAS
    art = resolve(store, args.target)
    if art.kind not in TABLE_SCHEMAS:
        raise CLIError(f"{art.uri}: a {art.kind} artifact, not a table (`compass artifacts show` lists its files)")
    if args.rows < 0 or args.width < 4:
        raise CLIError("--rows must be >= 0 and --width >= 4")
    table = art.read_table()
    is_quarantine = art.kind == "quarantine"
    if args.columns:
        cols = [c.strip() for c in args.columns.split(",") if c.strip()]
        unknown = [c for c in cols if c not in table.column_names]
        if unknown:
            raise CLIError(f"{art.uri}: no column(s) {', '.join(unknown)}; columns: {', '.join(table.column_names)}")
    else:
        cols = [c for c in QUARANTINE_COLUMNS if c in table.column_names] if is_quarantine else table.column_names
    rows = table.slice(0, args.rows).select(cols).to_pylist()
    reasons = reason_counts(table) if is_quarantine else None
    if args.json:
        doc = {"uri": art.uri, "kind": art.kind, "rows": table.num_rows, "columns": cols, "head": rows}
        if reasons is not None:
            doc["reasons"] = [{"reason": r, "rows": n, "example": d} for r, n, d in reasons]
        _emit_json(doc)
        return 0
    print(f"{art.uri}  ({table.num_rows:,} rows)")
    if reasons is not None:
        print("\nrows by reason:")
        print(table_text([[r, f"{n:,}", _cell(d, 80)] for r, n, d in reasons] or [["(none)", "0", ""]],
                         ["REASON", "ROWS", "EXAMPLE"], right={1}))
    print(f"\nfirst {len(rows)} row(s):" if rows else "\n(no rows)")
    if rows:
        print(table_text([[_cell(r[c], args.width) for c in cols] for r in rows], [c.upper() for c in cols]))
    return 0


def _tree_chars() -> tuple[str, str, str, str]:
    enc = (getattr(sys.stdout, "encoding", None) or "ascii").lower()
    try:
        "├└│─".encode(enc)
        return "├─ ", "└─ ", "│  ", "   "
    except (UnicodeEncodeError, LookupError):
        return "|- ", "`- ", "|  ", "   "


def render_lineage(node: dict) -> str:
    tee, last, pipe, blank = _tree_chars()
    lines: list[str] = []
    expanded: set[str] = set()

    def label(n: dict) -> str:
        if n.get("missing"):
            return f"{n['uri']}  MISSING ({n['missing']})"
        text = f"{n['kind']}/{n['name']}/{n['version']}  ({n['producer']})"
        if n["uri"] in expanded and not n["inputs"]:
            text += "  (see above)"
        return text

    def walk(n: dict, prefix: str) -> None:
        if n.get("uri") and n.get("inputs"):
            expanded.add(n["uri"])
        kids = n.get("inputs", [])
        for i, k in enumerate(kids):
            end = i == len(kids) - 1
            lines.append(f"{prefix}{last if end else tee}{k['slot']}: {label(k)}")
            walk(k, prefix + (blank if end else pipe))

    lines.append(label(node))
    walk(node, "")
    return "\n".join(lines)


def cmd_lineage(args, store) -> int:
    art = resolve(store, args.target)
    tree = store.lineage(art)
    if args.json:
        _emit_json(tree)
    else:
        print(render_lineage(tree))
    return 0


def verify_artifact(art) -> dict:
    """Check every file's checksum and, for a table, its schema and the manifest's row count."""
    import pyarrow.parquet as pq

    from artifacts_schema import TABLE_SCHEMAS
    from compass.store.store import TABLE_FILE, ArtifactCorrupt
    m = art.manifest
    local = art.local_dir(fresh=True)  # downloads (remote: afresh, not from the cache) and checks every file
    rows = None
    if m.kind in TABLE_SCHEMAS and any(f.path == TABLE_FILE for f in m.files):
        rows = art.read_table().num_rows
        parquet = [f.path for f in m.files if f.path.endswith(".parquet")]
        if parquet == [TABLE_FILE] and m.rows is not None and m.rows != rows:
            raise ArtifactCorrupt(f"{art.uri}: manifest says {m.rows} rows, '{TABLE_FILE}' has {rows}")
        for f in parquet:
            if f != TABLE_FILE:
                pq.read_metadata(local / f)  # readable Parquet
    return {"uri": art.uri, "ok": True, "files": len(m.files), "size_bytes": _size(m), "rows": rows}


def cmd_verify(args, store) -> int:
    from artifacts_schema import SchemaError
    from compass.store.store import Artifact, ArtifactError
    if args.target:
        result = verify_artifact(resolve(store, args.target))
        if args.json:
            _emit_json(result)
        else:
            print(f"ok  {result['uri']}  ({result['files']} file(s), {human_size(result['size_bytes'])}"
                  + (f", {result['rows']:,} rows)" if result["rows"] is not None else ")"))
        return 0
    results, failed = [], 0
    for m in store.list(args.kind, args.name):
        art = Artifact(store, m)
        try:
            results.append(verify_artifact(art))
            if not args.json:
                print(f"ok     {art.uri}")
        except (ArtifactError, SchemaError, OSError) as e:
            failed += 1
            results.append({"uri": art.uri, "ok": False, "error": _one_line(e)})
            print(f"error: {_one_line(e)}", file=sys.stderr)
    if args.json:
        _emit_json({"ok": failed == 0, "checked": len(results), "failed": failed, "artifacts": results})
    else:
        print(f"\n{len(results) - failed} of {len(results)} artifact version(s) verified in {store.root}")
    return 2 if failed else 0


def cmd_gc(args, store) -> int:
    removed = store.gc(grace_s=args.grace, prune=args.prune, dry_run=args.dry_run)
    if args.json:
        _emit_json({"store": store.root, "dry_run": args.dry_run, "prune": args.prune, "grace_s": args.grace,
                    "removed": removed})
        return 0
    verb = "would remove" if args.dry_run else "removed"
    for r in removed:
        print(f"{verb}  {r['path']}  ({r['reason']})")
    if not removed:
        print(f"nothing to remove in {store.root}")
    else:
        print(f"\n{len(removed)} path(s) {'would be removed' if args.dry_run else 'removed'} from {store.root}")
    return 0


COMMANDS = {"ls": cmd_ls, "show": cmd_show, "head": cmd_head, "lineage": cmd_lineage, "verify": cmd_verify, "gc": cmd_gc}


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text or type(e).__name__


def run_artifacts(args) -> int:
    """Run a parsed ``artifacts`` subcommand; 0 on success, 2 with one error line on stderr."""
    from artifacts_schema import SchemaError
    from compass.store.store import ArtifactError
    try:
        store = open_store(args)
        return COMMANDS[args.artifacts_command](args, store)
    except BrokenPipeError:  # e.g. `compass artifacts ls | head`
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (CLIError, ArtifactError, SchemaError, ValueError, OSError, ImportError) as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
