"""One item of a synthetic suite: what every suite generator returns."""
from __future__ import annotations

import json
from dataclasses import dataclass, field


def verifier_spec(type_: str, **kw) -> str:
    """The JSON verifier spec stored in ``prompts.verifier`` (keys sorted: byte-stable)."""
    return json.dumps({"type": type_, **kw}, sort_keys=True, ensure_ascii=False)


@dataclass
class Item:
    """A task with its reference, verifier spec and the teacher's (correct) response.

    ``difficulty`` is the generator's knob, 1 (easy) .. 5 (hard); ``extra``
    holds generator details other parts of the world reuse (never written).
    """
    id: str
    domain: str
    task: str
    language: str
    prompt: str
    reference: str
    verifier: str
    difficulty: int | None
    response: str
    extra: dict = field(default_factory=dict)

    def prompt_row(self) -> dict:
        return {"id": self.id, "domain": self.domain, "task": self.task, "language": self.language,
                "prompt": self.prompt, "reference": self.reference, "verifier": self.verifier,
                "difficulty": self.difficulty, "pass_rate": None}

    def document(self) -> str:
        """The item as pretraining text: question, worked solution and answer, one per line, without
        the chat template or the ``<think>`` tags (the SFT parents learn those)."""
        head, sep, tail = self.response.partition("</think>")
        body = f"{head.removeprefix('<think>')}\n{tail}" if sep else self.response
        return f"{self.prompt}\n{body}"

    def sft_row(self, response: str | None = None) -> dict:
        return {"id": self.id, "domain": self.domain, "task": self.task, "language": self.language,
                "prompt": self.prompt, "response": self.response if response is None else response,
                "reference": self.reference, "verifier": self.verifier}
