"""The stage contract: fingerprint, skip-if-stored, run, commit, clean up on failure.

The stage bodies here are tiny fakes on purpose: the runner is what is under test.
"""
from __future__ import annotations

import errno

import pytest
from pydantic import Field

from artifacts_schema import SchemaError
from compass.runtime import runner
from compass.config import ConfigError, StrictModel
from compass.runtime.runner import (InfraError, StageInputError, StageSpec, execute, is_infra_error,
                                  plan_version)
from compass.store.store import ArtifactCorrupt, ArtifactError, ArtifactNotFound, ArtifactStore
from tests.compass.store.test_store import prompts_table, version_entries


class FakeConfig(StrictModel):
    n: int = Field(3, ge=0)
    tag: str = "a"


class Calls:
    def __init__(self):
        self.n = 0


def make_spec(calls: Calls, fail_after_write: bool = False, name: str = "fake_stage") -> StageSpec:
    def body(config: FakeConfig, inputs, outputs):
        calls.n += 1
        offset = 0
        if "source" in inputs:
            offset = inputs["source"].read_table().num_rows
        outputs["table"].write_table(prompts_table(config.n, offset))
        outputs["table"].extra["tag"] = config.tag
        outputs["model"].path("weights.bin").write_bytes(config.tag.encode() * 10)
        if fail_after_write:
            raise RuntimeError("the stage body failed half-way")
    inputs = {"source": "prompts"} if name == "fake_consumer" else {}
    return StageSpec(name=name, config=FakeConfig, inputs=inputs, outputs={"table": "prompts", "model": "checkpoint"},
                     body=body)


@pytest.fixture
def code(monkeypatch):
    """The code version the runner sees (a fake stage has no package under stages/)."""
    state = {"v": "code-1"}
    monkeypatch.setattr(runner, "code_version", lambda *pkgs: state["v"])
    return state


def test_second_call_is_reused_without_running(any_store: ArtifactStore, code):
    calls = Calls()
    spec = make_spec(calls)
    first = execute(spec, FakeConfig(), {}, any_store)
    assert first.status == "ran" and calls.n == 1 and first.stage == "fake_stage"
    assert set(first.outputs) == {"table", "model"}
    table = any_store.open(first.outputs["table"])
    assert table.version == first.version and table.manifest.rows == 3
    assert table.manifest.producer == "fake_stage" and table.manifest.stage == "fake_stage"
    assert table.manifest.code_version == "code-1" and table.manifest.extra == {"tag": "a"}
    assert any_store.latest_version("checkpoint", "model") == first.version

    again = execute(spec, FakeConfig(), {}, any_store, run_name="fake_again")
    assert again.status == "reused" and calls.n == 1
    assert again.version == first.version and again.outputs == first.outputs
    assert again.to_dict()["run_name"] == "fake_again"
    assert len(any_store.list("prompts")) == 1


def test_changed_config_code_or_input_gives_a_new_version(any_store: ArtifactStore, code):
    calls = Calls()
    spec = make_spec(calls)
    v1 = execute(spec, FakeConfig(), {}, any_store).version
    v2 = execute(spec, FakeConfig(n=4), {}, any_store)
    assert v2.status == "ran" and v2.version != v1 and calls.n == 2
    assert any_store.get("prompts", "table").version == v2.version  # LATEST follows the newest run
    assert any_store.get("prompts", "table", v1).read_table().num_rows == 3  # the old version is still there
    code["v"] = "code-2"
    v3 = execute(spec, FakeConfig(n=4), {}, any_store)
    assert v3.status == "ran" and v3.version not in (v1, v2.version)

    # Inputs: the consumer's version follows its input's version.
    consumer = make_spec(calls, name="fake_consumer")
    src_a = any_store.get("prompts", "table", v1)
    src_b = any_store.get("prompts", "table", v2.version)
    out_a = execute(consumer, FakeConfig(), {"source": src_a}, any_store, output_names={"table": "t2", "model": "m2"})
    out_b = execute(consumer, FakeConfig(), {"source": src_b}, any_store, output_names={"table": "t2", "model": "m2"})
    assert out_a.version != out_b.version
    art = any_store.get("prompts", "t2", out_b.version)
    assert [(r.slot, r.uri) for r in art.manifest.inputs] == [("source", src_b.uri)]
    assert art.read_table().column("id")[0].as_py() == "p4"  # the body read its input
    assert any_store.lineage(art)["inputs"][0]["version"] == v2.version
    # Output names are part of the version too.
    out_c = execute(consumer, FakeConfig(), {"source": src_b}, any_store, output_names={"table": "t3"})
    assert out_c.version != out_b.version and out_c.outputs["model"].endswith(f"/checkpoint/model/{out_c.version}")


def test_version_is_deterministic_and_uses_real_code_version(local_store: ArtifactStore):
    # A spec named after a real stage package: the real code_version (its import closure) applies.
    spec = StageSpec(name="evaluation", config=FakeConfig, inputs={}, outputs={"table": "prompts"},
                     body=lambda c, i, o: o["table"].write_table(prompts_table(c.n)))
    names = {"table": "table"}
    assert plan_version(spec, FakeConfig(), {}, names) == plan_version(spec, FakeConfig(n=3, tag="a"), {}, names)
    assert plan_version(spec, FakeConfig(), {}, names) != plan_version(spec, FakeConfig(tag="b"), {}, names)
    res = execute(spec, FakeConfig(), {}, local_store)
    assert res.version == plan_version(spec, FakeConfig(), {}, names)
    assert local_store.open(res.outputs["table"]).manifest.code_version == runner.code_version("stages.evaluation")


def test_body_failure_commits_nothing_and_gc_cleans(any_store: ArtifactStore, code):
    calls = Calls()
    with pytest.raises(RuntimeError, match="half-way"):
        execute(make_spec(calls, fail_after_write=True), FakeConfig(), {}, any_store)
    assert calls.n == 1
    assert any_store.list() == []
    version = plan_version(make_spec(calls), FakeConfig(), {}, {"table": "table", "model": "model"})
    for kind, name in (("prompts", "table"), ("checkpoint", "model")):
        assert not any_store.exists(kind, name, version)
        assert any_store.latest_version(kind, name) is None
        with pytest.raises(ArtifactNotFound):
            any_store.get(kind, name, version)
    if any_store.is_local:  # the aborted payloads are gone; at most an empty version directory is left
        assert version_entries(any_store, "prompts", "table", version) == []
    any_store.gc(grace_s=0)
    assert not any_store.fs.exists(any_store._p("prompts", "table", version)) or \
        version_entries(any_store, "prompts", "table", version) == []
    # The same run succeeds afterwards, at the same version.
    ok = execute(make_spec(calls), FakeConfig(), {}, any_store)
    assert ok.status == "ran" and ok.version == version
    assert any_store.gc(grace_s=0) == []  # nothing left over to collect
    assert any_store.get("checkpoint", "model").local_dir().joinpath("weights.bin").read_bytes() == b"a" * 10


def test_failure_in_second_output_keeps_no_half_run(local_store: ArtifactStore, code):
    calls = Calls()
    spec = make_spec(calls)

    def bad_body(config, inputs, outputs):
        outputs["table"].write_table(prompts_table(2))
        outputs["model"].path("weights.bin").write_bytes(b"w")
        outputs["table"].write_table(prompts_table(2).drop_columns(["prompt"]))  # schema error
    bad = StageSpec(name=spec.name, config=FakeConfig, inputs={}, outputs=spec.outputs, body=bad_body)
    with pytest.raises(SchemaError, match="missing column 'prompt'"):
        execute(bad, FakeConfig(), {}, local_store)
    assert local_store.list() == []
    assert local_store.gc(grace_s=0, dry_run=True)  # the empty version directories
    local_store.gc(grace_s=0)
    assert local_store.gc(grace_s=0, dry_run=True) == []


def test_output_without_files_is_an_error(local_store: ArtifactStore, code):
    def forgets_the_model(config, inputs, outputs):
        outputs["table"].write_table(prompts_table(2))
    spec = StageSpec(name="fake_stage", config=FakeConfig, inputs={},
                     outputs={"table": "prompts", "model": "checkpoint"}, body=forgets_the_model)
    with pytest.raises(ArtifactError, match=r"output 'model' \(checkpoint model\) is empty"):
        execute(spec, FakeConfig(), {}, local_store)
    assert local_store.list() == []


def test_inputs_and_config_are_checked(local_store: ArtifactStore, code):
    calls = Calls()
    consumer = make_spec(calls, name="fake_consumer")
    with pytest.raises(StageInputError, match=r"missing input slot\(s\) \['source'\]"):
        execute(consumer, FakeConfig(), {}, local_store)
    produced = execute(make_spec(calls), FakeConfig(), {}, local_store)
    ckpt = local_store.open(produced.outputs["model"])
    with pytest.raises(StageInputError, match="input 'source' must be a prompts artifact, got checkpoint"):
        execute(consumer, FakeConfig(), {"source": ckpt}, local_store)
    with pytest.raises(StageInputError, match=r"unknown slot\(s\) \['other'\]"):
        execute(consumer, FakeConfig(), {"source": local_store.open(produced.outputs["table"]), "other": ckpt},
                local_store)

    class OtherConfig(StrictModel):
        n: int = 1
    with pytest.raises(TypeError, match="config must be FakeConfig, got OtherConfig"):
        execute(consumer, OtherConfig(), {}, local_store)
    assert calls.n == 1


def test_variadic_slot_takes_labelled_inputs_of_its_kind(local_store: ArtifactStore, code):
    """``source:LABEL`` fills a variadic ``source`` any number of times: each labelled input is checked for
    kind, counts in the version and is recorded in the lineage; an unlabelled stray slot is still unknown."""
    import dataclasses
    calls = Calls()
    consumer = dataclasses.replace(make_spec(calls, name="fake_consumer"), variadic_inputs=frozenset({"source"}))
    produced = execute(make_spec(calls), FakeConfig(), {}, local_store)
    table, ckpt = local_store.open(produced.outputs["table"]), local_store.open(produced.outputs["model"])
    one = execute(consumer, FakeConfig(), {"source": table}, local_store)
    two = execute(consumer, FakeConfig(), {"source": table, "source:extra": table}, local_store)
    assert one.version != two.version
    refs = {i.slot: i.uri for i in local_store.open(two.outputs["table"]).manifest.inputs}
    assert refs == {"source": table.uri, "source:extra": table.uri}
    with pytest.raises(StageInputError, match="input 'source:extra' must be a prompts artifact, got checkpoint"):
        execute(consumer, FakeConfig(), {"source": table, "source:extra": ckpt}, local_store)
    with pytest.raises(StageInputError, match=r"unknown slot\(s\) \['other:x'\].*source:LABEL"):
        execute(consumer, FakeConfig(), {"source": table, "other:x": table}, local_store)
    assert consumer.base_slot("source:") == "source:" and consumer.base_slot("source:a") == "source"


def _client_error(status: int, code: str = "Err"):
    from botocore.exceptions import ClientError
    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "GetObject")


def _wrapped(cause: BaseException) -> OSError:
    err = OSError(errno.EIO, "s3 said no")
    err.__cause__ = cause
    return err


def _infra_cases():
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError, ReadTimeoutError
    return [
        (InfraError("worker lost"), True),
        (ConnectionResetError("reset"), True),
        (TimeoutError("slow"), True),
        (OSError(errno.EIO, "I/O error"), True),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), True),
        (ReadTimeoutError(endpoint_url="http://127.0.0.1:9"), True),
        (_client_error(503, "SlowDown"), True),
        (_client_error(500), True),
        (_client_error(429), True),
        (_wrapped(_client_error(503)), True),
        (_client_error(403, "AccessDenied"), False),
        (_client_error(404, "NoSuchKey"), False),
        (_wrapped(_client_error(400, "InvalidBucketName")), False),
        (NoCredentialsError(), False),
        (FileNotFoundError("missing"), False),
        (PermissionError("denied"), False),
        (FileExistsError("exists"), False),
        (ValueError("bad value"), False),
        (SchemaError("bad column"), False),
        (ConfigError("bad key"), False),
        (ArtifactCorrupt("bad checksum"), False),
        (ArtifactNotFound("no such artifact"), False),
        (StageInputError("bad slot"), False),
        (RuntimeError("bug"), False),
        (KeyError("x"), False),
        (MemoryError(), False),
        (OSError("Can't load the configuration of '/ckpt'"), False),   # transformers on a bad checkpoint
        (OSError(errno.ENOSPC, "No space left on device"), False),
        (OSError(errno.EROFS, "Read-only file system"), False),
    ]


def test_is_infra_error_classification():
    wrong = [(repr(e), want) for e, want in _infra_cases() if is_infra_error(e) != want]
    assert wrong == []


def test_aiohttp_errors_are_classified():
    aiohttp = pytest.importorskip("aiohttp")
    assert is_infra_error(aiohttp.ServerDisconnectedError())
    assert is_infra_error(aiohttp.ClientPayloadError("truncated"))
    assert is_infra_error(aiohttp.ClientResponseError(None, (), status=502))
    assert not is_infra_error(aiohttp.ClientResponseError(None, (), status=404))


def test_saved_state_survives_a_failure_and_is_removed_after_the_commit(tmp_path, monkeypatch, code):
    """A stage's resumable state (compass.runtime.stage_state) is kept when the run fails and removed only
    once its outputs are committed: a kill anywhere before the commit keeps the progress."""
    from compass.runtime.stage_state import load_state, save_state, state_dir_for
    monkeypatch.setenv("COMPASS_STATE_DIR", str(tmp_path / "state"))
    store = ArtifactStore(str(tmp_path / "a"))
    runs = []

    def body(config, inputs, outputs):
        d = state_dir_for(outputs["model"])
        runs.append((d, load_state(d, "progress.pt")))
        save_state(d, "progress.pt", {"step": 7})
        outputs["model"].path("weights.bin").write_bytes(b"w")
        if len(runs) == 1:
            raise RuntimeError("killed after saving")
    spec = StageSpec(name="fake_stage", config=FakeConfig, inputs={}, outputs={"model": "checkpoint"}, body=body)
    with pytest.raises(RuntimeError):
        execute(spec, FakeConfig(), {}, store)
    state_dir = runs[0][0]
    assert runs[0][1] is None and (state_dir / "progress.pt").exists()
    assert execute(spec, FakeConfig(), {}, store).status == "ran"
    assert runs[1] == (state_dir, {"step": 7})                        # the same run found its saved state
    assert not state_dir.exists()                                      # and it is gone after the commit


def test_a_second_run_of_the_same_version_waits_and_reuses(tmp_path, monkeypatch, code, caplog):
    """Two pipeline runs of one config reach the same stage version at once: the second waits on the
    machine's run lock, then reuses what the first committed; the body runs once."""
    import threading
    monkeypatch.setenv("COMPASS_STATE_DIR", str(tmp_path / "state"))
    store = ArtifactStore(str(tmp_path / "a"))
    started, release, calls = threading.Event(), threading.Event(), Calls()

    def body(config, inputs, outputs):
        calls.n += 1
        started.set()
        assert release.wait(30)
        outputs["model"].path("weights.bin").write_bytes(b"w")
    spec = StageSpec(name="fake_stage", config=FakeConfig, inputs={}, outputs={"model": "checkpoint"}, body=body)
    results = {}
    first = threading.Thread(target=lambda: results.setdefault("first", execute(spec, FakeConfig(), {}, store)))
    second = threading.Thread(target=lambda: results.setdefault("second", execute(spec, FakeConfig(), {}, store)))
    with caplog.at_level("INFO", logger="compass"):
        first.start()
        assert started.wait(30)
        second.start()
        deadline = __import__("time").time() + 30
        while "waiting for it" not in caplog.text and __import__("time").time() < deadline:
            __import__("time").sleep(0.05)
        assert "waiting for it" in caplog.text and "second" not in results
        release.set()
        first.join(30)
        second.join(30)
    assert (results["first"].status, results["second"].status) == ("ran", "reused")
    assert results["first"].outputs == results["second"].outputs and calls.n == 1
