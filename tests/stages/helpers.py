"""Hand-made artifacts for stage tests: committed through the real store, as a foreign producer would."""
from __future__ import annotations

import json
from typing import Callable

import pyarrow as pa

from stages.common.store import Artifact, ArtifactStore, ArtifactWriter

MATH_VERIFIER = json.dumps({"type": "math_exact"})
MCQ_VERIFIER = json.dumps({"type": "mcq"})
TEST_META = dict(producer="test", stage="test", config_fingerprint="x", code_version="x")


def commit_artifact(store: ArtifactStore, kind: str, name: str, fill: Callable[[ArtifactWriter], None],
                    version: str = "v1") -> Artifact:
    w = store.begin(kind, name, version, **TEST_META)
    fill(w)
    return w.commit()


def commit_table(store: ArtifactStore, kind: str, name: str, table: pa.Table) -> Artifact:
    return commit_artifact(store, kind, name, lambda w: w.write_table(table))


def commit_checkpoint(store: ArtifactStore, name: str, model, tok) -> Artifact:
    from stages.common.model_factory import save_checkpoint
    return commit_artifact(store, "checkpoint", name, lambda w: save_checkpoint(model, tok, w.dir))
