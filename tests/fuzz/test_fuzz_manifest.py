"""The manifest loader over fuzzed manifest.json bytes: a manifest either loads and its artifact reads (or
is refused) through the store's own errors, one line naming the artifact; never a KeyError or TypeError."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, strategies as st

from artifacts_schema import SchemaError
from compass.store.artifact import Artifact
from compass.store.layout import ArtifactError
from compass.store.store import ArtifactStore
from tests.fuzz.test_fuzz_reader import json_values

GOOD_ROWS = pa.table({"source": ["s"], "row_index": [0], "field": ["f"], "reason": ["r"], "row_json": ["{}"]})


def _store_with_one_artifact(d: Path) -> tuple[ArtifactStore, Artifact, dict]:
    store = ArtifactStore(str(d / "store"), cache_dir=d / "cache")
    w = store.begin("quarantine", "q", "v1", producer="p", stage="s", config_fingerprint="c", code_version="x")
    w.write_table(GOOD_ROWS)
    art = w.commit()
    return store, art, json.loads((Path(store.root_path) / "quarantine/q/v1/manifest.json").read_text())


def _load_and_read(store: ArtifactStore, manifest_bytes: bytes) -> None:
    (Path(store.root_path) / "quarantine/q/v1/manifest.json").write_bytes(manifest_bytes)
    uri = store.uri("quarantine", "q", "v1")
    for attempt in (lambda: store.get("quarantine", "q", "v1"), lambda: Artifact.open_uri(uri, store),
                    lambda: store.list()):
        try:
            got = attempt()
        except ArtifactError as e:
            assert uri in str(e) and "\n" not in str(e), repr(e)
            continue
        arts = [Artifact(store, m) for m in got] if isinstance(got, list) else [got]
        for art in arts:
            assert (art.kind, art.name, art.version) == ("quarantine", "q", "v1")
            for read in (art.read_table, art.local_dir, lambda: art.read_bytes("data.parquet")):
                try:
                    read()
                except (ArtifactError, SchemaError) as e:
                    assert "\n" not in str(e), repr(e)


def _mutations(good: dict):
    keys = sorted(good) + ["files.0.path", "files.0.size", "files.0.sha256", "surprise"]
    return st.tuples(st.sampled_from(keys), json_values | st.sampled_from(
        ["", ".", "..", "../..", "/etc", "data.parquet", "manifest.json", "../q", "a/../../b", "prompts", "x" * 300]),
        st.booleans())


@given(raw=st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_garbage_manifest_is_one_clear_error(raw):
    with tempfile.TemporaryDirectory() as d:
        store, _, _ = _store_with_one_artifact(Path(d))
        _load_and_read(store, raw)


@given(data=st.data())
def test_mutated_manifest_loads_or_is_refused(data):
    with tempfile.TemporaryDirectory() as d:
        store, _, good = _store_with_one_artifact(Path(d))
        doc = json.loads(json.dumps(good))
        for key, value, delete in data.draw(st.lists(_mutations(good), min_size=1, max_size=3)):
            parts = key.split(".")
            target = doc
            try:
                for p in parts[:-1]:
                    target = target[int(p)] if isinstance(target, list) else target[p]
                last = int(parts[-1]) if isinstance(target, list) else parts[-1]
                if delete and not isinstance(target, list):
                    target.pop(last, None)
                else:
                    target[last] = value
            except (KeyError, IndexError, TypeError, ValueError):
                pass  # an earlier mutation removed the path
        _load_and_read(store, json.dumps(doc).encode())


def test_a_payload_dir_naming_the_manifest_is_refused():
    """Found by the fuzzer above (issue 30's runs): payload_dir "manifest.json" made reads open
    ``…/manifest.json/data.parquet`` and fail with NotADirectoryError."""
    with tempfile.TemporaryDirectory() as d:
        store, _, good = _store_with_one_artifact(Path(d))
        _load_and_read(store, json.dumps({**good, "payload_dir": "manifest.json"}).encode())
        with pytest.raises(ArtifactError, match="payload_dir 'manifest.json' is not a folder name"):
            store.get("quarantine", "q", "v1")
