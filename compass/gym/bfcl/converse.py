"""Hold BFCL multi-turn conversations with a model, for evaluation: the response ``bfcl_multi_turn`` scores.

Per row, turn by turn: the model sees the tools (the public methods of the row's classes, described
from their signatures and docstrings in the sandbox), the conversation so far and the next user
message; each reply's ``<tool_call>`` blocks run on the classes (every call of the conversation
replayed from the starting state in the sandbox, so state carries across turns) and their results are
shown back, until a reply makes no call or ``max_steps`` replies were made in the turn; then the next
user message. All conversations advance together, one batch of replies per step.

The conversation is written as one user message (the chat template of the model wraps it), with
``User:``, ``Assistant:`` and ``Tool results:`` lines: a plain layout any checkpoint's template accepts.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

from compass.gym.bfcl.calls import response_calls
from compass.gym.bfcl.harness import BFCL_PACKAGE, describe_classes, replay_turns, resolve
from compass.gym.rows import RowError

MAX_STEPS = 4           # replies per user turn (BFCL allows 20; a model that loops this long has failed anyway)
RESULT_CHARS = 2000     # each tool result shown back is cut here, so one listing cannot fill the context

# (prompts) -> one completion dict {"text", "ids"} per prompt
Generate = Callable[[list[str]], list[dict]]


def user_turns(reference: dict) -> list[str]:
    """The user's message of each turn (BFCL: a list of messages per turn; user ones joined)."""
    turns = reference.get("turns")
    if not isinstance(turns, list) or not turns:
        raise RowError("the reference has no 'turns' (the conversation's user messages)", "bad_gold")
    out = []
    for t in turns:
        msgs = t if isinstance(t, list) else [t]
        out.append("\n".join(m.get("content", "") if isinstance(m, dict) else str(m) for m in msgs
                             if not isinstance(m, dict) or m.get("role", "user") == "user"))
    return out


@dataclass
class Conversation:
    spec: dict
    reference: dict
    tools: list[dict]
    users: list[str]
    replies: list[list[str]] = field(default_factory=list)      # per turn, the model's replies
    calls: list[list[tuple]] = field(default_factory=list)      # per turn, the model's calls
    shown: list[list[str]] = field(default_factory=list)        # per turn, per reply, the results shown
    ids: list[int] = field(default_factory=list)
    last_ids: list[int] = field(default_factory=list)
    steps: int = 0                      # replies so far in the current turn (0: the next turn starts)
    finished: bool = False
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.finished or self.error is not None

    def prompt(self) -> str:
        lines = ["You can call these tools. To call one, write "
                 '<tool_call>{"name": ..., "arguments": {...}}</tool_call>; write no call when you are done.',
                 "Tools:", json.dumps(self.tools)]
        seen = len(self.replies) + (self.steps == 0)      # the turns begun, with the one about to begin
        for t, user in enumerate(self.users[:seen]):
            lines.append(f"User: {user}")
            for r, reply in enumerate(self.replies[t] if t < len(self.replies) else []):
                lines.append(f"Assistant: {reply}")
                if r < len(self.shown[t]) and self.shown[t][r]:
                    lines.append(f"Tool results: {self.shown[t][r]}")
        return "\n".join(lines) + "\nAssistant:"


def start(row: dict) -> Conversation:
    """A conversation for a ``bfcl_multi_turn`` row (its spec names the classes; the reference the turns)."""
    spec = json.loads(row["verifier"]) if isinstance(row["verifier"], str) else dict(row["verifier"])
    reference = json.loads(row["reference"]) if isinstance(row["reference"], str) else dict(row["reference"])
    conv = Conversation(spec, reference, [], [])
    try:
        conv.users = user_turns(reference)
        conv.tools = describe_classes(resolve(spec.get("classes_dir", "")), spec.get("package", BFCL_PACKAGE),
                                      list(reference.get("involved_classes") or []))
    except RowError as e:
        conv.error = e.reason
    return conv


def _after_reply(conv: Conversation, text: str, ids: list[int], max_steps: int) -> None:
    if conv.steps == 0:                              # the first reply of a new user turn
        conv.replies.append([])
        conv.calls.append([])
        conv.shown.append([])
    t = len(conv.replies) - 1
    conv.replies[t].append(text)
    conv.ids += ids
    conv.last_ids = ids
    calls = response_calls(text)
    conv.steps += 1
    conv.shown[t].append("")
    if calls:
        conv.calls[t] += calls
        try:
            results = replay_turns(resolve(conv.spec.get("classes_dir", "")), conv.spec.get("package", BFCL_PACKAGE),
                                   list(conv.reference.get("involved_classes") or []),
                                   conv.reference.get("initial_config") or {}, conv.calls,
                                   bool(conv.spec.get("long_context", False)), 60.0)
            conv.shown[t][-1] = json.dumps([r[:RESULT_CHARS] for r in results[t][-len(calls):]])
        except RowError as e:
            conv.error = e.reason
            return
    if not calls or conv.steps >= max_steps:
        conv.steps = 0
        conv.finished = len(conv.replies) == len(conv.users)


def converse(generate: Generate, rows: list[dict], *, max_steps: int = MAX_STEPS) -> list[dict]:
    """One completion per row: ``{"text": JSON list of each turn's replies, "ids": every generated token,
    "last_ids": the last reply's tokens, "error": a reason code or None}``."""
    convs = [start(r) for r in rows]
    while True:
        active = [c for c in convs if not c.done]
        if not active:
            break
        outs = generate([c.prompt() for c in active])
        for c, out in zip(active, outs):
            _after_reply(c, out["text"], list(out["ids"]), max_steps)
    return [{"text": json.dumps(c.replies), "ids": c.ids, "last_ids": c.last_ids, "error": c.error}
            for c in convs]
