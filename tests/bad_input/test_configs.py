"""Bad configs are refused before any work, one line naming the file and the dotted key: every section of
the pipeline config and every key of the import config."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from compass.config import ConfigError, load_yaml
from compass.dag.config import PipelineConfig
from compass.ingest.config import load_import_config

SECTIONS = [n for n, f in PipelineConfig.model_fields.items() if hasattr(f.annotation, "model_fields")]
TOP_LEVEL = {"store": ["not", "a", "path"], "store_options": "endpoint", "eval_suites": "gsm8k",
             "schedules": {"no_such_run": "0 2 * * *"}, "schedule_timezone": {"tz": 1}}


def _numeric_field(section: str) -> str:
    model = PipelineConfig.model_fields[section].annotation
    return next(k for k, f in model.model_fields.items() if f.annotation in (int, float))


def _refused(tmp_path: Path, data: dict) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as e:
        load_yaml(PipelineConfig, path)
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and str(path) in msg, msg
    return msg


def test_every_pipeline_section_is_checked():
    assert len(SECTIONS) >= 9 and {"world", "data_filter", "evaluation"} <= set(SECTIONS)


@pytest.mark.parametrize("section", SECTIONS)
def test_unknown_key_in_a_section_is_named(tmp_path, section):
    msg = _refused(tmp_path, {section: {"no_such_key_xyz": 1}})
    assert f"{section}.no_such_key_xyz: unknown key" in msg


@pytest.mark.parametrize("section", SECTIONS)
def test_wrong_type_in_a_section_is_named(tmp_path, section):
    field = _numeric_field(section)
    msg = _refused(tmp_path, {section: {field: "not-a-number"}})
    assert f"{section}.{field}:" in msg and "not-a-number" in msg


@pytest.mark.parametrize("key", sorted(TOP_LEVEL))
def test_bad_top_level_value_is_named(tmp_path, key):
    assert f"{key}" in _refused(tmp_path, {key: TOP_LEVEL[key]}).split(": ", 1)[1]


def test_unknown_top_level_key(tmp_path):
    assert "stor: unknown key (did you mean 'store'?)" in _refused(tmp_path, {"stor": "./x"})


IMPORT_OK = {"source": "rows.jsonl", "kind": "prompts", "id_template": "r-{index}",
             "columns": {"prompt": "q", "reference": "a"},
             "defaults": {"domain": "math", "task": "t", "language": "en", "verifier": {"type": "math_exact"}}}
IMPORT_BAD = [
    ({"kind": "rollouts"}, "kind"),                                   # not importable
    ({"format": "xls"}, "format"),
    ({"limit": 0}, "limit"),
    ({"max_field_chars": -1}, "max_field_chars"),
    ({"columns": {"prompt": {"from": "q", "regx": "x"}, "reference": "a"}}, "columns.prompt"),
    ({"columns": {"prompt": {"from": "q", "regex": "("}, "reference": "a"}}, "columns.prompt.regex"),
    ({"columns": {"prompt": {"template": "{0}"}, "reference": "a"}}, "columns.prompt.template"),
    ({"columns": {"reference": "a"}}, "columns"),                     # prompt unmapped
    ({"defaults": {"domain": 3, "task": "t", "language": "en", "verifier": {"type": "m"}}}, "defaults"),
    ({"defaults": {"domain": "d", "task": "t", "language": "en", "verifier": {"kind": "m"}}}, "defaults"),
    ({"labels": {"1": "A"}}, "labels"),
    ({"id_template": "{_nope}"}, "id_template"),
    ({"name": "bad name/"}, "name"),
    ({"storage_options": {"secret": "s3cr3t-value"}}, "storage_options.secret"),
    ({"surprise": 1}, "surprise"),
]


@pytest.mark.parametrize("over,key", IMPORT_BAD, ids=[k for _, k in IMPORT_BAD])
def test_bad_import_config_names_the_key(tmp_path, over, key):
    path = tmp_path / "imp.yaml"
    path.write_text(yaml.safe_dump({**IMPORT_OK, **over}))
    with pytest.raises(ConfigError) as e:
        load_import_config(path)
    msg = str(e.value)
    assert str(path) in msg and f"{key}" in msg, msg
    assert all(line.startswith("config error in") for line in msg.splitlines())
    assert "s3cr3t-value" not in msg
