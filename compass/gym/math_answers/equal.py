"""Does a response's final answer equal the reference answer? The ``math`` verifier's decision.

Public API::

    math_equal(response, gold, timeout_s=2.0) -> bool
    judge_math(response, gold, timeout_s=2.0) -> Verdict(equal, reason, answer)
        # reason: no_answer / bad_gold / unparsed_final_statement (then answer is that statement)
    extract_final_answer(text) -> str | None
    answers_equal(answer, gold, timeout_s=2.0) -> bool     # two bare answers, no extraction

Pipeline: ``extract`` picks the final answer (last box, else last "answer is X" /
"#### X" in any of several languages, else the last number); ``parse`` normalises LaTeX and
parses both answers into small trees (cached); ``compare`` decides with Fractions, then numeric
evaluation, then sympy in a killable worker (``sympy_worker``) under ``timeout_s``. Where a comma
could be a decimal comma (``1,22``), ``numerals`` gives the other reading, chosen by the gold's form.

Percent: a response "28%" means 0.28; a reference "10\\%" accepts 10 or 0.1 (MATH
answers a "what percent" question with the number; math-verify reads % as /100).
"""
from __future__ import annotations

from typing import NamedTuple

from compass.gym.math_answers.compare import Comparer
from compass.gym.math_answers.extract import (extract_final_answer, final_candidates, gold_answer, joined_segments,
                                              math_final, spread_answer)
from compass.gym.math_answers.numerals import comma_readings, writes_english
from compass.gym.math_answers.parse import parse_answer, text_key
from compass.gym.math_answers.times import clock_time, same_time

__all__ = ["math_equal", "judge_math", "answers_equal", "extract_final_answer", "Verdict"]

DEFAULT_TIMEOUT_S = 2.0
_SEVERAL = ("list", "seq", "set")      # parse-tree kinds whose last element holds their items


UNPARSED = "unparsed_final_statement"


class Verdict(NamedTuple):
    equal: bool
    reason: str | None = None      # "no_answer" (the response states none), "bad_gold" (unreadable gold),
    #                                "unparsed_final_statement" (what it states could not be read)
    answer: str | None = None      # with "unparsed_final_statement": the statement that could not be read


def _bare_equal(answer: str, gold_text: str, comparer: Comparer, english: bool = False) -> bool:
    """Two bare answers, the gold already unwrapped: the English reading, then the decimal-comma ones
    (``english``: the response is written in English, so its ``1,500`` is fifteen hundred)."""
    if comparer.answers(parse_answer(gold_text), parse_answer(answer)):
        return True
    return any(comparer.answers(parse_answer(g), parse_answer(a))
               for g, a in comma_readings(gold_text, answer, english))


def answers_equal(answer: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S, symbolic: bool = True) -> bool:
    """Whether two bare final answers are mathematically equal (``answer`` is read as the response's)."""
    return _bare_equal(answer, gold_answer(gold), Comparer(timeout_s, symbolic))


def unreadable_gold(gold_text: str) -> bool:
    """A reference that equals nothing: empty, an unclosed box, or a malformed number (``11 6/6``)."""
    return _empty_or_unclosed(gold_text) or parse_answer(gold_text).invalid


def _empty_or_unclosed(gold_text: str) -> bool:
    return not gold_text.strip() or ("\\boxed" in gold_text and gold_text.count("{") != gold_text.count("}"))


def judge_math(response: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S, symbolic: bool = True) -> Verdict:
    """Whether the final answer of ``response`` equals the reference ``gold``, and why not when it is not
    for want of an answer or of a readable gold."""
    if not isinstance(response, str) or not isinstance(gold, str):
        return Verdict(False, "bad_gold" if not isinstance(gold, str) else "no_answer")
    gold = gold_answer(gold)
    if _empty_or_unclosed(gold):
        return Verdict(False, "bad_gold")
    final = math_final(response)
    if final and len(final) <= 2 * len(gold) + 20 and text_key(final) == text_key(gold):
        return Verdict(True)               # the reference copied verbatim, even where it is prose
    if parse_answer(gold).invalid:         # parsed after the verbatim check: most pairs never need it
        return Verdict(False, "bad_gold")
    candidates = final_candidates(final)
    if not candidates:
        return Verdict(False, "no_answer")
    comparer = Comparer(timeout_s, symbolic)
    candidates += [m for m in map(_last_member, candidates) if m is not None]
    # English prose or not matters only for a comma the English reading could not settle: asked lazily
    english = any("," in c for c in candidates) and writes_english(final)
    if ":" in "".join(candidates):                 # "ends at 3:15" is a time of day, not 3/15
        clocks = [clock_time(c, final) for c in candidates]
        if any(t is not None and same_time(t, gold) for t in clocks):
            return Verdict(True)
        candidates = [c for c, t in zip(candidates, clocks) if t is None]
    if any(_bare_equal(c, gold, comparer, english) for c in candidates):
        return Verdict(True)
    tree = parse_answer(gold).tree
    if tree is not None and tree[0] in _SEVERAL and len(tree[-1]) >= 2:
        # a gold of several items may be stated one value at a time: "we get $a = 2$ and $b = 5$"
        spread = spread_answer(response)
        if spread is not None and _bare_equal(spread, gold, comparer, english):
            return Verdict(True)
    if tree is not None and (tree[0] in _SEVERAL and len(tree[-1]) >= 2 or tree[0] in ("union", "rel")):
        # or in several math segments: "so $x \ge 3$ or $x \le -1$" against a union
        joined = joined_segments(response)
        if joined is not None and _bare_equal(joined, gold, comparer, english):
            return Verdict(True)
    if candidates and all(_unreadable(c) for c in candidates):
        # nothing the response states could be read: the zero may be the verifier's miss, not the model's
        return Verdict(False, UNPARSED, candidates[0])
    return Verdict(False)


def _unreadable(answer: str) -> bool:
    a = parse_answer(answer)
    return a.tree is None and not a.invalid


def _last_member(answer: str) -> str | None:
    """The last member of a chain the parser cannot read whole (``S = \\sum_{k=1}^{10}(2k-1) = 10^2 = 100``
    -> ``100``): the value a worked line ends on counts, as it does for chains that parse."""
    if "=" not in answer or parse_answer(answer).tree is not None:
        return None
    depth, cut = 0, -1
    for i, c in enumerate(answer):
        if c in "{([":
            depth += 1
        elif c in "})]":
            depth -= 1
        elif c == "=" and depth == 0 and answer[i - 1:i] not in ("<", ">", "!", "\\"):
            cut = i
    tail = answer[cut + 1:].strip() if cut >= 0 else ""
    return tail or None


def math_equal(response: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S, symbolic: bool = True) -> bool:
    """Whether the final answer of ``response`` equals the reference answer ``gold``."""
    return judge_math(response, gold, timeout_s, symbolic).equal
