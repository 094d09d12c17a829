"""RL prompts: rows of a ``prompts`` table, the reasoning/domain split, and per-step sampling."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa

REASONING_DOMAINS = frozenset({"math", "code"})
REASONING_VERIFIERS = frozenset({"math_exact", "code"})


@dataclass(frozen=True)
class RLPrompt:
    id: str
    prompt: str
    reference: str
    verifier: str          # JSON verifier spec, e.g. '{"type": "math_exact"}'
    domain: str = ""
    task: str = ""
    pass_rate: float | None = None   # measured before RL (data_filter grading); None when ungraded


def prompts_from_table(table: pa.Table) -> list[RLPrompt]:
    """Rows of a ``prompts`` table -> RLPrompt (extra columns ignored)."""
    cols = {c: table.column(c).to_pylist() for c in ("id", "prompt", "reference", "verifier", "domain", "task")}
    rates = table.column("pass_rate").to_pylist() if "pass_rate" in table.column_names else [None] * table.num_rows
    return [RLPrompt(id=cols["id"][i], prompt=cols["prompt"][i], reference=cols["reference"][i],
                     verifier=cols["verifier"][i], domain=cols["domain"][i], task=cols["task"][i],
                     pass_rate=rates[i])
            for i in range(table.num_rows)]


def filter_by_pass_rate(prompts: Sequence[RLPrompt], lo: float, hi: float) -> tuple[list[RLPrompt], dict[str, int]]:
    """Zero-variance elimination before rollout: drop prompts whose measured pass rate is ``<= lo``
    (never solved) or ``>= hi`` (always solved); ungraded prompts stay. Returns (kept, counts)."""
    kept, too_easy, too_hard = [], 0, 0
    for p in prompts:
        if p.pass_rate is not None and p.pass_rate >= hi:
            too_easy += 1
        elif p.pass_rate is not None and p.pass_rate <= lo:
            too_hard += 1
        else:
            kept.append(p)
    return kept, {"prompts_dropped_always_solved": too_easy, "prompts_dropped_never_solved": too_hard}


def verifier_type(verifier_json: str) -> str | None:
    """The ``type`` of a verifier spec, or None when the spec is not a JSON object with one."""
    try:
        spec = json.loads(verifier_json)
    except (TypeError, ValueError):
        return None
    return spec.get("type") if isinstance(spec, dict) else None


def is_reasoning_prompt(p: RLPrompt) -> bool:
    """Phase-1 (reasoning RL) prompt: a math or code row, or any row verified by ``math_exact`` or ``code``.

    Everything else belongs to phase 2 (domain RL); the two sets partition a prompts table.
    """
    return p.domain in REASONING_DOMAINS or verifier_type(p.verifier) in REASONING_VERIFIERS


class PromptSampler:
    """Seeded epochs over the prompt set: each epoch is a fresh shuffle; no prompt twice in one step."""

    def __init__(self, prompts: Sequence[RLPrompt], seed: int):
        if not prompts:
            raise ValueError("RL needs at least one prompt; the prompt set is empty")
        self.prompts = list(prompts)
        self.rng = random.Random(seed)
        self.order: list[int] = []
        self.epoch = -1
        self.retired: set[int] = set()
        self._index = {p.id: i for i, p in enumerate(self.prompts)}

    def retire(self, prompt_id: str, keep_at_least: int) -> bool:
        """Stop sampling a prompt (e.g. solved every time), unless fewer than ``keep_at_least`` would remain."""
        i = self._index.get(prompt_id)
        if i is None or i in self.retired or len(self.prompts) - len(self.retired) <= keep_at_least:
            return False
        self.retired.add(i)
        return True

    def state(self) -> dict:
        return {"rng": self.rng.getstate(), "order": list(self.order), "epoch": self.epoch,
                "retired": sorted(self.retired)}

    def load_state(self, state: dict) -> None:
        self.rng.setstate(state["rng"])
        self.order, self.epoch, self.retired = list(state["order"]), state["epoch"], set(state["retired"])

    def take(self, k: int) -> list[RLPrompt]:
        """The next ``min(k, len(prompts))`` distinct prompts."""
        k = min(k, len(self.prompts) - len(self.retired))
        out: list[int] = []
        while len(out) < k:
            if not self.order:
                self.order = list(range(len(self.prompts)))
                self.rng.shuffle(self.order)
                self.epoch += 1
            i = self.order.pop()
            if i in self.retired:
                continue
            if i in out:               # epoch boundary inside a step: keep it for a later step
                self.order.insert(0, i)
            else:
                out.append(i)
        return [self.prompts[i] for i in out]
