"""What a version depends on: stage code, the table contract, key library versions; not CLI plumbing."""
from __future__ import annotations

import pytest

import stages.common.fingerprint as fp


@pytest.fixture(autouse=True)
def fresh_cache():
    fp.code_version.cache_clear()
    yield
    fp.code_version.cache_clear()


def test_library_version_is_part_of_the_code_version(monkeypatch):
    before = fp.code_version("sft", "common")
    real = fp._dist_version
    monkeypatch.setattr(fp, "_dist_version", lambda d: "9.9.9" if d == "transformers" else real(d))
    fp.code_version.cache_clear()
    assert fp.code_version("sft", "common") != before


def test_orchestration_modules_are_not_hashed(monkeypatch, tmp_path):
    before = fp.code_version("common")
    common = fp.Path(fp.stages.__file__).parent / "common"
    original = fp.Path.read_bytes

    def read_bytes(path):  # as if stage_cli.py had been edited
        data = original(path)
        return data + b"\n# edited\n" if path == common / "stage_cli.py" else data
    monkeypatch.setattr(fp.Path, "read_bytes", read_bytes)
    fp.code_version.cache_clear()
    assert fp.code_version("common") == before

    def read_bytes_store(path):  # while editing the store (which writes artifacts) does count
        data = original(path)
        return data + b"\n# edited\n" if path == common / "store.py" else data
    monkeypatch.setattr(fp.Path, "read_bytes", read_bytes_store)
    fp.code_version.cache_clear()
    assert fp.code_version("common") != before


def test_unknown_package_is_an_error():
    with pytest.raises(ValueError, match="no package stages/nope"):
        fp.code_version("nope")
