"""The json_schema verifier's ``valid`` against the official JSON Schema conformance suite (draft 2020-12,
object instances), the same check as ``compass bench gym-json``. The suite is never part of the
repository and never downloaded here: ``make install-test`` fetches it into the cache folder
(``compass bench gym-json --fetch-only``); without it the test skips."""
from __future__ import annotations

import pytest

from compass.bench import gym_json

DRAFT_DIR = gym_json.tests_dir(gym_json.DEFAULT_SUITE)


@pytest.mark.skipif(DRAFT_DIR is None, reason=f"JSON Schema test suite not in {gym_json.DEFAULT_SUITE} "
                                              f"(fetch it: compass bench gym-json --fetch-only)")
def test_valid_agrees_with_the_conformance_suite():
    data = gym_json.load_cases(DRAFT_DIR)
    assert len(data["cases"]) > 300 and data["skipped_files"] == ["refRemote.json"]
    result = gym_json.agreement(gym_json.run(data["cases"]))
    shown = [f"{r['file']}: {r['group']} / {r['test']} (suite {r['expected']})" for r in result["disagreements"]]
    assert result["agreement"] >= 0.99, shown[:20]
    # the cases the hand-made check got wrong before are among those that agree now
    assert {"allOf", "boolean_schema", "dependentRequired", "dependentSchemas", "ref"} <= set(result["per_file"])


def test_cases_needing_the_remote_server_are_told_apart_from_remote_looking_ids():
    # a localhost:1234 URI used only as an $id base needs nothing remote; one that must be fetched does
    local = {"$id": "http://localhost:1234/draft2020-12/root", "properties": {"a": {"$ref": "#/$defs/a"}},
             "$defs": {"a": {"type": "integer"}}}
    assert not gym_json._needs_remote(local)
    assert gym_json._needs_remote({"$ref": "http://localhost:1234/draft2020-12/integer.json"})
    assert gym_json._needs_remote({"$schema": "http://localhost:1234/draft2020-12/metaschema-no-validation.json"})
    assert not gym_json._needs_remote({"$ref": "https://json-schema.org/draft/2020-12/schema"})


def test_suite_extraction_keeps_only_the_draft_tests_and_license(tmp_path):
    import io
    import tarfile
    sdist = tmp_path / "jsonschema-0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        for name in ("p-0/json/tests/draft2020-12/allOf.json", "p-0/json/tests/draft7/allOf.json",
                     "p-0/json/LICENSE", "p-0/jsonschema/x.py", "p-0/json/tests/draft2020-12/../../../../evil"):
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"[]"))
    out = tmp_path / "suite"
    gym_json._extract_suite(sdist, out)
    got = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert got == ["LICENSE", "tests/draft2020-12/allOf.json"] and not (tmp_path / "evil").exists()
    # every usual layout of a copy is found: the suite root, the sdist's json/, the draft folder
    assert gym_json.tests_dir(out) == gym_json.tests_dir(out / "tests" / "draft2020-12") == out / "tests" / "draft2020-12"
    (tmp_path / "sdist" / "json").mkdir(parents=True)
    (out / "tests").rename(tmp_path / "sdist" / "json" / "tests")
    assert gym_json.tests_dir(tmp_path / "sdist") is not None and gym_json.tests_dir(out) is None
