"""What an RL run records besides metrics: per-prompt statistics and one row per rollout."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import pyarrow as pa

from compass.rl.sampling.prompt_data import RLPrompt


@dataclass
class PromptStats:
    """What RL measured per prompt over the whole run (the carryover filter reads it): samples, pass rate,
    groups, and how often the pre-rollout filter skipped it (a prompt only ever skipped has no row)."""
    pass_threshold: float
    _rows: dict[str, dict] = field(default_factory=dict)
    _skips: dict[str, int] = field(default_factory=dict)   # pre-rollout skips per prompt (sampling.prefilter)

    def skipped(self, prompt: RLPrompt) -> None:
        self._skips[prompt.id] = self._skips.get(prompt.id, 0) + 1

    def add(self, prompt: RLPrompt, rewards: Sequence[float]) -> None:
        row = self._rows.setdefault(prompt.id, {"prompt": prompt, "rewards": [], "groups": 0})
        row["rewards"].extend(float(r) for r in rewards)
        row["groups"] += 1

    def state(self) -> dict:
        """What a resumed run needs (:meth:`load_state`): per prompt id, the prompt, its rewards and group
        count; and the skips."""
        return {"rows": self._rows, "skips": self._skips}

    def load_state(self, state: dict) -> None:
        if "rows" not in state:           # a state saved before skips were recorded
            state = {"rows": state, "skips": {}}
        self._rows, self._skips = state["rows"], dict(state["skips"])

    def rows(self) -> list[dict]:
        out = []
        for pid, row in self._rows.items():
            r = row["rewards"]
            out.append({"prompt_id": pid, "domain": row["prompt"].domain, "task": row["prompt"].task,
                        "n_samples": len(r), "pass_rate": sum(x > self.pass_threshold for x in r) / len(r),
                        "mean_reward": sum(r) / len(r), "zero_variance": max(r) == min(r),
                        "n_groups": row["groups"], "n_skipped": self._skips.get(pid, 0)})
        return sorted(out, key=lambda x: x["prompt_id"])

    def table(self) -> pa.Table:
        rows = self.rows()
        return pa.table({
            "prompt_id": pa.array([r["prompt_id"] for r in rows], pa.string()),
            "domain": pa.array([r["domain"] for r in rows], pa.string()),
            "task": pa.array([r["task"] for r in rows], pa.string()),
            "n_samples": pa.array([r["n_samples"] for r in rows], pa.int32()),
            "pass_rate": pa.array([r["pass_rate"] for r in rows], pa.float64()),
            "mean_reward": pa.array([r["mean_reward"] for r in rows], pa.float64()),
            "zero_variance": pa.array([r["zero_variance"] for r in rows], pa.bool_()),
            "n_groups": pa.array([r["n_groups"] for r in rows], pa.int32()),
            "n_skipped": pa.array([r["n_skipped"] for r in rows], pa.int32()),
        })


def rollouts_table(rows: list[dict]) -> pa.Table:
    """Rollout rows (as :func:`train` records them) -> a ``rollouts`` table (with extra columns)."""
    def col(name, typ):
        return pa.array([r[name] for r in rows], typ)
    return pa.table({
        "step": col("step", pa.int64()), "prompt_id": col("prompt_id", pa.string()),
        "sample_idx": col("sample_idx", pa.int32()), "response": col("response", pa.string()),
        "reward": col("reward", pa.float64()),
        "reward_reason": pa.array([r.get("reward_reason") for r in rows], pa.string()),
        "num_tokens": col("num_tokens", pa.int32()),
        "advantage": col("advantage", pa.float64()), "domain": col("domain", pa.string()),
        "task": col("task", pa.string()), "truncated": col("truncated", pa.bool_()),
    })


