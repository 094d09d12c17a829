"""The gym's scoring entry point: ``score(verifier, response, reference) -> float`` in [0, 1].

``verifier`` is the JSON spec stored in ``prompts.verifier``, ``{"type": NAME, ...}``;
``NAME`` is a verifier of the one registry (``compass.gym.registry``), one module
per verifier under ``compass/gym/verifiers/``, and ``score`` calls its spec form.
The row form, for ``compass gym score``, is ``compass.gym.rows``.

The final answer is the text after the last ``</think>``, up to the response's first
end-of-turn marker (``<|im_end|>``, ``<|eot_id|>``, ``</s>``, a "Human:" turn ...): what a
model writes past its turn is not its answer. A response with no
``</think>`` is its own final answer, unless it opened a ``<think>`` that it
never closed: an unfinished thought has no answer (scores 0), so a truncated
trace cannot earn reward from numbers inside its reasoning.
"""
from __future__ import annotations

import json
import re
from typing import NamedTuple

from compass.gym.registry import load_all

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


# Where a model's turn ends: the end-of-turn tokens of the common chat formats (ChatML, Llama 3, Gemma,
# DeepSeek, GPT-2's end of text, SentencePiece's </s>) and a next turn's start. A model that runs past its
# turn writes the next one ("<|im_end|>\n<|im_start|>user\nNext question ..."); that text is not its
# answer, and its numbers must not be read as one.
END_OF_TURN = re.compile(r"<\|im_end\|>|<\|im_start\|>|<\|eot_id\|>|<\|endoftext\|>|<\|end_of_text\|>|</s>"
                         r"|<end_of_turn>|<start_of_turn>|<\uff5cend\u2581of\u2581sentence\uff5c>"
                         r"|\n\s*(?:Human|User|USER):[ \t]")


def end_of_turn(response: str) -> str:
    """The response up to its first end-of-turn marker (all of it when there is none)."""
    # a substring every marker holds, tested first: these scans decide most responses without the regex
    if ("<|" in response or "</s>" in response or "_of_turn>" in response or "\uff5cend" in response
            or "Human:" in response or "User:" in response or "USER:" in response):
        m = END_OF_TURN.search(response)
        if m is not None:
            return response[:m.start()]
    return response


def final_answer(response: str) -> str:
    """The text after the last ``</think>`` (stripped) of the response up to its end of turn
    (``end_of_turn``); the whole text when no thinking was opened; "" when a ``<think>`` was opened
    and never closed."""
    if response is None:
        return ""
    response = end_of_turn(response)
    if THINK_CLOSE in response:
        return response.rsplit(THINK_CLOSE, 1)[1].strip()
    if THINK_OPEN in response:
        return ""
    return response.strip()


def parse_verifier(verifier: str | dict) -> dict:
    """The verifier spec as a dict with a known ``type``; ValueError otherwise."""
    if isinstance(verifier, dict):
        spec = verifier
    else:
        try:
            spec = json.loads(verifier)
        except (TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"verifier spec is not valid JSON: {verifier!r} ({e})") from None
    if not isinstance(spec, dict) or "type" not in spec:
        raise ValueError(f"verifier spec must be a JSON object with a 'type': {verifier!r}")
    known = load_all()
    if spec["type"] not in known:
        raise ValueError(f"unknown verifier type '{spec['type']}' (known: {', '.join(sorted(known))})")
    return spec


def _resolve(verifier: str | dict):
    """(spec, its registered Verifier); parse_verifier has already checked the type is known."""
    spec = parse_verifier(verifier)
    return spec, load_all()[spec["type"]]


def needs_reference(verifier: str | dict) -> bool:
    """Whether a response can only be judged against a reference answer (False: the spec suffices)."""
    return _resolve(verifier)[1].needs_reference


def is_judged(verifier: str | dict) -> bool:
    """Whether the verifier is open-ended, scored for real only by a learned judge (GenRM): no offline score."""
    return _resolve(verifier)[1].judged


def needs_judge(verifier: str | dict) -> bool:
    """Whether the verifier is the learned judge itself (``genrm``): it scores only with a loaded checkpoint."""
    return _resolve(verifier)[1].needs_judge


class Reward(NamedTuple):
    """A spec form's answer: the score and, when the verifier knows one, why it is low (``compass.gym.reasons``).

    A spec form returns a plain float or a ``Reward``; ``judge`` always gives a ``Reward``."""
    score: float
    reason: str | None = None


def judge(verifier: str | dict, response: str, reference: str) -> Reward:
    """``Reward(score, reason)`` of ``response`` against ``reference`` under ``verifier``; a bad spec is
    ValueError (the caller counts it as ``bad_spec``)."""
    spec, v = _resolve(verifier)
    out = v.spec(spec, response or "", reference or "")
    return Reward(float(out.score), out.reason) if isinstance(out, Reward) else Reward(float(out))


def score(verifier: str | dict, response: str, reference: str) -> float:
    """Reward in [0, 1] of ``response`` against ``reference`` under ``verifier``."""
    return judge(verifier, response, reference).score
