"""``genrm``: a learned judge (a GenRM checkpoint) says whether a response is at least as good as the reference.

- row (``compass gym score genrm --judge CKPT``): ``prompt``, ``response`` and
  ``reference`` -> ``verdict`` (A|B|TIE from the response's side, None when the
  judge gave none), ``malformed``, ``score`` (1 for better-or-equal, else 0) and,
  with ``--swap-check``, ``consistent``. The rows of a file are judged together
  by one loaded checkpoint (``judge_rows``), not one at a time.
- spec ``{"type": "genrm"}``: there is no offline score, so ``score`` refuses it
  (ValueError) rather than guess, and ``is_judged`` tells offline callers to skip
  it. The rules that stand in for product titles are ``title_rules``.

The judge itself is ``compass.gym.genrm_judge``; its prompt and verdict format are
``compass.gym.genrm_verdict``.
"""
from __future__ import annotations

from compass.gym.registry import Verifier, register_verifier
from compass.gym.rows import RowError, require

MAX_JUDGED_CHARS = 100_000      # longer prompts or answers are row errors, not a judge that runs out of memory
DEFAULTS = {"verdict": None, "malformed": False}


def score_spec(spec: dict, response: str, reference: str) -> float:
    raise ValueError("verifier 'genrm' is a learned judge: it needs a GenRM checkpoint "
                     "(compass gym score genrm --judge CKPT); it has no offline score")


def judge_input(row: dict) -> list[str]:
    """``[prompt, response, reference]`` of a row, or RowError naming what is missing or too long."""
    fields = [require(row, k, str) for k in ("prompt", "response", "reference")]
    if max(map(len, fields)) > MAX_JUDGED_CHARS:
        raise RowError(f"a field is too long to judge (> {MAX_JUDGED_CHARS} chars)", "response_too_long")
    return fields


def judge_rows(rows: list[dict], *, judge: str, max_new_tokens: int = 256,
               swap_check: bool = False) -> tuple[list[dict], dict]:
    """The fields each row gets (``error`` None when judged) and the judge's counters; ``judge`` is the
    checkpoint directory."""
    from compass.gym.genrm_judge import GenRMJudge
    out: list[dict | None] = [None] * len(rows)
    ready = []
    for i, row in enumerate(rows):
        try:
            ready.append((i, judge_input(row)))
        except RowError as e:
            out[i] = {**DEFAULTS, "score": 0.0, "error": str(e)}
    model = GenRMJudge.from_checkpoint(judge, max_new_tokens=max_new_tokens, swap_check=swap_check)
    verdicts = model.judge(*zip(*[fields for _, fields in ready])) if ready else []
    for (i, _), j in zip(ready, verdicts):
        out[i] = {"verdict": j.verdict, "malformed": j.malformed, "score": j.reward}
        if j.consistent is not None:
            out[i]["consistent"] = j.consistent
        out[i]["error"] = None
    return out, model.counters()


VERIFIER = register_verifier(Verifier("genrm", spec=score_spec, judge_rows=judge_rows, defaults=DEFAULTS,
                                      judged=True))
