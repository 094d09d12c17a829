"""The data-filter benchmark at a reduced size: streaming throughput and peak memory stay within target."""
from __future__ import annotations

import json

import pytest

from compass.bench import data_filter as bench

pytestmark = pytest.mark.ray      # starts a local Ray (tests/conftest.py)


@pytest.mark.slow
def test_streaming_finds_every_planted_row_and_reports_its_figures(capsys, tmp_path):
    """The bench's planted duplicates and leaks, all found. Its throughput and memory targets are the
    bench's business (docs/benchmarks.md, 120,000 rows), not a timed test's."""
    assert bench.main(["--rows", "8000", "--baseline-rows", "1000", "--dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["samples_per_min"] > 0 and out["peak_rss_gib"] > 0, out
    planted = out["planted"]
    q = out["quarantined_sft"]
    # every planted copy and leak is found (a reordering can leave a row unchanged: then it is an exact copy)
    assert q["duplicate"] + q["near_duplicate"] == planted["duplicate"] + planted["near_duplicate"]
    assert q["contaminated"] == planted["contaminated"]


@pytest.mark.slow
def test_ray_and_datatrove_side_by_side(capsys, tmp_path):
    """A smoke run: Ray Data's output equals streaming (the bench exits otherwise), datatrove runs on the
    same rows, and every figure of the side-by-side table is in the closing JSON line."""
    assert bench.main(["--rows", "400", "--baseline-rows", "100", "--ray-workers", "2", "--dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    out = json.loads(lines[-1])
    assert out["ray_identical"] and out["ray_workers"] == 2
    assert out["stage_recall"] == 1.0 and out["stage_false_pos"] == 0, out
    assert out["datatrove_recall"] > 0.9 and out["datatrove_samples_per_min"] > 0, out
    assert abs(out["stage_vs_datatrove_throughput"] - out["samples_per_min"] / out["datatrove_samples_per_min"]) < 0.02
    assert any(line.startswith("datatrove MinHash dedup (2 workers)") for line in lines)
