"""The one verifier registry: a module per verifier, both forms each, one name everywhere."""
from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

from compass.cli.gym import run_gym
from compass.gym.registry import RENAMED, VERIFIER_MODULES, get_verifier, load_all
from compass.gym.score import parse_verifier

DOC = Path(__file__).resolve().parents[3] / "docs" / "gym.md"


def test_one_entry_per_verifier_module_named_after_it():
    registry = load_all()
    by_module = {}
    for name, v in registry.items():
        by_module.setdefault(v.spec.__module__, []).append(name)
    assert sorted(by_module) == sorted(VERIFIER_MODULES)
    for module, names in by_module.items():
        assert names == [module.rsplit(".", 1)[1]], (module, names)
        assert importlib.import_module(module).VERIFIER is registry[names[0]]


def test_every_entry_has_both_forms_from_its_own_module():
    for name, v in load_all().items():
        assert v.name == name and callable(v.spec)
        rows = v.row or v.judge_rows
        assert callable(rows) and (v.row is None) != (v.judge_rows is None), name
        assert rows.__module__ == v.spec.__module__, name
    assert [n for n, v in load_all().items() if v.needs_judge] == ["genrm"]   # only the learned judge


def _cli(name: str, capsys) -> str:
    args = argparse.Namespace(gym_command="score", verifier=name, input="/nonexistent/in.jsonl",
                              output="/tmp/out.jsonl", workers=None, timeout=None, judge="/nonexistent/ckpt",
                              swap_check=False, max_new_tokens=8)
    assert run_gym(args) == 2
    return capsys.readouterr().err


def test_spec_names_are_the_cli_names(capsys):
    names = sorted(load_all())
    for name in names:
        assert parse_verifier({"type": name})["type"] == name       # a spec may name it
        assert "no such input file" in _cli(name, capsys)           # the CLI takes it (then misses the file)
    for old, new in RENAMED.items():
        assert new in names and old not in names
        assert f"'{old}' is now called '{new}'" in _cli(old, capsys)
        with pytest.raises(ValueError, match="now called"):
            get_verifier(old)
        with pytest.raises(ValueError, match=f"unknown verifier type '{old}'"):
            parse_verifier({"type": old})


def test_the_docs_table_lists_the_registry():
    table = DOC.read_text(encoding="utf-8").split("## The scoring contract", 1)[1].split("\n\n**", 1)[0]
    documented = re.findall(r"^\| `([a-z_]+)` \|", table, re.M)
    assert sorted(documented) == sorted(load_all())


def test_the_learned_judge_has_no_offline_spec_score():
    from compass.gym.score import is_judged, score
    assert is_judged({"type": "genrm"}) and is_judged({"type": "title_rules"})
    with pytest.raises(ValueError, match="--judge"):
        score({"type": "genrm"}, "a", "b")


@pytest.mark.parametrize("name, spec, row", [
    ("math_exact", {}, {"response": "<think>7+15</think>22", "gold": "22"}),
    ("math_exact", {}, {"response": "0.75", "gold": "3/4"}),
    ("math_exact", {}, {"response": "<think>22", "gold": "22"}),
    ("qa", {"aliases": ["USA"]}, {"response": "The U.S.A.", "gold": "United States", "aliases": ["USA"]}),
    ("qa", {}, {"response": "It is Paris", "gold": "Paris"}),
    ("title_rules", {"must_keep": ["Lumio"], "banned": ["HOT SALE"], "max_chars": 30},
     {"response": "Lumio Earbuds HOT SALE", "must_keep": ["Lumio"], "banned": ["HOT SALE"], "max_chars": 30}),
    ("title_rules", {}, {"response": "Lumio  Earbuds", "reference": "Lumio Earbuds"}),
])
def test_new_row_forms_score_as_their_specs(name, spec, row):
    from compass.gym.rows import score_row
    from compass.gym.score import score
    reference = row.get("gold", row.get("reference", ""))
    assert score_row(name, row)["score"] == score({"type": name, **spec}, row["response"], reference)


def test_new_row_forms_refuse_bad_rows():
    from compass.gym.rows import score_row
    assert "gold" in score_row("math_exact", {"response": "1"})["error"]
    assert "aliases" in score_row("qa", {"response": "a", "gold": "a", "aliases": "a"})["error"]
    assert "max_chars" in score_row("title_rules", {"response": "a", "max_chars": "9"})["error"]
