"""``compass config`` and the default config: found from any working directory."""
from __future__ import annotations

from compass.cli.main import default_config, main


def test_default_config_is_the_repositorys_tiny_yaml_from_anywhere(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)                      # no configs/ here: the repository's is used
    path = default_config()
    assert path.endswith("configs/tiny.yaml")
    assert main(["config"]) == 0
    assert "reasoning_rl:" in capsys.readouterr().out


def test_stage_and_bench_without_a_name_list_the_names(capsys):
    for argv in (["stage"], ["stage", "--help"], ["bench"], ["bench", "-h"]):
        assert main(argv) == 0, argv
        out = capsys.readouterr().out
        assert out.startswith(f"usage: compass {argv[0]} NAME")
        assert ("world, data_filter, sft" in out) if argv[0] == "stage" else ("vs-trl" in out and "sft" in out)
