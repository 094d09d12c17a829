"""Turn a pipeline config plus user choices into the concrete list of stage calls."""
from __future__ import annotations

from dataclasses import dataclass, field

from compass.store.layout import ArtifactError
from compass.runtime.artifact_ref import open_ref
from compass.runtime.stage_summary import SUMMARY_FILE, inline_images
from compass.store.store import Artifact, ArtifactStore
from compass.dag.config import PipelineConfig
from compass.dag.pipeline import PIPELINE, Node, plan


@dataclass
class RunPlan:
    store: str
    store_options: dict
    steps: list[Node]
    configs: dict[str, dict]                 # run name -> stage config (JSON-able)
    provided: dict[str, str] = field(default_factory=dict)  # artifact name -> URI
    made: dict[str, str] = field(default_factory=dict)      # artifact name -> URI, filled as steps finish
    extra_inputs: dict[str, dict[str, str]] = field(default_factory=dict)   # run name -> slot -> URI

    def inputs_for(self, node: Node) -> dict[str, str]:
        """Input slot -> URI: what the user provided wins over what an earlier step made; an optional slot
        whose artifact is neither is left out; then the run's extra inputs (``eval_suites``)."""
        return {**{slot: self.provided.get(name) or self.made[name] for slot, name in node.inputs.items()
                   if slot not in node.optional or name in self.provided or name in self.made},
                **self.extra_inputs.get(node.run_name, {})}

    def record(self, node: Node, outputs: dict[str, str]) -> None:
        """Note a finished step's outputs (slot -> URI) under their artifact names.

        A stage that makes several artifacts also makes those the user provided (the world stage writes its
        own ``base_ckpt`` beside the data tables) and the runner makes its version LATEST; the provided one
        is the run's, so LATEST goes back to it where it is a version of that name in this store (what
        resolves the name later, e.g. a stage deployment's LATEST input, then reads the model the run used)."""
        self.made.update({node.outputs[slot]: uri for slot, uri in outputs.items()})
        clashes = [name for name in node.outputs.values() if name in self.provided]
        if clashes:
            store = ArtifactStore(self.store, storage_options=self.store_options)
            for name in clashes:
                try:
                    kind, stored_name, version = store.parse_uri(self.provided[name])
                except ArtifactError:
                    continue                    # in another store: nothing to re-point here
                if stored_name == name:
                    store.set_latest(kind, name, version)


def _output_kinds() -> dict[str, str]:
    """artifact name -> the kind its producer writes."""
    from compass.dag.stages import stage_spec
    return {name: stage_spec(n.stage).outputs[slot] for n in PIPELINE for slot, name in n.outputs.items()}


def resolve_ref(ref: str, store: ArtifactStore) -> str:
    """An artifact reference as a user types it (the Prefect UI's parameter form, ``--from-artifact``)
    -> its URI: any form ``compass.runtime.artifact_ref.open_ref`` takes (a URI, a folder,
    ``KIND/NAME[/VERSION]`` in ``store``)."""
    return open_ref(ref, store).uri


def resolve_provided(specs: list[str], store: ArtifactStore) -> dict[str, str]:
    """``--from-artifact`` values: ``REF`` (the artifact's own name picks its slot) or ``NAME=REF``, where
    ``REF`` is any form ``open_ref`` takes (a URI, a folder, ``KIND/NAME[/VERSION]`` in the store)."""
    kinds = _output_kinds()
    out: dict[str, str] = {}
    for spec in specs:
        head, sep, tail = spec.partition("=")
        name, uri = (head, tail) if sep and "/" not in head else (None, spec)
        art = open_ref(uri, store)                        # opened once: its URI, name and kind below
        name = name or art.name
        if name not in kinds:
            raise ValueError(f"--from-artifact {spec}: '{name}' is not an artifact of the pipeline; "
                             f"use NAME=URI with one of {sorted(kinds)}")
        if art.kind != kinds[name]:
            raise ValueError(f"--from-artifact {spec}: '{name}' must be a {kinds[name]} artifact, "
                             f"{art.uri} is a {art.kind}")
        out[name] = art.uri
    return out


def make_run_plan(cfg: PipelineConfig, from_artifacts: list[str] | None = None,
                  until: str | None = None) -> RunPlan:
    store = ArtifactStore(cfg.store, storage_options=cfg.store_options)
    provided = resolve_provided(list(from_artifacts or []), store)
    steps = plan(set(provided), until=until, nodes=PIPELINE)
    configs = {n.run_name: cfg.stage_config(n.run_name).model_dump(mode="json") for n in steps}
    return RunPlan(store=store.root, store_options=cfg.store_options, steps=steps, configs=configs,
                   provided=provided, extra_inputs={n.run_name: extra_inputs(cfg, n, store) for n in steps})


def extra_inputs(cfg: PipelineConfig, node: Node, store: ArtifactStore) -> dict[str, str]:
    """Slot -> URI of the inputs a node takes beyond the DAG's: ``suites:NAME`` for each of ``eval_suites``
    (the LATEST ``prompts/NAME``) on the evaluation stage. A missing table is an error naming it."""
    if node.stage != "evaluation":
        return {}
    out = {}
    for name in cfg.eval_suites:
        try:
            out[f"suites:{name}"] = store.get("prompts", name, "latest").uri
        except ArtifactError as e:
            raise ValueError(f"eval_suites: no prompts table {name!r} in {store.root} ({e}); import it first: "
                             f"compass import --config configs/import/{name}.yaml") from None
    return out


def stage_run_label(result: dict) -> str:
    """A stage run's name for orchestrators, saying what it did: ``sft_longcot · ran 152 s`` or
    ``world · reused``."""
    what = f"ran {result['wall_s']:.0f} s" if result["status"] == "ran" else result["status"]
    return f"{result['run_name']} · {what}"


def pipeline_run_labels(rows: list[dict]) -> tuple[str, list[str]]:
    """What a pipeline run did, for orchestrators: a name suffix (``3 ran, 6 reused``) and one tag per
    stage run (``ran:sft_longcot``, ``reused:world``), so a UI list of runs tells real work from reuse."""
    ran = sum(r["status"] == "ran" for r in rows)
    return f"{ran} ran, {len(rows) - ran} reused", [f"{r['status']}:{r['run_name']}" for r in rows]


def summary_markdown(rows: list[dict], store: str, store_options: dict | None = None) -> str:
    """The pipeline run in markdown: each stage run (ran or reused, version, time), then the evaluation's
    held-out table when this run has one (its report's ``summary.md``, its charts inlined as the evaluation's own
    summary has them: a store path is no URL a browser can fetch)."""
    ran = sum(r["status"] == "ran" for r in rows)
    lines = [f"# compass-rl pipeline\n\nStore: `{store}`\n",
             f"{ran} stage run(s) ran, {len(rows) - ran} reused stored outputs.\n",
             "| stage run | status | version | wall s |", "|---|---|---|---:|"]
    for r in rows:
        status = "**ran**" if r["status"] == "ran" else r["status"]
        lines.append(f"| {r['run_name']} | {status} | `{r['version']}` | {r['wall_s']:.1f} |")
    report = next((r["outputs"].get("report") for r in rows if r.get("stage") == "evaluation"), None)
    if report:
        try:
            art = Artifact.open_uri(report, ArtifactStore(store, storage_options=store_options or {}))
            lines += ["", inline_images(art.read_bytes(SUMMARY_FILE).decode().strip(), art)]
        except (ArtifactError, OSError) as e:               # e.g. an older report without summary.md
            lines += ["", f"(no held-out table: {e})"]
    return "\n".join(lines) + "\n"


def node_call(cfg: PipelineConfig, run_name: str, inputs: dict[str, str] | None = None) -> dict:
    """Arguments for re-running one pipeline node on its own.

    Inputs default to the ``LATEST`` version of each artifact the node reads,
    so a single stage can be re-run (e.g. from the Prefect UI) without URIs.
    """
    node = next((n for n in PIPELINE if n.run_name == run_name), None)
    if node is None:
        raise ValueError(f"no pipeline stage run named '{run_name}'; known: {[n.run_name for n in PIPELINE]}")
    store = ArtifactStore(cfg.store, storage_options=cfg.store_options)
    kinds = _input_kinds(node)
    resolved = {slot: resolve_ref(ref, store) for slot, ref in (inputs or {}).items()}
    for slot, name in node.inputs.items():
        if slot not in resolved:
            if slot in node.optional and store.latest_version(kinds[slot], name) is None:
                continue                      # an optional input the store never had
            resolved[slot] = store.get(kinds[slot], name, "latest").uri
    resolved = {**extra_inputs(cfg, node, store), **resolved}
    return dict(stage=node.stage, run_name=run_name, config=cfg.stage_config(run_name).model_dump(mode="json"),
                inputs=resolved, store=store.root, store_options=cfg.store_options, output_names=node.outputs)


def _input_kinds(node: Node) -> dict[str, str]:
    from compass.dag.stages import stage_spec
    return stage_spec(node.stage).inputs
