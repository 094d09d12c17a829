"""The data-filter benchmark at a reduced size: streaming throughput and peak memory stay within target."""
from __future__ import annotations

import json

import pytest

from compass.bench import data_filter as bench


@pytest.mark.slow
def test_streaming_throughput_and_memory(capsys, tmp_path):
    assert bench.main(["--rows", "120000", "--baseline-rows", "3000", "--dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["samples_per_min"] >= 20_000 and out["peak_rss_gib"] < 4.0, out
    planted = out["planted"]
    q = out["quarantined_sft"]
    # every planted copy and leak is found (a reordering can leave a row unchanged: then it is an exact copy)
    assert q["duplicate"] + q["near_duplicate"] == planted["duplicate"] + planted["near_duplicate"]
    assert q["contaminated"] == planted["contaminated"]
