"""Unknown or ill-formed artifact URIs are refused with one line that names them: through ``--from-artifact``
(the run planner, before any flow starts) and through the reference forms the ``compass artifacts``
commands take."""
from __future__ import annotations

import pyarrow as pa
import pytest

from compass.dag.run_plan import resolve_provided
from compass.runtime.artifact_ref import open_ref
from compass.store.layout import ArtifactError
from compass.store.store import ArtifactStore


@pytest.fixture
def store(tmp_path) -> ArtifactStore:
    st = ArtifactStore(str(tmp_path / "store"), cache_dir=tmp_path / "cache")
    n = 2
    w = st.begin("prompts", "raw_prompts", "v1", producer="p", stage="s", config_fingerprint="c", code_version="x")
    w.write_table(pa.table({"id": ["a", "b"], "domain": ["m"] * n, "task": ["t"] * n, "language": ["en"] * n,
                            "prompt": ["1+1?"] * n, "reference": ["2"] * n,
                            "verifier": ['{"type": "math_exact"}'] * n,
                            "difficulty": pa.array([None] * n, pa.int32()),
                            "pass_rate": pa.array([None] * n, pa.float64())}))
    w.commit()
    w = st.begin("report", "eval_report", "v1", producer="p", stage="s", config_fingerprint="c", code_version="x")
    w.path("report.md").write_text("# r\n")
    w.commit()
    return st


# (spec given to --from-artifact, words the error must hold); {root} is the store's root URI
CASES = {
    "wrong_kind": ("raw_prompts={root}/report/eval_report/v1", ["must be a prompts artifact", "is a report"]),
    "missing_version": ("{root}/prompts/raw_prompts", ["lacks the VERSION"]),
    "no_such_version": ("{root}/prompts/raw_prompts/v9", ["prompts/raw_prompts/v9", "no committed manifest"]),
    "no_such_store": ("/nonexistent/store/prompts/raw_prompts/v1", ["/nonexistent/store/prompts/raw_prompts/v1"]),
    "no_such_file_store": ("file:///nonexistent/prompts/raw_prompts/v1", ["file:///nonexistent/prompts"]),
    "garbage_scheme": ("gopher://host/store/prompts/raw_prompts/v1", ["gopher://host/store", "cannot open its store",
                                                                     "gopher"]),
    "unknown_kind": ("{root}/tables/raw_prompts/v1", ["KIND is one of"]),
    "garbage": ("::::", ["::::", "no such file or folder, and not KIND/NAME[/VERSION]"]),
    "empty_uri": ("raw_prompts=", ["empty artifact reference"]),
    "not_a_pipeline_name": ("nonsense={root}/prompts/raw_prompts/v1", ["'nonsense' is not an artifact of the "
                                                                       "pipeline"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_from_artifact_refuses_clearly(store, case):
    spec, words = CASES[case]
    spec = spec.format(root=store.root)
    with pytest.raises((ValueError, ArtifactError)) as e:
        resolve_provided([spec], store)
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


@pytest.mark.parametrize("ref,words", [
    ("{root}/prompts/raw_prompts/v9", ["v9", "no committed manifest"]),
    ("prompts/nothing", ["prompts/nothing"]),
    ("checkpoint/raw_prompts/v1", ["checkpoint/raw_prompts"]),
    ("gopher://host/store/prompts/raw_prompts/v1", ["gopher"]),
    ("", ["empty artifact reference"]),
])
def test_artifact_reference_refuses_clearly(store, ref, words):
    with pytest.raises((ValueError, ArtifactError)) as e:
        open_ref(ref.format(root=store.root), store)
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg
