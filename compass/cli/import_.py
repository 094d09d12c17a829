"""``compass import --config FILE.yaml``: load an external set into the store (see docs/import.md).

Prints the two artifact URIs (the table and its quarantine), the counts per
quarantine reason, how to feed the table to the pipeline and how to see the
quarantined rows. Errors, an import that keeps no row among them, are one line
on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

DEFAULT_STORE = "./artifacts"

# Which pipeline artifact an imported table can stand in for (compass run --from-artifact NAME=URI).
PIPELINE_NAMES = {
    "prompts": [("raw_prompts", "RL prompts, cleaned and graded by data_filter"),
                ("eval_prompts", "held-out suites for evaluation and decontamination")],
    "sft_samples": [("raw_sft", "SFT samples, cleaned and routed by data_filter")],
    "preference_pairs": [("preference_pairs", "pairs for GenRM training")],
}


def add_import_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("import", help="import an external set (Parquet, JSONL, JSON, CSV, datasets) as a table",
                       description="Import an external data set into the artifact store through the column "
                                   "mapping of an import config (docs/import.md). Rows that do not fit go to a "
                                   "quarantine artifact with their reason.")
    p.add_argument("--config", required=True, metavar="FILE.yaml",
                   help="import config (e.g. configs/import/gsm8k.yaml)")
    p.add_argument("--store", default=None, metavar="URI",
                   help=f"store root: a path, file://… or s3://bucket/prefix (default: $COMPASS_STORE or "
                        f"{DEFAULT_STORE})")
    p.add_argument("--store-option", action="append", default=[], metavar="KEY=VALUE",
                   help="fsspec option for the store, repeatable (e.g. endpoint_url=http://127.0.0.1:8333)")
    p.add_argument("--name", default=None, help="artifact name (default: the config's name, else its file stem)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the summary")
    return p


SECRET_WORDS = ("key", "secret", "token", "password")


def store_flags(root: str, store_options: list[str]) -> str:
    """``--store ROOT`` and the ``--store-option`` flags to repeat (secrets shown as ``…``)."""
    flags = [f"--store {root}"]
    for it in store_options:
        key, _, value = it.partition("=")
        secret = any(w in key.lower() for w in SECRET_WORDS)
        flags.append(f"--store-option {key}={'…' if secret else value}")
    return " ".join(flags)


def summary(res, flags: str) -> str:
    lines = [f"{res.status} {res.kind}/{res.name} version {res.version} from {res.source.get('uri')} "
             f"({res.source.get('format')}, {res.wall_s:.1f}s)",
             f"  table       {res.table_uri}  ({res.rows_imported} rows)",
             f"  quarantine  {res.quarantine_uri}  ({res.rows_quarantined} rows)",
             f"  rows read {res.rows_read} = imported {res.rows_imported} + quarantined {res.rows_quarantined}"]
    for reason, n in sorted(res.reasons.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"    {reason:<16} {n}")
    if res.rows_quarantined:
        lines.append("  each quarantined row is in the quarantine table with its reason, field, detail and row_json")
    lines.append("use it in the pipeline:")
    for name, what in PIPELINE_NAMES[res.kind]:
        lines.append(f"  compass run {flags} --from-artifact {name}={res.table_uri}    # {what}")
    if res.rows_quarantined:
        lines.append(f"see the quarantined rows: compass artifacts head {flags} {res.quarantine_uri}")
    return "\n".join(lines)


def run_import(args) -> int:
    from compass.config import ConfigError
    from compass.store.store import ArtifactError, ArtifactStore
    from compass.store.options import parse_store_options
    from compass.ingest.config import load_import_config
    from compass.ingest.importer import IngestError, NothingImported, import_table
    from compass.ingest.source import SourceError

    try:
        cfg = load_import_config(args.config)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    root = args.store or os.environ.get("COMPASS_STORE") or DEFAULT_STORE
    try:
        store = ArtifactStore(root, storage_options=parse_store_options(args.store_option))
        res = import_table(cfg, store, args.name)
    except NothingImported as e:
        see = f"; see them: compass artifacts head {store_flags(store.root, args.store_option)} " \
              f"{e.quarantine_uri}" if e.quarantine_uri else ""
        print(f"error: {args.config}: {e}{see}".replace("\n", " "), file=sys.stderr)
        return 2
    except (SourceError, IngestError, ArtifactError, ValueError, OSError) as e:
        print(f"error: {args.config}: {e}".replace("\n", " "), file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**res.to_dict(), "use": {n: res.table_uri for n, _ in PIPELINE_NAMES[res.kind]}}))
    else:
        print(summary(res, store_flags(store.root, args.store_option)))
    return 0
