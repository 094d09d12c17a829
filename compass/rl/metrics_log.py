"""Per-step RL metrics to three sinks: JSONL (one object per step), TensorBoard events, PNG plots.

The JSONL is appended and flushed every step, so a killed run keeps what it
measured; plots are drawn at ``close`` from everything logged.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

# what the plots show: (file stem, title, metric names)
PLOTS = [
    ("reward", "reward", ["reward_mean", "pass_rate"]),
    ("zero_variance", "zero variance: share of groups, and of rollout tokens",
     ["zero_variance_rate", "zero_variance_all_pass_rate", "zero_variance_all_fail_rate",
      "zero_variance_token_share_all_pass", "zero_variance_token_share_all_fail"]),
    ("advantage", "|advantage| per rollout token", ["adv_abs_token_mean"]),
    ("entropy", "entropy", ["entropy"]),
    ("clip", "clip fraction", ["clip_frac"]),
    ("mismatch", "train-inference |Δ log p|", ["logp_gap_mean", "logp_gap_p99", "logp_gap_mean_no_replay"]),
    ("routing", "routing agreement (rollout vs trainer)", ["routing_agreement"]),
    ("throughput", "rollout tokens/s", ["tokens_per_s"]),
    ("time", "time by phase (s)", ["time_rollout_s", "time_reward_s", "time_old_logp_s", "time_update_s",
                                   "time_sync_s"]),
]


class MetricsLog:
    def __init__(self, out_dir: str | Path | None, *, tensorboard: bool = True):
        self.rows: list[dict] = []
        self.dir = Path(out_dir) if out_dir is not None else None
        self._jsonl = None
        self._tb = None
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._jsonl = open(self.dir / "metrics.jsonl", "a")
            if tensorboard:
                from torch.utils.tensorboard import SummaryWriter
                self._tb = SummaryWriter(log_dir=str(self.dir / "tensorboard"))

    def restore(self, rows: list[dict]) -> None:
        """Rows of an interrupted run being resumed: the JSONL is rewritten with exactly these
        (a resumed stage writes into a fresh directory; a resumed run in the same one must not
        repeat the steps logged after its last saved state)."""
        self.rows = list(rows)
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = open(self.dir / "metrics.jsonl", "w")
            for row in self.rows:
                self._jsonl.write(json.dumps(row, sort_keys=True) + "\n")
            self._jsonl.flush()

    def log(self, row: dict) -> None:
        self.rows.append(row)
        if self._jsonl is not None:
            self._jsonl.write(json.dumps(row, sort_keys=True) + "\n")
            self._jsonl.flush()
        if self._tb is not None:
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and k != "step":
                    self._tb.add_scalar(f"rl/{k}", v, row["step"])
            self._tb.flush()

    def close(self) -> list[Path]:
        """Close the sinks and draw the plots; returns the PNG paths."""
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self.dir is None or not self.rows:
            return []
        return plot_metrics(self.rows, self.dir / "plots")


def plot_metrics(rows: list[dict], out_dir: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    steps = [r["step"] for r in rows]
    for stem, title, names in PLOTS:
        series = [(n, [r.get(n) for r in rows]) for n in names]
        series = [(n, v) for n, v in series if any(x is not None for x in v)]
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for n, v in series:
            pts = [(s, x) for s, x in zip(steps, v) if x is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=n, marker="." if len(pts) < 40 else None)
        ax.set_title(title)
        ax.set_xlabel("step")
        if stem == "mismatch":
            ax.set_yscale("log")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / f"{stem}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths
