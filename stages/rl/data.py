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


def prompts_from_table(table: pa.Table) -> list[RLPrompt]:
    """Rows of a ``prompts`` table -> RLPrompt (extra columns ignored)."""
    cols = {c: table.column(c).to_pylist() for c in ("id", "prompt", "reference", "verifier", "domain", "task")}
    return [RLPrompt(id=cols["id"][i], prompt=cols["prompt"][i], reference=cols["reference"][i],
                     verifier=cols["verifier"][i], domain=cols["domain"][i], task=cols["task"][i])
            for i in range(table.num_rows)]


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

    def take(self, k: int) -> list[RLPrompt]:
        """The next ``min(k, len(prompts))`` distinct prompts."""
        k = min(k, len(self.prompts))
        out: list[int] = []
        while len(out) < k:
            if not self.order:
                self.order = list(range(len(self.prompts)))
                self.rng.shuffle(self.order)
                self.epoch += 1
            i = self.order.pop()
            if i in out:               # epoch boundary inside a step: keep it for a later step
                self.order.insert(0, i)
            else:
                out.append(i)
        return [self.prompts[i] for i in out]
