"""``ifeval``: the share of instructions (IFEval's 25 and the ``compass:*`` ones) a response follows.

Spec, in IFEval's layout (the reference is not needed)::

    {"type": "ifeval", "instruction_id_list": ["length_constraints:number_words", ...],
     "kwargs": [{"num_words": 8, "relation": "at least"}, ...]}

scores the fraction of instructions the final answer follows (an empty final
answer follows none); an unknown id or kwargs that do not fit are a bad spec
(ValueError).

Row (``compass gym score ifeval``), in the same layout::

    {"response": "...", "instruction_id_list": ["punctuation:no_comma", "keywords:frequency"],
     "kwargs": [{}, {"keyword": "tea", "frequency": 2, "relation": "at least"}], "mode": "strict"}

``kwargs`` holds one object per id (null keys mean "not given"; the whole
field may be left out when no id takes kwargs); ``mode`` is ``strict``
(default) or ``loose`` (IFEval's upper bound: the response also passes if it
passes without its first and/or last line or without ``*``). Added fields:
``follow_instruction_list`` (one bool per id), ``follow_all`` and ``score``,
the fraction of instructions followed. A ``<think>…</think>`` block is
dropped first (an unclosed one leaves nothing to judge). The rules are
``compass.gym.instructions``; an unknown id,
kwargs that do not fit their id, or lists of different lengths make the row
unscorable (``error``, score 0).
"""
from __future__ import annotations

from compass.gym.instructions.ifeval import MODES, evaluate, followed
from compass.gym.instructions.kit import InstructionError
from compass.gym.registry import Verifier, register_verifier
from compass.gym.rows import RowError, require, response_of
from compass.gym.score import THINK_CLOSE, THINK_OPEN, Reward, final_answer


def score_spec(spec: dict, response: str, reference: str) -> Reward | float:
    text = final_answer(response)
    ids = spec.get("instruction_id_list") or []
    if not ids:
        return Reward(0.0, "bad_spec")
    if not text:
        return Reward(0.0, "no_answer")
    verdicts = followed(spec, text)
    return sum(verdicts) / len(verdicts)


def score_row(row: dict) -> dict:
    response = response_of(row)
    if THINK_OPEN in response or THINK_CLOSE in response:
        response = final_answer(response)     # judge the answer, not the thought (as the spec verifier does)
    ids = require(row, "instruction_id_list", list)
    if not ids:
        raise RowError("instruction_id_list is empty", "missing_field")
    kwargs = row.get("kwargs")
    if kwargs is not None and not isinstance(kwargs, list):
        raise RowError(f"field 'kwargs' must be list, got {type(kwargs).__name__}")
    mode = row.get("mode") or "strict"
    if mode not in MODES:
        raise RowError(f"field 'mode' must be one of {list(MODES)}, got {mode!r}")
    try:
        verdicts = evaluate(ids, kwargs, response, mode)
    except InstructionError as e:
        raise RowError(str(e)) from None
    return {"follow_instruction_list": verdicts, "follow_all": all(verdicts), "score": sum(verdicts) / len(verdicts)}


VERIFIER = register_verifier(Verifier("ifeval", spec=score_spec, row=score_row,
                                      defaults={"follow_instruction_list": [], "follow_all": False},
                                      needs_reference=False))
