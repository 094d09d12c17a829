"""The versioned artifact store, on the local disk and on a real S3 server (``any_store``)."""
from __future__ import annotations

import io
import json
import multiprocessing as mp
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from artifacts_schema import MANIFEST_FILE, Manifest, SchemaError
from compass.store.fingerprint import sha256_file
from compass.store.store import (TABLE_FILE, Artifact, ArtifactCorrupt, ArtifactError, ArtifactNotFound,
                                 ArtifactStore)

META = dict(producer="test_run", stage="test", config_fingerprint="cfg", code_version="code")


def prompts_table(n: int = 5, offset: int = 0) -> pa.Table:
    ids = [f"p{offset + i}" for i in range(n)]
    return pa.table({
        "id": ids, "domain": ["math"] * n, "task": ["add"] * n, "language": ["en"] * n,
        "prompt": [f"{i}+1=?" for i in range(n)], "reference": [str(i + 1) for i in range(n)],
        "verifier": ['{"type": "math_exact"}'] * n,
        "difficulty": pa.array([1 + i % 5 for i in range(n)], pa.int64()),  # cast to int32 on write
        "pass_rate": pa.array([None] * n, pa.float64()),
    })


def write_prompts(store: ArtifactStore, name: str = "prompts", version: str = "v1", n: int = 5,
                  inputs=(), latest: bool = True) -> Artifact:
    w = store.begin("prompts", name, version, inputs=list(inputs), **META)
    w.write_table(prompts_table(n))
    art = w.commit()
    if latest:
        store.set_latest("prompts", name, version)
    return art


def write_checkpoint(store: ArtifactStore, name: str, version: str, inputs=(), latest: bool = True) -> Artifact:
    w = store.begin("checkpoint", name, version, inputs=list(inputs), **META)
    w.path("config.json").write_text(json.dumps({"model_type": "tiny", "name": name}))
    w.path("model.safetensors").write_bytes(bytes(range(256)) * 64)
    w.path("trainer_state/rng.bin").write_bytes(b"\x01\x02\x03")
    w.extra["loss"] = 1.25
    art = w.commit()
    if latest:
        store.set_latest("checkpoint", name, version)
    return art


def reopen(store: ArtifactStore, tmp_path: Path, tag: str = "re") -> ArtifactStore:
    """The same root through a new store object: no verification cache, an empty download cache."""
    return ArtifactStore(store.root, storage_options=store.storage_options, cache_dir=tmp_path / f"cache-{tag}")


def payload(art: Artifact, rel: str) -> str:
    return art._remote(rel)


def put_bytes(store: ArtifactStore, path: str, data: bytes) -> None:
    """Write an object behind the store's back (tampering, crashed writers)."""
    if store.is_local:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    store.fs.pipe_file(path, data)


def manifest_path(store: ArtifactStore, kind: str, name: str, version: str) -> str:
    return store._p(kind, name, version, MANIFEST_FILE)


def version_entries(store: ArtifactStore, kind: str, name: str, version: str) -> list[str]:
    """What a version directory holds (on S3: the names that have objects under them)."""
    store.fs.invalidate_cache()
    return store._entries(store._p(kind, name, version))


# -- write, commit, read -----------------------------------------------------------

def test_write_commit_read_table(any_store: ArtifactStore):
    art = write_prompts(any_store, n=7)
    assert art.uri == f"{any_store.root}/prompts/prompts/v1"
    m = art.manifest
    assert (m.kind, m.name, m.version, m.rows, m.table_schema) == ("prompts", "prompts", "v1", 7, "prompts/v1")
    assert [f.path for f in m.files] == [TABLE_FILE] and m.files[0].size > 0
    assert any_store.exists("prompts", "prompts", "v1")

    got = any_store.get("prompts", "prompts", "v1").read_table()
    assert got.num_rows == 7
    assert got.column("id").to_pylist() == [f"p{i}" for i in range(7)]
    assert got.schema.field("difficulty").type == pa.int32()  # the contract's type, not the writer's int64
    assert [x.version for x in any_store.list()] == ["v1"]
    assert any_store.open(art.uri).manifest == m
    assert Artifact.open_uri(art.uri, any_store).version == "v1"


def test_version_without_manifest_is_invisible(any_store: ArtifactStore):
    art = write_prompts(any_store, version="v1")
    # A second version whose payload is complete but whose manifest was never written (a crash).
    data = any_store.fs.cat_file(payload(art, TABLE_FILE))
    put_bytes(any_store, any_store._p("prompts", "prompts", "v2", "data-1-deadbeef", TABLE_FILE), data)
    assert version_entries(any_store, "prompts", "prompts", "v2") == ["data-1-deadbeef"]

    assert [m.version for m in any_store.list()] == ["v1"]
    assert [m.version for m in any_store.list("prompts", "prompts")] == ["v1"]
    assert not any_store.exists("prompts", "prompts", "v2")
    with pytest.raises(ArtifactNotFound, match="v2: no committed manifest"):
        any_store.get("prompts", "prompts", "v2")


def test_uncommitted_writer_is_invisible_and_abort_cleans(any_store: ArtifactStore):
    w = any_store.begin("prompts", "p", "v1", **META)
    w.write_table(prompts_table())
    assert any_store.list() == [] and not any_store.exists("prompts", "p", "v1")
    with pytest.raises(ArtifactNotFound):
        any_store.get("prompts", "p", "v1")
    w.abort()
    assert not w.dir.exists()
    assert any_store.list() == []


def test_latest_alias(any_store: ArtifactStore):
    with pytest.raises(ArtifactNotFound, match="no 'latest' version"):
        any_store.get("prompts", "prompts")
    write_prompts(any_store, version="v1", n=2)
    assert any_store.get("prompts", "prompts").version == "v1"
    write_prompts(any_store, version="v2", n=3)
    assert any_store.latest_version("prompts", "prompts") == "v2"
    assert any_store.get("prompts", "prompts", "latest").read_table().num_rows == 3
    any_store.set_latest("prompts", "prompts", "v1")  # move it back: the alias is just a pointer
    assert any_store.get("prompts", "prompts").version == "v1"
    assert sorted(m.version for m in any_store.list("prompts")) == ["v1", "v2"]


def test_lineage_through_inputs(any_store: ArtifactStore):
    data = write_prompts(any_store, name="rl_prompts")
    base = write_checkpoint(any_store, "base_ckpt", "b1")
    sft = write_checkpoint(any_store, "thinking_ckpt", "t1", inputs=[base.ref("base"), data.ref("data")])
    final = write_checkpoint(any_store, "ckpt_final", "f1", inputs=[sft.ref("policy"), data.ref("prompts")])

    tree = any_store.lineage(any_store.get("checkpoint", "ckpt_final"))
    assert tree["uri"] == final.uri and tree["producer"] == "test_run"
    assert [(n["slot"], n["name"]) for n in tree["inputs"]] == [("policy", "thinking_ckpt"), ("prompts", "rl_prompts")]
    policy = tree["inputs"][0]
    assert [(n["slot"], n["version"]) for n in policy["inputs"]] == [("base", "b1"), ("data", "v1")]
    assert final.manifest.inputs[0].uri == sft.uri

    # An input that disappeared is reported, not fatal.
    any_store.fs.rm(any_store._p("checkpoint", "base_ckpt"), recursive=True)
    tree = any_store.lineage(final)
    base_node = tree["inputs"][0]["inputs"][0]
    assert base_node["slot"] == "base" and "no committed manifest" in base_node["missing"]


# -- corruption and schema ------------------------------------------------------------

@pytest.mark.parametrize("same_size", [True, False], ids=["same-size", "other-size"])
def test_checksum_mismatch_names_artifact_and_file(any_store: ArtifactStore, tmp_path: Path, same_size: bool):
    art = write_prompts(any_store)
    path = payload(art, TABLE_FILE)
    good = any_store.fs.cat_file(path)
    bad = bytearray(good)
    if same_size:
        bad[len(bad) // 2] ^= 0xFF
    else:
        bad += b"garbage"
    put_bytes(any_store, path, bytes(bad))

    fresh = reopen(any_store, tmp_path)
    with pytest.raises(ArtifactCorrupt) as ei:
        fresh.get("prompts", "prompts").read_table()
    msg = str(ei.value)
    assert art.uri in msg and f"'{TABLE_FILE}'" in msg and "checksum mismatch" in msg
    assert "\n" not in msg
    with pytest.raises(ArtifactCorrupt, match="checksum mismatch"):
        reopen(any_store, tmp_path, "2").get("prompts", "prompts").local_dir()
    with pytest.raises(ArtifactCorrupt, match="checksum mismatch"):
        fresh.get("prompts", "prompts").read_bytes(TABLE_FILE)


def test_missing_payload_file(any_store: ArtifactStore, tmp_path: Path):
    art = write_checkpoint(any_store, "c", "v1")
    any_store.fs.rm(payload(art, "config.json"))
    fresh = reopen(any_store, tmp_path)
    with pytest.raises(ArtifactCorrupt, match=r"'config.json'"):
        fresh.get("checkpoint", "c").local_dir()
    with pytest.raises(ArtifactCorrupt, match="listed in manifest is missing"):
        fresh.get("checkpoint", "c").read_bytes("config.json")


def test_schema_error_on_write(any_store: ArtifactStore):
    w = any_store.begin("prompts", "bad", "v1", **META)
    with pytest.raises(SchemaError) as ei:
        w.write_table(prompts_table().drop_columns(["verifier"]))
    assert w.uri in str(ei.value) and "missing column 'verifier'" in str(ei.value)
    wrong = prompts_table().set_column(5, "reference", pa.array(range(5), pa.int64()))
    with pytest.raises(SchemaError) as ei:
        w.write_table(wrong)
    msg = str(ei.value)
    assert w.uri in msg and "'reference'" in msg and "int64" in msg and "\n" not in msg
    nulls = prompts_table().set_column(0, "id", pa.array([None, "a", "b", "c", "d"], pa.string()))
    with pytest.raises(SchemaError, match="'id' has 1 null value"):
        w.write_table(nulls)
    with pytest.raises(ArtifactError, match="committed without a table"):
        w.commit()
    w.abort()
    assert any_store.list() == []


@pytest.mark.parametrize("damage", ["missing-column", "wrong-type"])
def test_schema_error_on_read(any_store: ArtifactStore, tmp_path: Path, damage: str):
    """A Parquet file that drifted from its schema, with a manifest that matches it: only the schema check catches it."""
    art = write_prompts(any_store)
    tbl = art.read_table()
    if damage == "missing-column":
        tbl, column = tbl.drop_columns(["task"]), "task"
    else:
        tbl, column = tbl.set_column(tbl.schema.get_field_index("prompt"), "prompt",
                                     pa.array([1.5] * tbl.num_rows)), "prompt"
    buf = io.BytesIO()
    pq.write_table(tbl, buf)
    data = buf.getvalue()
    put_bytes(any_store, payload(art, TABLE_FILE), data)
    import hashlib
    m = art.manifest.model_copy(deep=True)
    m.files[0].size, m.files[0].sha256 = len(data), hashlib.sha256(data).hexdigest()
    put_bytes(any_store, manifest_path(any_store, "prompts", "prompts", "v1"), m.model_dump_json().encode())

    fresh = reopen(any_store, tmp_path)
    fresh.get("prompts", "prompts").local_dir()  # checksums agree now
    with pytest.raises(SchemaError) as ei:
        fresh.get("prompts", "prompts").read_table()
    msg = str(ei.value)
    assert art.uri in msg and f"'{column}'" in msg and "\n" not in msg
    with pytest.raises(SchemaError, match=column):
        list(fresh.get("prompts", "prompts").iter_batches())


def test_unreadable_manifest_is_corrupt(any_store: ArtifactStore):
    write_prompts(any_store)
    put_bytes(any_store, manifest_path(any_store, "prompts", "prompts", "v1"), b"{not json")
    with pytest.raises(ArtifactCorrupt, match="prompts/prompts/v1: unreadable manifest"):
        any_store.get("prompts", "prompts", "v1")


# -- checkpoints -------------------------------------------------------------------------

def test_checkpoint_round_trip_through_local_dir(any_store: ArtifactStore, tmp_path: Path):
    art = write_checkpoint(any_store, "thinking_ckpt", "v1")
    assert art.manifest.rows is None and art.manifest.table_schema is None
    assert art.manifest.extra == {"loss": 1.25}
    assert sorted(f.path for f in art.manifest.files) == ["config.json", "model.safetensors",
                                                          "trainer_state/rng.bin"]
    fresh = reopen(any_store, tmp_path)
    d = fresh.get("checkpoint", "thinking_ckpt").local_dir()
    assert json.loads((d / "config.json").read_text())["name"] == "thinking_ckpt"
    assert (d / "model.safetensors").read_bytes() == bytes(range(256)) * 64
    assert (d / "trainer_state" / "rng.bin").read_bytes() == b"\x01\x02\x03"
    for f in art.manifest.files:
        assert sha256_file(d / f.path) == f.sha256
    if any_store.is_local:
        assert d == Path(payload(art, ""))  # read in place, no copy
    else:
        assert d.is_relative_to(tmp_path / "cache-re") and (d / ".verified").exists()
        mtime = (d / "model.safetensors").stat().st_mtime_ns
        assert fresh.get("checkpoint", "thinking_ckpt").local_dir() == d  # cached: not downloaded again
        assert (d / "model.safetensors").stat().st_mtime_ns == mtime
    assert fresh.get("checkpoint", "thinking_ckpt").local_path("config.json") == d / "config.json"


# -- tables: streaming, empty, row counts -----------------------------------------------------

def test_table_writer_streams_batches(any_store: ArtifactStore, tmp_path: Path):
    w = any_store.begin("prompts", "big", "v1", **META)
    with w.table_writer() as write:
        write(prompts_table(4, 0))
        write(prompts_table(3, 4).to_batches()[0])  # a RecordBatch works too
        write(prompts_table(5, 7))
    assert w.rows == 12
    art = w.commit()
    assert art.manifest.rows == 12
    fresh = reopen(any_store, tmp_path)
    tbl = fresh.get("prompts", "big", "v1").read_table()
    assert tbl.column("id").to_pylist() == [f"p{i}" for i in range(12)]
    assert pq.ParquetFile(fresh.get("prompts", "big", "v1").local_path(TABLE_FILE)).num_row_groups == 3
    batches = list(fresh.get("prompts", "big", "v1").iter_batches(batch_size=5))
    assert sum(b.num_rows for b in batches) == 12
    assert all(b.schema.field("difficulty").type == pa.int32() for b in batches)


def test_table_writer_rejects_bad_batch(any_store: ArtifactStore):
    w = any_store.begin("prompts", "big", "v1", **META)
    with pytest.raises(SchemaError, match="missing column 'prompt'"):
        with w.table_writer() as write:
            write(prompts_table(2))
            write(prompts_table(2).drop_columns(["prompt"]))
    w.abort()
    assert any_store.list() == []


def test_empty_table(any_store: ArtifactStore, tmp_path: Path):
    w = any_store.begin("prompts", "empty", "v1", **META)
    with w.table_writer():
        pass
    art = w.commit()
    assert art.manifest.rows == 0
    tbl = reopen(any_store, tmp_path).get("prompts", "empty", "v1").read_table()
    assert tbl.num_rows == 0 and "verifier" in tbl.column_names
    assert list(reopen(any_store, tmp_path, "2").get("prompts", "empty", "v1").iter_batches()) == []


def test_rewriting_a_table_replaces_its_row_count(local_store: ArtifactStore):
    w = local_store.begin("prompts", "p", "v1", **META)
    w.write_table(prompts_table(5))
    w.write_table(prompts_table(3))  # same file, written again
    assert w.commit().manifest.rows == 3
    assert local_store.get("prompts", "p", "v1").read_table().num_rows == 3


# -- gc --------------------------------------------------------------------------------------

def _crashed_version(store: ArtifactStore, art: Artifact, version: str, attempt: str = "data-1-0badf00d") -> str:
    """A version directory with a complete payload and no manifest, as a crashed writer leaves it."""
    put_bytes(store, store._p(art.kind, art.name, version, attempt, TABLE_FILE),
              store.fs.cat_file(payload(art, TABLE_FILE)))
    return store._p(art.kind, art.name, version)


def _backdate(path: str, seconds: float = 7200) -> None:
    t = time.time() - seconds
    for dirpath, _, files in os.walk(path):
        for f in files:
            os.utime(os.path.join(dirpath, f), (t, t))
        os.utime(dirpath, (t, t))


def test_gc_spares_a_payload_that_is_still_being_written(local_store: ArtifactStore):
    """An attempt named long ago (a stage running for hours) is young while its files are fresh."""
    w = local_store.begin("prompts", "prompts", "v9", **META)
    old = w.dir.with_name("data-1-0ldwr1te")
    w.dir.rename(old)
    w.dir, w.attempt = old, old.name
    w.write_table(prompts_table(2))            # it is still writing
    assert local_store.gc(grace_s=60) == []
    assert w.commit().read_table().num_rows == 2


def test_commit_refuses_a_payload_that_gc_removed(local_store: ArtifactStore):
    w = local_store.begin("prompts", "prompts", "v8", **META)
    w.write_table(prompts_table(2))
    _backdate(str(w.dir))
    w.dir.rename(w.dir.with_name("data-1-0ldwr1te"))  # looks abandoned to gc
    w.dir = w.dir.with_name("data-1-0ldwr1te")
    assert [r["reason"] for r in local_store.gc(grace_s=60)] == ["never committed"]
    w.path("late.json").write_text("{}")         # the writer goes on, unaware
    with pytest.raises(ArtifactError, match="removed while the stage was writing"):
        w.commit()
    assert not local_store.exists("prompts", "prompts", "v8")


def test_gc_removes_uncommitted_and_losing_payloads_only(any_store: ArtifactStore, tmp_path: Path):
    art = write_prompts(any_store, version="v1")
    _crashed_version(any_store, art, "v2")
    # The payload of an attempt that lost the commit race for v1.
    loser = any_store._p("prompts", "prompts", "v1", "data-2-0000beef", TABLE_FILE)
    put_bytes(any_store, loser, b"half a parquet file")
    young = any_store.begin("prompts", "prompts", "v3", **META)  # a writer still busy right now
    young.write_table(prompts_table(1))
    if not any_store.is_local:  # remote writers stage locally: put its payload where a crash mid-upload leaves it
        put_bytes(any_store, any_store._p("prompts", "prompts", "v3", young.attempt, TABLE_FILE), b"x")

    if any_store.is_local:  # crashed writers stopped writing long ago: nothing under them is recent
        for d in ("v2/data-1-0badf00d", "v1/data-2-0000beef"):
            _backdate(any_store._p("prompts", "prompts", d))

    planned = any_store.gc(grace_s=120, dry_run=True)
    assert version_entries(any_store, "prompts", "prompts", "v2") == ["data-1-0badf00d"]  # a dry run removes nothing
    removed = any_store.gc(grace_s=120)
    assert removed == planned
    reasons = {r["path"].split("prompts/prompts/")[-1]: r["reason"] for r in removed}
    assert reasons == {"v2": "never committed", "v1/data-2-0000beef": "payload of an attempt that did not commit"}
    assert version_entries(any_store, "prompts", "prompts", "v1") == sorted([MANIFEST_FILE, art.manifest.payload_dir])
    assert young.attempt in version_entries(any_store, "prompts", "prompts", "v3")  # too young to touch
    assert reopen(any_store, tmp_path).get("prompts", "prompts", "v1").read_table().num_rows == 5

    removed = any_store.gc(grace_s=0)
    assert [(r["path"].split("prompts/prompts/")[-1], r["reason"]) for r in removed] == [("v3", "never committed")]
    assert [m.version for m in any_store.list()] == ["v1"]
    assert reopen(any_store, tmp_path, "2").get("prompts", "prompts", "v1").read_table().num_rows == 5
    young.abort()


def test_gc_prune_keeps_everything_reachable_from_latest(any_store: ArtifactStore, tmp_path: Path):
    data_old = write_prompts(any_store, name="rl_prompts", version="d0")
    data = write_prompts(any_store, name="rl_prompts", version="d1")  # LATEST -> d1
    base = write_checkpoint(any_store, "base_ckpt", "b1", latest=False)  # no alias, but an input of ckpt
    write_checkpoint(any_store, "ckpt", "c0", inputs=[base.ref("base"), data_old.ref("data")])
    write_checkpoint(any_store, "ckpt", "c1", inputs=[base.ref("base"), data.ref("data")])
    orphan = write_checkpoint(any_store, "scratch", "s1", latest=False)

    assert any_store.gc(prune=True) == []  # all committed a moment ago: inside the grace period
    removed = any_store.gc(prune=True, grace_s=0)
    assert all(r["reason"] == "not reachable from any LATEST alias" for r in removed)
    kept = {(m.name, m.version) for m in reopen(any_store, tmp_path).list()}
    # d0 is reachable only from c0, which is not reachable itself: both go.
    assert kept == {("rl_prompts", "d1"), ("base_ckpt", "b1"), ("ckpt", "c1")}
    assert not any_store.exists("checkpoint", "scratch", orphan.version)
    fresh = reopen(any_store, tmp_path, "2")
    assert fresh.lineage(fresh.get("checkpoint", "ckpt"))["inputs"][0]["uri"] == base.uri
    fresh.get("checkpoint", "ckpt").local_dir()
    assert fresh.get("prompts", "rl_prompts").version == "d1"


# -- concurrency -------------------------------------------------------------------------------

def _race_writer(root: str, options: dict, cache: str, barrier, marker: str, out) -> None:
    store = ArtifactStore(root, storage_options=options, cache_dir=cache)
    w = store.begin("prompts", "race", "v1", **META)
    tbl = prompts_table(6)
    tbl = tbl.append_column("writer", pa.array([marker] * tbl.num_rows))  # extra columns are kept
    w.write_table(tbl)
    w.path("notes.txt").write_text(marker * 1000)
    barrier.wait(timeout=60)
    art = w.commit()
    out.put((marker, art.manifest.payload_dir, art.read_table().column("writer")[0].as_py()))


def _check_race(store: ArtifactStore, results: list, tmp_path: Path) -> None:
    assert sorted(r[0] for r in results) == ["A", "B"]
    payloads = {r[1] for r in results}
    winners = {r[2] for r in results}
    assert len(payloads) == 1 and len(winners) == 1  # both writers got the same, committed artifact
    entries = version_entries(store, "prompts", "race", "v1")
    assert entries.count(MANIFEST_FILE) == 1 and not any("tmp" in e for e in entries)
    assert [e for e in entries if e.startswith("data-")] == [payloads.pop()]  # the loser cleaned up after itself
    fresh = reopen(store, tmp_path, "verify")
    art = fresh.get("prompts", "race", "v1")
    d = art.local_dir()
    for f in art.manifest.files:
        assert sha256_file(d / f.path) == f.sha256
    assert (d / "notes.txt").read_text() == winners.pop() * 1000
    assert art.read_table().num_rows == 6


def test_two_processes_commit_one_version(local_store: ArtifactStore, tmp_path: Path):
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_race_writer, args=(local_store.root, {}, str(tmp_path / f"c{m}"), barrier, m, out))
             for m in "AB"]
    for p in procs:
        p.start()
    try:
        results = [out.get(timeout=120) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
    assert all(p.exitcode == 0 for p in procs)
    _check_race(local_store, results, tmp_path)


def test_two_threads_commit_one_version(any_store: ArtifactStore, tmp_path: Path):
    import queue
    barrier, out, errors = threading.Barrier(2), queue.Queue(), []

    def run(marker):
        try:
            _race_writer(any_store.root, any_store.storage_options, str(tmp_path / f"c{marker}"), barrier, marker, out)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            barrier.abort()
    threads = [threading.Thread(target=run, args=(m,)) for m in "AB"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    _check_race(any_store, [out.get_nowait() for _ in threads], tmp_path)


def test_late_writer_gets_the_committed_artifact(any_store: ArtifactStore):
    first = any_store.begin("prompts", "p", "v1", **META)
    second = any_store.begin("prompts", "p", "v1", **META)
    first.write_table(prompts_table(2))
    second.write_table(prompts_table(4))
    a = first.commit()
    b = second.commit()
    assert b.manifest == a.manifest and b.read_table().num_rows == 2
    assert [e for e in version_entries(any_store, "prompts", "p", "v1") if e.startswith("data-")] == \
        [a.manifest.payload_dir]


def test_manifest_lists_exactly_the_payload(local_store: ArtifactStore):
    art = write_checkpoint(local_store, "c", "v1")
    on_disk = sorted(str(p.relative_to(Path(payload(art, "")))) for p in Path(payload(art, "")).rglob("*")
                     if p.is_file())
    assert on_disk == sorted(f.path for f in art.manifest.files)
    raw = json.loads(Path(manifest_path(local_store, "checkpoint", "c", "v1")).read_text())
    assert Manifest.model_validate(raw).payload_dir == art.manifest.payload_dir


def test_commit_twice_and_abort_after_commit_keep_the_artifact(any_store: ArtifactStore, tmp_path: Path):
    w = any_store.begin("prompts", "p", "v1", **META)
    w.write_table(prompts_table(3))
    art = w.commit()
    assert w.commit() is art  # e.g. a stage body committed, then the runner does
    w.abort()  # the runner's clean-up after a later failure must not touch a committed payload
    assert reopen(any_store, tmp_path).get("prompts", "p", "v1").read_table().num_rows == 3


def test_conform_edge_cases():
    from artifacts_schema import conform
    t = prompts_table(3)
    cat = t.set_column(1, "domain", t.column("domain").dictionary_encode())  # a pandas categorical
    assert conform(cat, "prompts", "x").schema.field("domain").type == pa.string()
    big = t.set_column(4, "prompt", t.column("prompt").cast(pa.large_string()))
    assert conform(big, "prompts", "x").schema.field("prompt").type == pa.string()
    extra = t.append_column("note", pa.array(["n"] * 3))
    assert conform(extra, "prompts", "x").column("note").to_pylist() == ["n"] * 3  # extra columns are kept
    ints_as_floats = t.set_column(8, "pass_rate", pa.array([1, 0, 1], pa.int64()))
    assert conform(ints_as_floats, "prompts", "x").column("pass_rate").to_pylist() == [1.0, 0.0, 1.0]
    with pytest.raises(SchemaError, match="x: column 'difficulty' has type double"):
        conform(t.set_column(7, "difficulty", pa.array([1.5] * 3)), "prompts", "x")
    with pytest.raises(SchemaError, match="x: column 'difficulty' cannot be read as int32"):
        conform(t.set_column(7, "difficulty", pa.array([2 ** 40] * 3)), "prompts", "x")
    with pytest.raises(SchemaError, match="x: column 'id' appears 2 times"):
        conform(t.append_column("id", pa.array(["a"] * 3)), "prompts", "x")
    with pytest.raises(SchemaError, match="unknown table kind 'nope'"):
        conform(t, "nope", "x")


def test_gc_removes_an_unfinished_alias_update(local_store: ArtifactStore):
    write_prompts(local_store, version="v1")
    stale = Path(local_store._p("prompts", "prompts", "LATEST.tmp-0dead000"))
    stale.write_text("v0\n")  # a writer killed between writing the new alias and renaming it
    long_ago = time.time() - 7200
    os.utime(stale, (long_ago, long_ago))
    assert [r["reason"] for r in local_store.gc(grace_s=60)] == ["alias update that did not finish"]
    assert not stale.exists() and local_store.latest_version("prompts", "prompts") == "v1"
