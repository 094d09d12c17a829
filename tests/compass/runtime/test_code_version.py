"""What a stage's code version depends on: exactly the project modules it imports (transitively),
the table contract and key library versions; not CLI plumbing, not code the stage never reaches."""
from __future__ import annotations

import pytest

import compass.runtime.code_version as cv


@pytest.fixture(autouse=True)
def fresh_cache():
    cv.code_version.cache_clear()
    yield
    cv.code_version.cache_clear()


def _edited(monkeypatch, module: str):
    """As if ``module``'s source had been edited."""
    target = cv.module_file(module)
    original = cv.Path.read_bytes

    def read_bytes(path):
        data = original(path)
        return data + b"\n# edited\n" if path == target else data
    monkeypatch.setattr(cv.Path, "read_bytes", read_bytes)
    cv.code_version.cache_clear()


def test_closure_follows_imports_lazy_ones_and_registry_strings():
    sft = set(cv.module_closure("stages.sft"))
    assert {"stages.sft.stage", "compass.lm.sft.train", "compass.lm.sft.packing", "compass.lm.qwen3_native",
            "compass.store.store", "compass.runtime.runner"} <= sft
    assert "compass.lm.sft.megatron_backend" in sft            # imported inside a function
    rl = set(cv.module_closure("stages.reasoning_rl"))
    assert "compass.rl.trainer.megatron_trainer" in rl                 # named in the trainer registry's module table
    assert "compass.rl.engine" in rl
    # every gym verifier, and the helpers only a verifier imports, through the registry's name prefix
    ev = set(cv.module_closure("stages.evaluation"))
    assert {f"compass.gym.verifiers.{v}" for v in ("math_exact", "math", "code", "mcq", "title_rules", "genrm")} <= ev
    assert {"compass.gym.math_answers.equal", "compass.gym.sandbox.pool", "compass.gym.mcq_choice"} <= ev


def test_closure_holds_no_other_stage_and_no_cli():
    for stage in ("world", "data_filter", "sft", "merge", "genrm", "reasoning_rl", "domain_rl", "evaluation"):
        mods = cv.module_closure(f"stages.{stage}")
        other = {m.split(".")[1] for m in mods if m.startswith("stages.") and m.count(".") >= 1} - {stage}
        assert not other, (stage, other)
        assert not [m for m in mods if m.startswith(("compass.cli", "compass.bench", "flows"))], stage


def test_an_edit_the_stage_reaches_changes_its_version(monkeypatch):
    before = {s: cv.code_version(f"stages.{s}") for s in ("sft", "merge")}
    _edited(monkeypatch, "compass.lm.sft.packing")              # sft's trainer uses it; the merge never does
    assert cv.code_version("stages.sft") != before["sft"]
    assert cv.code_version("stages.merge") == before["merge"]


def test_library_version_is_part_of_the_code_version(monkeypatch):
    before = cv.code_version("stages.sft")
    real = cv._dist_version
    monkeypatch.setattr(cv, "_dist_version", lambda d: "9.9.9" if d == "transformers" else real(d))
    cv.code_version.cache_clear()
    assert cv.code_version("stages.sft") != before


def test_orchestration_modules_are_not_hashed(monkeypatch):
    before = cv.code_version("stages.sft")
    _edited(monkeypatch, "compass.runtime.stage_cli")
    assert cv.code_version("stages.sft") == before
    _edited(monkeypatch, "compass.store.store")                 # while the store (which writes artifacts) counts
    assert cv.code_version("stages.sft") != before


def test_table_contract_is_hashed(monkeypatch):
    before = cv.code_version("stages.evaluation")
    _edited(monkeypatch, "artifacts_schema.manifest")
    assert cv.code_version("stages.evaluation") != before


def test_unknown_package_is_an_error():
    with pytest.raises(ValueError, match="no package stages.nope"):
        cv.code_version("stages.nope")
