"""``compass import-model SOURCE``: a Hugging Face model folder as the pipeline's base checkpoint.

Prints the artifact URI, the architecture, parameter count and dtype, and the ``compass run``
command that starts the pipeline from it (docs/models.md). Errors are one line on stderr and exit
code 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

DEFAULT_STORE = "./artifacts"


def add_import_model_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("import-model", help="import a Hugging Face model folder as the pipeline's base checkpoint",
                       description="Check a Hugging Face model folder (qwen3, qwen2 / Qwen2.5, llama, qwen3_moe; "
                                   "safetensors weights; a tokenizer with a chat template and an eos token) and "
                                   "commit it as a checkpoint artifact that `compass run --from-artifact "
                                   "base_ckpt=URI` starts from (docs/models.md).")
    p.add_argument("source", metavar="SOURCE", help="the model folder: a path, file://…, s3://bucket/prefix/model, …")
    p.add_argument("--name", default="base_ckpt", help="artifact name (default: base_ckpt)")
    p.add_argument("--store", default=None, metavar="URI",
                   help=f"store root: a path, file://… or s3://bucket/prefix (default: $COMPASS_STORE or "
                        f"{DEFAULT_STORE})")
    p.add_argument("--store-option", action="append", default=[], metavar="KEY=VALUE",
                   help="fsspec option for the store, repeatable (e.g. endpoint_url=http://127.0.0.1:8333); "
                        "also used for SOURCE when it is on the store's protocol (s3://)")
    p.add_argument("--source-option", action="append", default=None, metavar="KEY=VALUE",
                   help="fsspec option for SOURCE, repeatable; replaces the store's options for it")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the summary")
    return p


def _protocol(uri: str) -> str:
    return uri.split("://", 1)[0] if "://" in uri else "file"


def source_options(source: str, store_root: str, store_options: dict, given: dict | None) -> dict:
    """The source's fsspec options: ``--source-option`` when given, else the store's when both sit on one
    protocol (a model and a store in one S3 endpoint need them once), else none."""
    if given is not None:
        return given
    return dict(store_options) if _protocol(source) == _protocol(store_root) != "file" else {}


def _human(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def next_command(flags: str, uri: str) -> str:
    return f"compass run {flags} --from-artifact base_ckpt={uri}"


def summary(res, flags: str) -> str:
    pad = res.pad
    pad_text = f"pad {pad['token']} ({'its own' if pad['how'] == 'own' else pad['how'] + ', was ' + pad['was']})"
    lines = [f"{res.status} {res.kind}/{res.name} version {res.version} from {res.source} ({res.wall_s:.1f}s)",
             f"  artifact   {res.uri}",
             f"  arch       {res.arch}, {_human(res.params)} parameters ({res.params:,}), {res.dtype}",
             f"  tokenizer  {res.tokenizer_size:,} tokens for vocab_size {res.vocab_size:,}; {pad_text}; "
             f"the model's own chat template"]
    if res.generation_dropped:
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(res.generation_dropped.items()))
        lines.append(f"  sampling   generation_config.json defaults left out ({dropped}): the pipeline's config "
                     f"sets sampling")
    if res.skipped:
        lines.append(f"  left out   {', '.join(res.skipped[:8])}{' …' if len(res.skipped) > 8 else ''}")
    lines += ["start the pipeline from it:", f"  {next_command(flags, res.uri)}"]
    return "\n".join(lines)


def run_import_model(args) -> int:
    from compass.cli.import_ import store_flags
    from compass.lm.hf_import import ModelImportError, import_model
    from compass.store.options import parse_store_options
    from compass.store.store import ArtifactError, ArtifactStore

    root = args.store or os.environ.get("COMPASS_STORE") or DEFAULT_STORE
    try:
        opts = parse_store_options(args.store_option)
        given = parse_store_options(args.source_option) if args.source_option is not None else None
        store = ArtifactStore(root, storage_options=opts)
        res = import_model(args.source, store, args.name,
                           storage_options=source_options(args.source, store.root, opts, given))
    except (ModelImportError, ArtifactError, ValueError, OSError) as e:
        print(f"error: {e}".replace("\n", " "), file=sys.stderr)
        return 2
    flags = store_flags(store.root, args.store_option)
    if args.json:
        print(json.dumps({**res.to_dict(), "next": next_command(flags, res.uri)}))
    else:
        print(summary(res, flags))
    return 0
