"""Pipeline config files: validated at the edge, one clear line per problem."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from compass.config import ConfigError, StrictModel, load_yaml, suggest_key, validate
from compass.dag.config import PipelineConfig

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, doc, name: str = "pipeline.yaml") -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return p


def error_lines(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as ei:
        load_yaml(PipelineConfig, path)
    return str(ei.value).splitlines()


def test_valid_file_loads(tmp_path: Path):
    path = write(tmp_path, {"store": "s3://bucket/prefix", "store_options": {"endpoint_url": "http://127.0.0.1:1"},
                            "sft_longcot": {"steps": 7, "lr": 0.002}, "sft_domain": {"batch_size": 4}})
    cfg = load_yaml(PipelineConfig, path)
    assert cfg.store == "s3://bucket/prefix" and cfg.store_options == {"endpoint_url": "http://127.0.0.1:1"}
    assert (cfg.sft_longcot.steps, cfg.sft_longcot.lr, cfg.sft_domain.batch_size) == (7, 0.002, 4)
    default = PipelineConfig()
    assert cfg.sft_domain.steps == default.sft_domain.steps  # unspecified keys keep the defaults
    assert cfg.stage_config("sft_longcot") is cfg.sft_longcot
    assert load_yaml(PipelineConfig, write(tmp_path, "", "empty.yaml")) == default  # an empty file is all defaults
    # The dump of a loaded config loads back to the same config.
    again = load_yaml(PipelineConfig, write(tmp_path, cfg.model_dump(mode="json"), "dump.yaml"))
    assert again == cfg


def test_shipped_configs_load():
    files = sorted((REPO / "configs").glob("*.yaml"))
    assert REPO / "configs" / "tiny.yaml" in files
    for f in files:  # every pipeline config we ship validates (a typo there would reach users)
        load_yaml(PipelineConfig, f)


def test_misspelled_key_names_file_path_and_suggestion(tmp_path: Path):
    path = write(tmp_path, {"sft_longcot": {"lrr": 0.1, "steps": 3}})
    lines = error_lines(path)
    assert len(lines) == 1
    line = lines[0]
    assert str(path) in line and "sft_longcot.lrr" in line and "did you mean 'lr'?" in line
    assert line.startswith("config error in ")


@pytest.mark.parametrize("section,bad,meant", [
    (None, "sft_longcott", "sft_longcot"),
    ("sft_domain", "stpes", "steps"),
    ("sft_domain", "batchsize", "batch_size"),
    ("sft_longcot", "learning_rate", "lr"),
])
def test_did_you_mean(tmp_path: Path, section, bad, meant):
    doc = {bad: 1} if section is None else {section: {bad: 1}}
    (line,) = error_lines(write(tmp_path, doc))
    dotted = bad if section is None else f"{section}.{bad}"
    assert f": {dotted}: unknown key (did you mean '{meant}'?)" in line


def test_nested_model_key(tmp_path: Path):
    (line,) = error_lines(write(tmp_path, {"world": {"model": {"hiden_size": 32}}}))
    assert "world.model.hiden_size" in line and "did you mean 'hidden_size'?" in line


def test_unknown_key_without_a_close_match(tmp_path: Path):
    (line,) = error_lines(write(tmp_path, {"sft_longcot": {"zzzz": 1}}))
    assert "sft_longcot.zzzz: unknown key" in line and "did you mean" not in line


def test_wrong_type_names_dotted_path(tmp_path: Path):
    path = write(tmp_path, {"sft_longcot": {"steps": "many"}})
    (line,) = error_lines(path)
    assert str(path) in line and "sft_longcot.steps" in line and "'many'" in line and "integer" in line


def test_out_of_range_value(tmp_path: Path):
    (line,) = error_lines(write(tmp_path, {"sft_domain": {"lr": -1}}))
    assert "sft_domain.lr" in line and "greater than 0" in line


def test_section_of_the_wrong_shape(tmp_path: Path):
    (line,) = error_lines(write(tmp_path, {"sft_longcot": [1, 2]}))
    assert "sft_longcot" in line


def test_several_problems_give_one_line_each(tmp_path: Path):
    lines = error_lines(write(tmp_path, {"sft_longcot": {"lr": "fast", "stpes": 2}, "mergee": {}}))
    assert len(lines) == 3
    joined = "\n".join(lines)
    assert "sft_longcot.lr" in joined and "sft_longcot.stpes" in joined and "mergee" in joined
    assert all(line.startswith("config error in ") for line in lines)


def test_long_bad_value_stays_on_one_short_line(tmp_path: Path):
    (line,) = error_lines(write(tmp_path, {"sft_longcot": {"steps": "x\n" * 200}}))
    assert len(line) < 300


def test_file_problems(tmp_path: Path):
    with pytest.raises(ConfigError, match="file not found"):
        load_yaml(PipelineConfig, tmp_path / "nope.yaml")
    (line,) = error_lines(write(tmp_path, "sft_longcot: [unclosed\n", "broken.yaml"))
    assert "broken.yaml" in line and "not valid YAML" in line
    (line,) = error_lines(write(tmp_path, "- a\n- b\n", "list.yaml"))
    assert "top level must be a mapping" in line


def test_validate_names_its_source():
    class Small(StrictModel):
        alpha: float = 1.0
    with pytest.raises(ConfigError, match=r"config error in sft_longcot config: alpah: unknown key "
                                          r"\(did you mean 'alpha'\?\)"):
        validate(Small, {"alpah": 2}, "sft_longcot config")
    obj = validate(Small, {"alpha": 2})
    with pytest.raises(ValueError):
        obj.alpha = "not a number"  # validated on assignment too


def test_suggest_key():
    known = ["seed", "steps", "batch_size", "lr", "warmup_steps", "max_len"]
    assert suggest_key("lr_rate", known) == "lr"
    assert suggest_key("max_length", known) == "max_len"
    assert suggest_key("Batch-Size", known) == "batch_size"
    assert suggest_key("seeed", known) == "seed"
    assert suggest_key("qqq", known) is None
    assert suggest_key("x", []) is None


def test_impossible_model_shape_is_rejected_with_its_path():
    with pytest.raises(ConfigError, match=r"world\.model: .*experts_per_token \(4\) > num_experts \(2\)"):
        validate(PipelineConfig, {"world": {"model": {"num_experts": 2, "experts_per_token": 4}}}, "x.yaml")
    with pytest.raises(ConfigError, match=r"world\.model: .*multiple of num_kv_heads"):
        validate(PipelineConfig, {"world": {"model": {"num_heads": 3, "num_kv_heads": 2}}}, "x.yaml")


def test_deep_merge_replaces_a_block_of_another_kind():
    """A user's `loss: {kind: espo}` over the default's PPO-clip block is the ESPO block alone: the
    old kind's keys (clip_eps) would be unknown keys to the new one."""
    from compass.config import deep_merge
    base = {"loss": {"kind": "ppo_clip", "clip_eps": 0.2}, "lr": 1e-5}
    assert deep_merge(base, {"loss": {"kind": "espo"}}) == {"loss": {"kind": "espo"}, "lr": 1e-5}
    assert deep_merge(base, {"loss": {"clip_eps": 0.3}})["loss"] == {"kind": "ppo_clip", "clip_eps": 0.3}
    assert deep_merge(base, {"loss": {"kind": "ppo_clip", "clip_eps": 0.1}})["loss"]["clip_eps"] == 0.1
