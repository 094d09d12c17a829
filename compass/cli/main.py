"""``compass``: run the pipeline, one stage, or inspect artifacts."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from compass.logs import new_log_file, setup_logging

REPO_CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def default_config() -> str:
    local = Path("configs/tiny.yaml")
    return str(local if local.exists() else REPO_CONFIGS / "tiny.yaml")


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*["-" * w for w in widths])]
    lines += [fmt.format(*[str(c) for c in r]) for r in rows]
    return "\n".join(lines)


def cmd_run(args) -> int:
    from compass.config import ConfigError
    from compass.store.store import ArtifactError
    from compass.dag.pipeline_yaml import load_pipeline_config

    try:
        cfg, base_line = load_pipeline_config(args.config)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    print(base_line)
    if args.store:
        cfg.store = args.store
    from compass.cli.artifacts import CLIError, parse_store_options
    from compass.dag.run_plan import make_run_plan
    import flows  # noqa: F401  (sets Prefect defaults before Prefect is imported)
    from flows.prefect_api import PrefectStartError, ensure_prefect_api
    try:
        if args.store_option:
            cfg.store_options = {**cfg.store_options, **parse_store_options(args.store_option)}
        if cfg.store_options.get("credentials_block"):
            ensure_prefect_api()
            from flows.credentials import apply_credentials_block
            apply_credentials_block(cfg.store_options)      # a Prefect Secret block -> this process's env
        make_run_plan(cfg, args.from_artifact, args.until)  # bad --from-artifact / --until: one line, no flow
        probe_store(cfg.store, cfg.store_options)           # no credentials, no endpoint: one line, no flow
        ensure_prefect_api()    # after the usage checks; a slow start waits and retries, a failed one is one line
    except PrefectStartError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (CLIError, ArtifactError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # the console keeps third-party INFO out unless --verbose; the run's log file gets everything
    log_path = setup_logging(verbose=args.verbose, log_file=new_log_file("run"))
    from flows.pipeline import pipeline_flow

    t0 = time.perf_counter()
    ok = False
    try:
        rows = pipeline_flow(config=cfg.model_dump(mode="json"), from_artifacts=args.from_artifact,
                             until=args.until)
        ok = True
    except (ConfigError, ArtifactError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if not ok:
            print(f"full log: {log_path}", file=sys.stderr)
    wall = time.perf_counter() - t0
    print()
    print(_table([[r["run_name"], r["stage"], r["status"], r["version"], f"{r['wall_s']:.1f}"] for r in rows],
                 ["stage run", "stage", "status", "version", "wall s"]))
    from compass.store.store import ArtifactStore
    root = ArtifactStore(cfg.store, storage_options=cfg.store_options).root
    print(_eval_summary(rows, cfg))
    print(f"\npipeline finished in {wall:.1f}s; artifacts in {root}")
    print(f"inspect them with: compass artifacts ls --store {root}")
    print(f"full log: {log_path}")
    if args.json:
        print(json.dumps({"wall_s": wall, "store": root, "stages": rows}))
    return 0


def _eval_summary(rows: list[dict], cfg) -> str:
    """One line per held-out suite from the evaluation report, if this run has one."""
    report = next((r["outputs"].get("report") for r in rows if r["stage"] == "evaluation"), None)
    if report is None:
        return ""
    from compass.store.store import Artifact, ArtifactError, ArtifactStore
    try:
        art = Artifact.open_uri(report, ArtifactStore(cfg.store, storage_options=cfg.store_options))
        summary = json.loads(art.read_bytes("summary.json"))
    except (ArtifactError, ValueError, KeyError) as e:
        return f"\n(no evaluation summary: {e})"
    from compass.cli.eval_compare import accuracy_by_checkpoint
    if len(summary.get("checkpoints") or {}) > 1:        # every checkpoint of the run, one column each
        acc, se = accuracy_by_checkpoint(summary), accuracy_by_checkpoint(summary, "accuracy_se")
        suites = sorted({s for a in acc.values() for s in a})
        lines = ["\nheld-out accuracy of every checkpoint, ± one standard error over prompts (the last: "
                 + summary.get("model", "?") + "):",
                 "  " + f"{'suite':<12}" + "".join(f"{label[:15]:>16}" for label in acc)]
        for suite in suites:
            cells = []
            for label, a in acc.items():
                x, e = a.get(suite), se.get(label, {}).get(suite)
                cells.append(f"{'—' if x is None else f'{x:.3f}' + ('' if e is None else f' ± {e:.3f}'):>16}")
            lines.append("  " + f"{suite:<12}" + "".join(cells))
        return "\n".join(lines)
    lines = [f"\nheld-out accuracy of {summary.get('model', '?')}:"]
    for suite, s in sorted(summary.get("suites", {}).items()):
        lines.append(f"  {suite:<12} {s['accuracy']:.3f}  ({s['samples']} samples)")
    return "\n".join(lines)


def probe_store(root: str, options: dict) -> None:
    """Touch the store once, so that missing credentials or an unreachable endpoint end the command
    before any work starts (the client's exception reaches ``main``, which prints one line)."""
    from compass.store.store import ArtifactStore
    store = ArtifactStore(root, storage_options=options, create=False)
    if not store.is_local:
        store.fs.exists(store.root_path)


def cmd_stage(args, rest: list[str]) -> int:
    from compass.runtime.stage_cli import main as stage_main
    return stage_main(args.stage, rest, prog=f"compass stage {args.stage}")


def cmd_config(args) -> int:
    import yaml

    from compass.config import ConfigError
    from compass.dag.pipeline_yaml import load_pipeline_config
    try:
        cfg, base_line = load_pipeline_config(args.config or default_config())
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"# {base_line}")     # a YAML comment: the output stays a loadable config
    print(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), end="")
    return 0


def cmd_serve(args) -> int:
    import flows  # noqa: F401
    from flows.serve import serve_all
    if "PREFECT_API_URL" not in os.environ:
        print("error: compass serve needs a Prefect server: run `prefect server start` and set "
              "PREFECT_API_URL=http://127.0.0.1:4200/api", file=sys.stderr)
        return 2
    from compass.config import ConfigError
    from compass.dag.deployments import PIPELINE_KEY, check_cron, deployment_specs
    from compass.dag.pipeline_yaml import load_pipeline_config
    config_path = os.path.abspath(args.config or default_config())
    try:
        cfg, base_line = load_pipeline_config(config_path)
        schedules = {**cfg.schedules, **({PIPELINE_KEY: check_cron(PIPELINE_KEY, args.cron)} if args.cron else {})}
        specs = deployment_specs(config_path, args.store, schedules, cfg.schedule_timezone)
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(base_line)
    for s in specs:
        print(f"deployment {s.name:<14} {f'cron {s.cron!r} ({s.timezone})' if s.cron else 'on demand'}")
    serve_all(specs)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="compass", description="compass-rl: the Each-Prompt-Matters RL recipe.")
    sub = ap.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run the pipeline (Prefect, ephemeral mode unless PREFECT_API_URL is set)")
    r.add_argument("--config", default=None, help="pipeline YAML (default: configs/tiny.yaml)")
    r.add_argument("--store", help="artifact store root (overrides the config): ./artifacts, s3://bucket/prefix")
    r.add_argument("--store-option", action="append", default=[], metavar="KEY=VALUE")
    r.add_argument("--from-artifact", action="append", default=[], metavar="[NAME=]URI",
                   help="start from a stored artifact; stages only needed to make it are skipped")
    r.add_argument("--until", metavar="STAGE_RUN", help="stop after this stage run (e.g. merge)")
    r.add_argument("--json", action="store_true", help="also print one JSON line with the results")
    r.add_argument("-v", "--verbose", action="store_true",
                   help="show third-party INFO logs (mergekit, transformers, Ray, Prefect) on the console too; "
                        "they always go to the run's log file (.compass/logs/)")

    s = sub.add_parser("stage", help="run one stage without Prefect (compass stage NAME --help)",
                       add_help=False)
    s.add_argument("stage")

    c = sub.add_parser("config", help="print the full, validated pipeline config (default: configs/tiny.yaml)")
    c.add_argument("--config", default=None)

    b = sub.add_parser("bench", help="run a benchmark (table, then one JSON line)", add_help=False)
    b.add_argument("name")

    v = sub.add_parser("serve", help="serve the pipeline and every stage as Prefect deployments (UI runs)")
    v.add_argument("--config", default=None)
    v.add_argument("--store")
    v.add_argument("--cron", help="the pipeline deployment's cron, e.g. '0 2 * * *' (overrides the config's "
                                  "schedules.pipeline; stage schedules come from the config)")

    from compass.cli.artifacts import add_artifacts_parser
    add_artifacts_parser(sub)
    from compass.cli.import_ import add_import_parser
    add_import_parser(sub)
    from compass.cli.import_model import add_import_model_parser
    add_import_model_parser(sub)
    from compass.cli.gym import add_gym_parser
    add_gym_parser(sub)
    from compass.cli.eval_compare import add_eval_parser
    add_eval_parser(sub)
    return ap


def _list_choices(command: str) -> int:
    """``compass stage`` / ``compass bench`` without a name: what can be named (each takes its own --help)."""
    if command == "stage":
        from compass.dag.stages import STAGES
        names, what = list(STAGES), "stages (in DAG order)"
    else:
        from compass.bench import BENCHMARKS
        names, what = sorted(BENCHMARKS), "benchmarks"
    print(f"usage: compass {command} NAME [options]   (compass {command} NAME --help for its options)\n"
          f"{what}: {', '.join(names)}")
    return 0


def _store_arg(argv: list[str]) -> str | None:
    """The ``--store`` a command line names, for an error line about it."""
    for i, a in enumerate(argv):
        if a == "--store" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--store="):
            return a.split("=", 1)[1]
    return os.environ.get("COMPASS_STORE")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    setup_logging()
    from compass.store.options import backend_error_line, backend_errors
    try:
        return _dispatch(argv)
    except backend_errors() as e:        # e.g. no S3 credentials, an endpoint nobody listens on
        print(f"error: {backend_error_line(e, _store_arg(argv))}", file=sys.stderr)
        return 2


def _dispatch(argv: list[str]) -> int:
    ap = build_parser()
    if argv[:1] in (["stage"], ["bench"]) and (len(argv) < 2 or argv[1] in ("-h", "--help")):
        return _list_choices(argv[0])
    if argv[:1] == ["stage"]:
        args, rest = ap.parse_known_args(argv[:2])
        return cmd_stage(args, argv[2:])
    if argv[:1] == ["bench"]:
        from compass.bench import run_bench
        return run_bench(argv[1], argv[2:])
    args = ap.parse_args(argv)
    if args.command == "run":
        args.config = args.config or default_config()
        return cmd_run(args)
    if args.command == "serve":
        return cmd_serve(args)
    if args.command == "config":
        return cmd_config(args)
    if args.command == "gym":
        from compass.cli.gym import run_gym
        return run_gym(args)
    if args.command == "import":
        from compass.cli.import_ import run_import
        return run_import(args)
    if args.command == "import-model":
        from compass.cli.import_model import run_import_model
        return run_import_model(args)
    if args.command == "eval":
        from compass.cli.eval_compare import run_eval
        return run_eval(args)
    if args.command == "artifacts":
        from compass.cli.artifacts import run_artifacts
        return run_artifacts(args)
    ap.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
