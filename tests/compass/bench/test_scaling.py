"""`compass bench scaling --quick`: the fsdp trainer on 1 and 2 ranks (Ray, gloo) and the weight sync to 2 rollout workers by
both paths run, and the table and headline agree."""
from __future__ import annotations

import json

import pytest

from compass.bench import run_bench

pytestmark = pytest.mark.ray


def test_bench_scaling_quick_prints_the_table_and_a_consistent_headline(ray_up, capsys):
    assert run_bench("scaling", ["--quick", "--workers", "2", "--syncs", "1"]) == 0     # on the kept 2-CPU Ray
    out = capsys.readouterr().out.strip().splitlines()
    head = json.loads(out[-1])
    assert head["bench"] == "scaling" and head["quick"] is True and head["ranks"] == 2
    assert head["update_s_1rank"] > 0 and head["update_s_2ranks"] > 0
    # the headline rounds to 3 decimals: 5e-4 absolute (a loaded machine's speed-up of 0.046 is 1% off by that alone)
    assert head["speedup"] == pytest.approx(head["update_s_1rank"] / head["update_s_2ranks"], rel=1e-2, abs=1e-3)
    assert head["parallel_efficiency"] == pytest.approx(head["speedup"] / 2, rel=1e-2, abs=1e-3)   # both rounded
    assert not any(k.startswith("megatron") for k in head)      # --quick leaves megatron out (its ranks: ~30 s)
    assert head["sync_s_2workers"] > 0 and head["broadcast_s_2workers"] > 0 and "sync_s_1workers" not in head
    text = "\n".join(out)
    assert "fsdp, 2 ranks x 1 thread (Ray, gloo)" in text and "weight sync" in text
