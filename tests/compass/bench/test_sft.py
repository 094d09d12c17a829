"""`compass bench sft` at smoke size: every run trains, and our four runs (torch/megatron, packed/padded) learn
the same thing from the same batches. Its speed numbers mean nothing at this size (docs/benchmarks.md has them)."""
from __future__ import annotations

import json

from compass.bench import run_bench


def test_bench_sft_smoke(capsys, monkeypatch):
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    assert run_bench("sft", ["--quick", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    head = json.loads([line for line in out.strip().splitlines() if line.startswith("{")][-1])
    ours = {k: v for k, v in head["heldout_loss"].items() if k.startswith("ours")}
    assert len(ours) == 4 and {"TRL padded", "TRL packed"} <= set(head["heldout_loss"])
    assert max(ours.values()) - min(ours.values()) < 1e-3          # same maths whatever the layout or backend
    assert all(v < head["heldout_loss_before"] for v in head["heldout_loss"].values())   # every run learned
    assert all(v > 0 for v in head["tokens_per_s"].values())
    for key in ("packed_vs_padded", "megatron_vs_torch_packed", "ours_vs_trl_best"):
        assert head[key] > 0, key
