"""Import from an s3:// source into an S3 store (real SeaweedFS server, see conftest)."""
from __future__ import annotations

import json

import fsspec

from compass.store.store import ArtifactStore
from compass.ingest.config import ImportConfig
from compass.ingest.importer import import_table


def test_s3_source_into_s3_store(s3_store_root, tmp_path):
    opts = s3_store_root.storage_options
    root = s3_store_root.fresh_root("ingest")
    fs = fsspec.filesystem("s3", **opts)
    fs.pipe_file(f"{root}/src/set.jsonl".removeprefix("s3://"),
                 b'{"q": "1+1?", "a": "2"}\n{"q": "bad \xff", "a": "1"}\n{"q": "2+2?", "a": "4"}\n')
    store = ArtifactStore(f"{root}/store", storage_options=opts, cache_dir=tmp_path / "cache")
    cfg = ImportConfig.model_validate({
        "source": f"{root}/src/set.jsonl", "storage_options": {"endpoint_url": s3_store_root.endpoint}, "kind": "prompts", "id_template": "s-{index}",
        "columns": {"prompt": "q", "reference": "a"},
        "defaults": {"domain": "math", "task": "s3", "language": "en", "verifier": {"type": "math_exact"}}})
    res = import_table(cfg, store, "s3set")
    assert (res.rows_imported, res.reasons) == (2, {"invalid_utf8": 1})
    assert res.table_uri.startswith(f"{root}/store/prompts/s3set/")
    assert res.source["files"] == [f"{root}/src/set.jsonl"] and "key" not in json.dumps(res.source)
    assert [r["prompt"] for r in store.open(res.table_uri).read_table().to_pylist()] == ["1+1?", "2+2?"]
    assert import_table(cfg, store, "s3set").status == "reused"
