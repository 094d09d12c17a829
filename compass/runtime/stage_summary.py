"""Markdown summary of one finished stage run, for orchestrators to show (Prefect artifacts).

A stage describes its own results by writing ``summary.md`` into any of its
output artifacts; this module only gathers: a header (status, version, wall
time), one line per output (kind, name, rows), then each output's
``summary.md``. It reads committed artifacts only, so a summary never shows a
half-written run.
"""
from __future__ import annotations

import re

from compass.runtime.runner import StageResult
from compass.store.store import Artifact, ArtifactStore

SUMMARY_FILE = "summary.md"


def markdown_key(run_name: str) -> str:
    """A Prefect artifact key for a run (lowercase letters, digits and dashes only)."""
    return re.sub(r"[^a-z0-9-]+", "-", f"{run_name}-summary".lower()).strip("-")


def stage_summary(result: StageResult, store: ArtifactStore) -> str:
    lines = [f"# {result.run_name} (stage {result.stage})", "",
             f"{'Reused the stored' if result.status == 'reused' else 'Ran and committed'} version "
             f"`{result.version}` in {result.wall_s:.1f} s.", ""]
    sections = []
    if result.outputs:
        lines += ["| output | kind | artifact | rows |", "|---|---|---|---:|"]
        for slot, uri in result.outputs.items():
            art = Artifact.open_uri(uri, store)
            rows = art.manifest.rows
            lines.append(f"| {slot} | {art.kind} | `{uri}` | {'' if rows is None else rows} |")
            if any(f.path == SUMMARY_FILE for f in art.manifest.files):
                sections.append(art.read_bytes(SUMMARY_FILE).decode().strip())
    return "\n".join(lines + [""] + [s + "\n" for s in sections]).rstrip() + "\n"
