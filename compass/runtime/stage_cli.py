"""``compass stage NAME`` / ``python -m stages.<name>``: run one stage without Prefect.

    compass stage sft --section sft_longcot --store ./artifacts \
        --input base=checkpoint/base_ckpt --input data=sft_samples/sft_longcot --output-name checkpoint=thinking_ckpt

Usage errors (an unknown stage, slot or flag form) are one line on stderr and exit code 2, before
anything is read or written.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from compass.config import ConfigError, suggest_key, validate
from compass.logs import new_log_file, setup_logging
from compass.store.options import backend_error_line, backend_errors, parse_store_options
from compass.store.store import ArtifactError, ArtifactStore


class UsageError(ValueError):
    """A bad command line: one line, exit code 2."""


def _pairs(items: list[str], flag: str, slots: list[str], what: str) -> dict[str, str]:
    """``SLOT=VALUE`` items -> {slot: value}; a malformed item or unknown slot is a UsageError."""
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k.strip() or not v.strip():
            raise UsageError(f"{flag} {it}: expected SLOT=VALUE ({what}: {', '.join(slots) or 'none'})")
        out[k.strip()] = v.strip()
    return out


def _check_slots(stage: str, given: dict, known: list[str], flag: str, describe: str, variadic=()) -> None:
    for slot in given:
        base, sep, label = slot.partition(":")
        if slot in known or (sep and label and base in variadic):
            continue
        close = suggest_key(slot, known)
        raise UsageError(f"{flag} {slot}={given[slot]}: stage {stage} has no {describe} slot '{slot}'"
                         + (f" (did you mean '{close}'?)" if close else "") + f"; its slots: {', '.join(known)}")


def _runs_of(stage: str) -> dict[str, dict[str, str]]:
    """This stage's runs in the pipeline: run name -> {output slot: artifact name}."""
    from compass.dag.pipeline import PIPELINE
    return {n.run_name: dict(n.outputs) for n in PIPELINE if n.stage == stage}


def build_parser(stage: str, spec, prog: str) -> argparse.ArgumentParser:
    runs = _runs_of(stage)
    inputs = ", ".join(f"{s} ({k}{', optional' if s in spec.optional_inputs else ''})"
                       for s, k in spec.inputs.items()) or "none"
    inputs += "".join(f"; {v}:LABEL ({spec.inputs[v]}) any number of times" for v in sorted(spec.variadic_inputs))
    outputs = ", ".join(f"{s} ({k})" for s, k in spec.outputs.items())
    named = "; ".join(f"{run}: " + ", ".join(f"{s}={a}" for s, a in outs.items()) for run, outs in runs.items())
    ap = argparse.ArgumentParser(
        prog=prog, description=f"Run the {stage} stage on its own (no Prefect). Input slots: {inputs}. "
                               f"Output slots: {outputs}.",
        epilog=f"An input REF is an artifact URI or folder as `compass artifacts ls` shows it, or KIND/NAME[/VERSION] "
               f"in --store. The pipeline runs this stage as {', '.join(runs)} and names its outputs ({named}).")
    ap.add_argument("--config", help="pipeline YAML, built on the embedded default configs/tiny.yaml (a section "
                                     "of it configures the stage; default: the embedded default itself)")
    ap.add_argument("--section", help=f"the stage run's section of the pipeline config: {', '.join(runs)}"
                                      + (f" (default {next(iter(runs))})" if len(runs) == 1 else ""))
    ap.add_argument("--store", default="./artifacts", help="store root: a path, file://… or s3://bucket/prefix "
                                                           "(default ./artifacts)")
    ap.add_argument("--store-option", action="append", default=[], metavar="KEY=VALUE",
                    help="fsspec storage option, e.g. endpoint_url=http://127.0.0.1:8333")
    ap.add_argument("--input", action="append", default=[], metavar="SLOT=REF",
                    help=f"an input artifact, repeatable; slots: {inputs}")
    ap.add_argument("--output-name", action="append", default=[], metavar="SLOT=NAME",
                    help=f"the artifact name of an output (default: the name the pipeline gives it in the "
                         f"section's run); slots: {outputs}")
    ap.add_argument("--run-name", help="the producer name written in the manifests (default: the section)")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="show third-party INFO logs on the console too (the log file always has them)")
    return ap


def _section(stage: str, section: str | None) -> str:
    runs = list(_runs_of(stage))
    if section is None:
        if len(runs) == 1:
            return runs[0]
        raise UsageError(f"stage {stage} runs as {', '.join(runs)} in the pipeline: pass --section with one of them")
    if section not in runs:
        raise UsageError(f"--section {section}: stage {stage} runs as {', '.join(runs)} in the pipeline")
    return section


def _config(spec, args, section: str):
    """The stage's config: its section of the pipeline config (a user file builds on the embedded default)."""
    from compass.dag.pipeline_yaml import EMBEDDED_DEFAULT, load_pipeline_dict
    data, base_line = load_pipeline_dict(args.config)
    source = args.config or str(EMBEDDED_DEFAULT)
    body = data.get(section, {})          # absent (base: none): the model's defaults
    if not isinstance(body, dict):
        raise ConfigError(f"config error in {source}: {section}: must be a mapping")
    print(base_line, file=sys.stderr)
    return validate(spec.config, body, f"{source}:{section}")


def main(stage: str, argv: list[str] | None = None, prog: str | None = None) -> int:
    from compass.dag.stages import STAGES, stage_module
    if stage not in STAGES:
        close = suggest_key(stage, list(STAGES))
        print(f"error: unknown stage '{stage}'" + (f" (did you mean '{close}'?)" if close else "")
              + f"; stages: {', '.join(STAGES)}", file=sys.stderr)
        return 2
    mod = stage_module(stage)
    spec = mod.SPEC
    args = build_parser(stage, spec, prog or f"python -m stages.{stage}").parse_args(argv)
    try:
        refs = _pairs(args.input, "--input", list(spec.inputs), "input slots")
        _check_slots(stage, refs, list(spec.inputs), "--input", "input", spec.variadic_inputs)
        names = _pairs(args.output_name, "--output-name", list(spec.outputs), "output slots")
        _check_slots(stage, names, list(spec.outputs), "--output-name", "output")
        missing = [s for s in spec.inputs if s not in refs and s not in spec.optional_inputs]
        if missing:
            raise UsageError(f"stage {stage} needs --input for slot(s) {', '.join(missing)}")
        store_options = parse_store_options(args.store_option)
        section = _section(stage, args.section)
    except (UsageError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    log_path = setup_logging(verbose=args.verbose, log_file=new_log_file(f"stage-{stage}"))
    try:
        config = _config(spec, args, section)
        from compass.runtime.artifact_ref import open_ref
        store = ArtifactStore(args.store, storage_options=store_options, create=False)
        try:
            inputs = {}
            for slot, ref in refs.items():
                inputs[slot] = open_ref(ref, store)
        except ArtifactError as e:
            raise ArtifactError(f"--input {slot}: {e}") from None
        if store.is_local:
            os.makedirs(store.root_path, exist_ok=True)    # only once the command is known to be good
        names = {**_runs_of(stage)[section], **names}     # the pipeline's names unless told otherwise
        result = mod.run(config, inputs, store, run_name=args.run_name or section, output_names=names)
    except (ConfigError, ArtifactError, ValueError, OSError, *backend_errors()) as e:
        if isinstance(e, ConfigError):       # already "config error in FILE: …", one line per problem
            print(e, file=sys.stderr)
        else:
            text = backend_error_line(e, args.store) if isinstance(e, backend_errors()) else " ".join(str(e).split())
            print(f"error: {text}", file=sys.stderr)
        print(f"full log: {log_path}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_dict(), indent=2))
    print(f"full log: {log_path}", file=sys.stderr)
    return 0
