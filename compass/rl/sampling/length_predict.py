"""Predict each prompt's generation length before rollout (paper §3.1.1), for :mod:`compass.rl.sampling.length_balance`.

Two sources, cheapest first:

- **history**: the prompt's own earlier groups in this run (an exponential moving average of their mean
  length: the policy drifts, so recent groups count more);
- **draft** (the paper's way): one short sample of the current policy, capped at ``draft_tokens``. A draft
  that ends before the cap is the prediction; one that reaches it says only "longer than the cap", and the
  prediction is the run's mean length of samples that went past the cap (``max_new_tokens`` before any did).

A prompt with neither gets its task's mean so far, then the run's, then ``max_new_tokens``. Every prediction
is in tokens per sample; :func:`prediction_error` compares predictions with what the rollout produced.
"""
from __future__ import annotations

from typing import Sequence


class LengthPredictor:
    """Per-prompt expected completion length (tokens per sample), learned from the run's own groups."""

    def __init__(self, max_new_tokens: int, *, decay: float = 0.5, draft_tokens: int = 0):
        if not 0 < decay <= 1:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.max_new_tokens, self.decay, self.draft_tokens = max_new_tokens, decay, draft_tokens
        self.by_prompt: dict[str, float] = {}
        self.by_task: dict[str, list[float]] = {}     # task -> [sum of sample lengths, samples]
        self.total = [0.0, 0.0]
        self.past_cap = [0.0, 0.0]                     # samples longer than the draft cap: [sum, count]

    def needs_draft(self, prompt_id: str) -> bool:
        return self.draft_tokens > 0 and prompt_id not in self.by_prompt

    def predict(self, prompt_id: str, task: str, draft: tuple[int, bool] | None = None) -> tuple[float, str]:
        """(predicted tokens per sample, source: ``history`` | ``draft`` | ``task`` | ``run`` | ``budget``).
        ``draft``: (its length, whether it ended before the cap)."""
        if prompt_id in self.by_prompt:
            return self.by_prompt[prompt_id], "history"
        if draft is not None:
            length, ended = draft
            if ended:
                return float(length), "draft"
            tail = self.past_cap[0] / self.past_cap[1] if self.past_cap[1] else self.max_new_tokens
            return max(float(length), tail), "draft"
        if task in self.by_task:
            s, c = self.by_task[task]
            return s / c, "task"
        if self.total[1]:
            return self.total[0] / self.total[1], "run"
        return float(self.max_new_tokens), "budget"

    def observe(self, prompt_id: str, task: str, lengths: Sequence[int]) -> None:
        """A finished group's completion lengths."""
        if not lengths:
            return
        mean = sum(lengths) / len(lengths)
        old = self.by_prompt.get(prompt_id)
        self.by_prompt[prompt_id] = mean if old is None else (1 - self.decay) * old + self.decay * mean
        t = self.by_task.setdefault(task, [0.0, 0.0])
        t[0] += sum(lengths)
        t[1] += len(lengths)
        self.total[0] += sum(lengths)
        self.total[1] += len(lengths)
        if self.draft_tokens:
            longer = [x for x in lengths if x > self.draft_tokens]
            self.past_cap[0] += sum(longer)
            self.past_cap[1] += len(longer)

    def state(self) -> dict:
        return {"by_prompt": dict(self.by_prompt), "by_task": {k: list(v) for k, v in self.by_task.items()},
                "total": list(self.total), "past_cap": list(self.past_cap)}

    def load_state(self, state: dict | None) -> None:
        if not state:
            return
        self.by_prompt = dict(state["by_prompt"])
        self.by_task = {k: list(v) for k, v in state["by_task"].items()}
        self.total, self.past_cap = list(state["total"]), list(state["past_cap"])


def prediction_error(predicted: Sequence[float], actual: Sequence[float]) -> dict:
    """Per prompt, predicted vs actual mean tokens per sample -> ``length_pred_mae_tokens`` and
    ``length_pred_rel_error`` (MAE over the mean actual length: 0 = exact)."""
    if not predicted:
        return {"length_pred_mae_tokens": 0.0, "length_pred_rel_error": 0.0}
    mae = sum(abs(p - a) for p, a in zip(predicted, actual)) / len(predicted)
    mean_actual = sum(actual) / len(actual)
    return {"length_pred_mae_tokens": mae, "length_pred_rel_error": mae / mean_actual if mean_actual > 0 else 0.0}
