"""``compass gym score ifeval``: instruction following, one row at a time (the rows contract of ``rows.py``).

Input fields, in IFEval's layout::

    {"response": "...", "instruction_id_list": ["punctuation:no_comma", "keywords:frequency"],
     "kwargs": [{}, {"keyword": "tea", "frequency": 2, "relation": "at least"}], "mode": "strict"}

``kwargs`` holds one object per id (null keys mean "not given"; the whole
field may be left out when no id takes kwargs); ``mode`` is ``strict``
(default) or ``loose`` (IFEval's upper bound: the response also passes if it
passes without its first and/or last line or without ``*``). Added fields:
``follow_instruction_list`` (one bool per id), ``follow_all`` and ``score``,
the fraction of instructions followed. A ``<think>…</think>`` block is
dropped first (an unclosed one leaves nothing to judge). Ids are IFEval's 25 and the
``compass:*`` ones (``ifeval_rules``, ``ifeval_extra``); an unknown id,
kwargs that do not fit their id, or lists of different lengths make the row
unscorable (``error``, score 0).
"""
from __future__ import annotations

from stages.gym.ifeval_kit import InstructionError
from stages.gym.ifeval_rules import MODES, evaluate
from stages.gym.provisional import THINK_CLOSE, THINK_OPEN, final_answer
from stages.gym.rows import RowError, register_scorer, require, response_of


@register_scorer("ifeval", defaults={"follow_instruction_list": [], "follow_all": False})
def score_ifeval_row(row: dict) -> dict:
    response = response_of(row)
    if THINK_OPEN in response or THINK_CLOSE in response:
        response = final_answer(response)     # judge the answer, not the thought (as the spec verifier does)
    ids = require(row, "instruction_id_list", list)
    if not ids:
        raise RowError("instruction_id_list is empty")
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
