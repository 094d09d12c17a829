"""``python -m stages.<name>``: run one stage without Prefect.

    python -m stages.sft --config configs/tiny.yaml --section sft_longcot \
        --store ./artifacts --input base=URI --input data=URI --output-name checkpoint=thinking_ckpt
"""
from __future__ import annotations

import argparse
import json
import sys

from compass.config import ConfigError, read_yaml, validate
from compass.logs import new_log_file, setup_logging
from compass.store.options import parse_store_options
from compass.store.store import Artifact, ArtifactError, ArtifactStore


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for it in items:
        if "=" not in it:
            raise SystemExit(f"{what} must be SLOT=VALUE, got '{it}'")
        k, v = it.split("=", 1)
        out[k] = v
    return out


def main(stage: str, argv: list[str] | None = None) -> int:
    from compass.dag.stages import stage_module
    mod = stage_module(stage)
    spec = mod.SPEC
    ap = argparse.ArgumentParser(prog=f"python -m stages.{stage}", description=f"Run the {stage} stage.")
    ap.add_argument("--config", help="YAML: the stage's own config, or a pipeline config with --section")
    ap.add_argument("--section", help="key of this stage run in a pipeline config (e.g. sft_longcot)")
    ap.add_argument("--store", default="./artifacts")
    ap.add_argument("--store-option", action="append", default=[], metavar="KEY=VALUE",
                    help="fsspec storage option, e.g. endpoint_url=http://127.0.0.1:8333")
    ap.add_argument("--input", action="append", default=[], metavar="SLOT=URI",
                    help=f"input artifacts; slots: {', '.join(spec.inputs) or 'none'}"
                         + "".join(f"; {v}:LABEL any number of times" for v in sorted(spec.variadic_inputs)))
    ap.add_argument("--output-name", action="append", default=[], metavar="SLOT=NAME")
    ap.add_argument("--run-name")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="show third-party INFO logs on the console too (the log file always has them)")
    args = ap.parse_args(argv)
    log_path = setup_logging(verbose=args.verbose, log_file=new_log_file(f"stage-{stage}"))
    try:
        data = read_yaml(args.config, args.section) if args.config else {}
        config = validate(spec.config, data, f"{args.config}{':' + args.section if args.section else ''}")
        store = ArtifactStore(args.store, storage_options=parse_store_options(args.store_option))
        inputs = {slot: Artifact.open_uri(uri, store) for slot, uri in _pairs(args.input, "--input").items()}
        result = mod.run(config, inputs, store, run_name=args.run_name or args.section,
                         output_names=_pairs(args.output_name, "--output-name"))
    except (ConfigError, ArtifactError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        print(f"full log: {log_path}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_dict(), indent=2))
    print(f"full log: {log_path}", file=sys.stderr)
    return 0
