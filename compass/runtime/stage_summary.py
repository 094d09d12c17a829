"""Markdown summary of one finished stage run, for orchestrators to show (Prefect artifacts).

A stage describes its own results by writing ``summary.md`` into any of its
output artifacts; this module only gathers: a header (status, version, wall
time), one line per output (kind, name, rows), then each output's
``summary.md``. It reads committed artifacts only, so a summary never shows a
half-written run.

An image a ``summary.md`` links by a relative path to a PNG of the same artifact
(``![curve](plots/reward.png)``) is inlined as a ``data:`` URI, so the Prefect UI
shows it whatever the store (a local path or an ``s3://`` key is no URL a browser
can fetch); one over ``MAX_INLINE_BYTES`` keeps its link and says where it is.
"""
from __future__ import annotations

import base64
import re

from compass.runtime.runner import StageResult
from compass.store.store import Artifact, ArtifactStore

SUMMARY_FILE = "summary.md"
MAX_INLINE_BYTES = 512 * 1024
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s:]+\.png)\)")      # relative links only: no scheme


def inline_images(md: str, art: Artifact) -> str:
    """``md`` with each linked PNG of ``art`` inlined as a base64 ``data:`` URI (see the module doc)."""
    files = {f.path: f.size for f in art.manifest.files}

    def sub(m: re.Match) -> str:
        alt, path = m.group(1), m.group(2)
        if path not in files:
            return m.group(0)
        if files[path] > MAX_INLINE_BYTES:
            return f"{m.group(0)} ({path} in `{art.uri}`, {files[path] / 1024:.0f} KiB: too large to inline)"
        data = base64.b64encode(art.read_bytes(path)).decode()
        return f"![{alt}](data:image/png;base64,{data})"
    return _IMAGE.sub(sub, md)


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
                sections.append(inline_images(art.read_bytes(SUMMARY_FILE).decode().strip(), art))
    return "\n".join(lines + [""] + [s + "\n" for s in sections]).rstrip() + "\n"
