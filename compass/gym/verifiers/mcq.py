"""``mcq``: the option the final answer names is the gold one (multilingual keywords, paper §2.5.3, item 1).

- spec ``{"type": "mcq", "options": "ABCDE"}`` (default ``ABCD``), or ``options``
  as the option texts (a list labelled A, B, C..., or label -> text), the reference is
  the gold letter: 1 when the final answer names it. With the texts an answer that
  names its option by text ("Livros", not "D") is read too; with letters alone it
  cannot be, and scores ``no_answer``;
- row (``compass gym score mcq``): ``response``, ``options`` (label -> option text,
  or a list labelled A, B, C...), ``gold`` (a label) and an optional ``lang`` ->
  ``predicted`` (the option label the answer names, or None), ``correct`` and
  ``score`` (1.0 / 0.0). ``lang`` is informational (every language's cues are
  always on), so an unknown one is accepted; a non-string one is a RowError.

How an answer is read: ``compass.gym.mcq_choice.extract``.
"""
from __future__ import annotations

from compass.gym.mcq_choice.extract import normalize_options, predict, read_choice, resolve_label
from compass.gym.registry import Verifier, register_verifier
from compass.gym.rows import RowError, require, response_of
from compass.gym.score import Reward, final_answer


def score_spec(spec: dict, response: str, reference: str) -> Reward | float:
    options = spec.get("options", "ABCD")
    if isinstance(options, str):
        options = options.upper()
    try:
        keys, _ = normalize_options(options)
    except ValueError:
        return Reward(0.0, "bad_spec")
    ref = (reference or "").strip().strip('"').strip().upper()
    if len(ref) != 1 or ref not in keys:
        return Reward(0.0, "bad_gold")
    choice = predict(response, options)
    if choice is None:
        return Reward(0.0, "no_answer")
    return 1.0 if choice == ref else 0.0


def score_row(row: dict) -> dict:
    response = response_of(row)
    options = require(row, "options", (dict, list))
    gold = require(row, "gold", str)
    lang = row.get("lang")
    if lang is not None and not isinstance(lang, str):
        raise RowError(f"field 'lang' must be str, got {type(lang).__name__}")
    try:
        keys, texts = normalize_options(options)
    except ValueError as e:
        raise RowError(f"bad options: {e}", "bad_field") from None
    gold_key = resolve_label(gold.strip().strip("()."), options)
    if gold_key is None:
        raise RowError(f"gold '{gold}' is not among the options ({', '.join(keys)})", "bad_gold")
    i = read_choice(final_answer(response), keys, texts)
    predicted = None if i is None else keys[i]
    correct = predicted == gold_key
    return {"predicted": predicted, "correct": correct, "score": 1.0 if correct else 0.0}


VERIFIER = register_verifier(Verifier("mcq", spec=score_spec, row=score_row,
                                      defaults={"predicted": None, "correct": False}))
