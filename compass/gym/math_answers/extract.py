"""The final answer a math response states, as a short string (no parsing of its value).

Order, latest statement first (a model often corrects itself, so the last word counts):

1. the last ``\\boxed{..}`` / ``\\fbox{..}`` (nested braces; ``\\boxed 5`` too); boxes written one after
   another at the end (``\\boxed{1}, \\boxed{2}``) are one answer listing them (``answer_candidates``
   also offers the last one alone);
2. the last explicit statement: "answer is X", "answer: X", "#### X", "A: X" at a line start, or the
   same in another language ("La respuesta es X", "答案是 X", "Ответ: X": ``phrases``);
   X is its math segment (``$..$``, ``\\(..\\)``, even split over lines) or the text up to the end
   of the sentence;
3. a short final text that is itself the answer (``\\frac{1}{2}``, ``(1, 2)``), or a matrix
   environment the text ends with;
4. the last ``$..$`` math segment of the text, when it holds a number or is short;
5. the last number (``-1,234.5``, ``3/4``, ``2 1/3``, ``45%``, ``1,22``, a time or ratio ``10:30``).

Only text after the last ``</think>`` counts (``compass.gym.score.final_answer``): an unclosed
think block has no answer. The word "answer" alone does not start an answer: "to find
the answer, note 5 apples ... so 12" answers 12, not 5.
"""
from __future__ import annotations

import re

from compass.gym.math_answers.parse import parse_answer
from compass.gym.math_answers.phrases import CLAUSE_END, last_marker_end
from compass.gym.score import final_answer

# Only the end of a long response is searched for numbers and markers first: the answer
# is stated last, and a 4 MB response must not cost seconds of regex.
TAIL_CHARS = 4000

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*")
# what may sit between boxes that list one answer: commas, "and", "or", math delimiters, spacing
_BOX_GAP = re.compile(r"(?:[\s,;$]|\\[,;: ]|\\quad|\\qquad|\\text\{\s*(?:and|or)\s*\}"
                      r"|\b(?:and|or|y|et|und|или|и)\b|和|、)*")
# a matrix environment ending the text ("... is\n\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}")
_END_ENV = re.compile(r"\\begin\{([a-zA-Z]*matrix|array)\}.*?\\end\{\1\}(?=[\s$.\\\]]*$)", re.S)
_MATH_SEG_RE = re.compile(r"(?<!\\)\$\$(.+?)(?<!\\)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
# (?<![A-Za-z0-9_.]), not (?<![\w.]): a number right after 是 or Ответ is still a number;
# 1.250,50 (dot-grouped thousands, decimal comma) is one number, as 1,250.50 is
_NUMBER_RE = re.compile(
    r"(?<![A-Za-z0-9_.:])\d+(?::\d+)+(?![\d:])|"      # a clock time or a ratio, 10:30, 3:4, as one answer
    r"(?<![A-Za-z0-9_.])-?\$?\s?(?:\d{1,3}(?:\.\d{3})+,\d+(?![\d,])|\d{1,3}(?:,\d{3})+(?![\d,])"
    r"|\d+,\d{1,2}(?![\d,])|\d+)(?:\.\d+)?"
    r"(?:[ \t]+\d+/\d+(?![\d/]))?"
    r"(?:\s*/\s*\d+(?:\.\d+)?)?\s*(?:\\?%)?|(?<![A-Za-z0-9_.])-?\.\d+\s*(?:\\?%)?")
_HAS_DIGIT = re.compile(r"\d")


_BRACE = re.compile(r"[{}]")
_BOX_SCAN = 8      # boxes looked at from the end: "\\boxed{" repeated unclosed must not cost O(n^2)


def _box_at(text: str, m: re.Match) -> tuple[int, str] | None:
    """(end, contents) of the box whose command ``m`` matched; None when it is unclosed."""
    i = m.end()
    if i < len(text) and text[i] == "{":
        depth = 0
        for b in _BRACE.finditer(text, i):
            depth += 1 if b.group(0) == "{" else -1
            if depth == 0:
                return b.end(), text[i + 1:b.start()].strip()
        return None
    tok = re.match(r"[^\s$]+", text[i:i + 200])   # \boxed 5
    return (i + tok.end(), tok.group(0)) if tok else None


def _boxes(text: str) -> list[tuple[int, int, str]]:
    """(start, end, contents) of the closed boxes among the last few, in order, outer boxes only."""
    if "box" not in text:
        return []
    spans = []
    for m in list(_BOX_RE.finditer(text))[-_BOX_SCAN:]:
        box = _box_at(text, m)
        if box is not None and not (spans and m.start() < spans[-1][1]):
            spans.append((m.start(), box[0], box[1]))
    return spans


def last_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` or ``\\fbox{...}``; None when there is none (or it is unclosed)."""
    spans = _boxes(text)
    return spans[-1][2] if spans else None


def boxed_run(text: str) -> list[str]:
    """The contents of the boxes that end the text one after another, separated only by commas, "and",
    delimiters or spacing (``\\boxed{1}, \\boxed{2}``): one answer listing them. A box after a sentence or a
    blank line starts a new answer (a corrected one), so only the last such run counts."""
    spans = _boxes(text)
    if not spans:
        return []
    run = [spans[-1]]
    for span in reversed(spans[:-1]):
        gap = text[span[1]:run[0][0]]
        if "\n\n" in gap.replace(" ", "") or not _BOX_GAP.fullmatch(gap):
            break
        run.insert(0, span)
    return [x[2] for x in run]


def _after_marker(rest: str) -> str | None:
    """The answer X in the text following "answer is": its math segment (even one split over lines, if it
    starts in the same sentence) or its sentence."""
    rest = rest.lstrip()
    box = last_boxed(rest[:2000]) if "box" in rest[:2000] else None
    if box is not None:
        return box
    seg = _MATH_SEG_RE.match(rest) or _MATH_SEG_RE.search(rest[:400])
    if seg is not None and (seg.start() == 0 or not CLAUSE_END.search(rest[:seg.start()])):
        return next(g for g in seg.groups() if g is not None).strip()
    end = CLAUSE_END.search(rest)
    x = (rest[:end.start()] if end else rest[:200]).strip().strip("*").strip()
    return x or None


# a model that has answered and goes on to invent the next exercise ("The answer is 1.\n\nProblem: ..."):
# the invented one's answer is not this one's
_NEXT_EXERCISE = re.compile(r"\n\s*(?:#+\s*|\*\*)?(?:Problem|Question|Exercise|Q)\s*\d*\s*(?:\*\*)?\s*[:.]", re.I)


def math_final(text: str | None) -> str:
    """The final answer text (``compass.gym.score.final_answer``) without an exercise the model invented
    after answering: cut at a "Problem:" / "Question:" heading that follows a stated answer (an "answer is"
    or a box before it), never at one the response starts with."""
    final = final_answer(text or "")
    if "\n" not in final or not ("roblem" in final or "uestion" in final or "xercise" in final
                                 or "ROBLEM" in final or "UESTION" in final or "Q" in final):
        return final
    for m in _NEXT_EXERCISE.finditer(final):
        before = final[:m.start()]
        if "box" in before and last_boxed(before) is not None or last_marker_end(before[-TAIL_CHARS:]) is not None:
            return before.rstrip()
    return final


def answer_candidates(text: str | None) -> list[str]:
    """The final answer a response states, as strings: usually one; for a run of boxes, the run read as
    one list answer, then its last box alone (the last word). Empty when it states none."""
    return final_candidates(math_final(text)) if text else []


def final_candidates(final: str) -> list[str]:
    """``answer_candidates`` of a response whose ``math_final`` text is ``final``."""
    if not final:
        return []
    run = boxed_run(final)
    if len(run) > 1:
        return ["; ".join(run), run[-1]]
    if run:
        return run
    x = _unboxed_answer(final)
    return [x] if x is not None else []


# the end of the sentence before the last one: a period or a line break that is not the text's own end
_SENTENCE_BREAK = re.compile(r"(?<!\\)[.!?。](?=\s+\S)|\n\s*\n|\n(?=\S)")
# one stated value: a plain label (x, a, x_1, x_{2}) then "=" then the value, alone in its math segment
_LABEL_EQ = re.compile(r"^\s*[A-Za-z](?:_\{?\w+\}?)?\s*=\s*[^=]+$")
_PLAIN_LABEL_EQ = re.compile(r"(?<![\w\\^_])([A-Za-z](?:_\{?\w+\}?)?)\s*=\s*(-?\d+(?:\.\d+)?(?:/\d+)?)(?![\d/])")
_LIST_JOIN = re.compile(r"[,;、和]|\b(?:and|y|e|et|und|и|as well as)\b")
# words that make a later box a correction of an earlier one, not a second item
_CONTRAST = re.compile(r"\b(?:but|however|actually|wait|instead|not|yet|rather|wrong|mistake|oops|sorry|"
                       r"correct(?:ion|ed|ing)?|re-?check|pero|mais|aber|но)\b", re.I)
_BOXED_VALUE = re.compile(r"\\(?:boxed|fbox)\s*\{([^{}]*)\}")


def _last_sentence(text: str | None) -> str:
    """The last sentence of the response's final text (its last 600 characters at most); "" when it has none."""
    final = math_final(text)[-600:].rstrip()
    breaks = [m.end() for m in _SENTENCE_BREAK.finditer(final)]
    return final[breaks[-1]:] if breaks else final


def spread_answer(text: str | None) -> str | None:
    """An answer spread over the last sentence as several stated values: "we get $a = 2$ and $b = 5$",
    "\\(x_1 = 5\\) and \\(x_2 = -2\\)", "the solutions are x = 1 or x = 3" -> ``a = 2, b = 5`` ...; or as
    several boxes ("the speed is \\boxed{12} km/h and the time is \\boxed{3} hours" -> ``12, 3``);
    None when the last sentence states fewer than two. The ``math`` verifier tries it only against a gold
    with several items, after the single final answer failed."""
    sentence = _last_sentence(text)
    if not sentence:
        return None
    values, outside, at = [], [], 0
    for m in _MATH_SEG_RE.finditer(sentence):
        outside.append(sentence[at:m.start()])
        at = m.end()
        seg = _BOXED_VALUE.sub(r"\1", next(g for g in m.groups() if g is not None)).strip()
        if _LABEL_EQ.match(seg):
            values.append((m.start(), seg))
    outside.append(sentence[at:])
    plain = " \x00 ".join(outside)           # text between math segments, never joined across one
    values += [(i, f"{m.group(1)} = {m.group(2)}") for i, m in enumerate(_PLAIN_LABEL_EQ.finditer(plain))
               if not values]
    if len(values) < 2:
        # boxes spread over the sentence: "the speed is $\boxed{12}$ km/h and the time is $\boxed{3}$ hours"
        # (joined as a list: "and" or a comma between each two, and no "but": "\boxed{1} yet \boxed{2}" and
        # "I first thought \boxed{12}, but actually it is \boxed{15}" are corrections)
        spans = _boxes(sentence)
        gaps = [sentence[a[1]:b[0]] for a, b in zip(spans, spans[1:])]
        if len(spans) >= 2 and all(_LIST_JOIN.search(g) and not _CONTRAST.search(g) for g in gaps):
            return ", ".join(c for _, _, c in spans)
    return ", ".join(v for _, v in values) if len(values) >= 2 else None


_JOIN_GAP = re.compile(r"\s*(?:,|;|\b(?:or|and)\b|\\text\{\s*(?:or|and)\s*\})?\s*", re.I)


def joined_segments(text: str | None) -> str | None:
    """The math segments that end the last sentence, joined by the "or" / "and" / commas between them:
    "so $x \\ge 3$ or $x \\le -1$." -> ``x \\ge 3 or x \\le -1``; None when fewer than two. The ``math``
    verifier tries it against a gold of several parts (a list, a union, an inequality), after the single
    final answer failed."""
    sentence = _last_sentence(text)
    segs = list(_MATH_SEG_RE.finditer(sentence))
    run = segs[-1:]
    for seg in reversed(segs[:-1]):
        if not _JOIN_GAP.fullmatch(sentence[seg.end():run[0].start()]):
            break
        run.insert(0, seg)
    if len(run) < 2:
        return None
    parts = [next(g for g in run[0].groups() if g is not None).strip()]
    for prev, seg in zip(run, run[1:]):
        parts.append(" " + sentence[prev.end():seg.start()].strip() + " ")
        parts.append(next(g for g in seg.groups() if g is not None).strip())
    return "".join(parts)


def extract_final_answer(text: str | None) -> str | None:
    """The final answer stated by a response, as a string; None when it states none."""
    found = answer_candidates(text)
    return found[0] if found else None


def _unboxed_answer(final: str) -> str | None:
    tail = final[-TAIL_CHARS:]
    marker_end = last_marker_end(tail)
    if marker_end is not None:
        x = _after_marker(tail[marker_end:])
        if x:
            if _readable(x):
                return x
            first = _NUMBER_RE.search(x)          # "answer is 12 apples and 3 pears" -> 12
            return first.group(0).strip() if first else x
    env = _END_ENV.search(tail) if "\\end" in tail[-300:] else None
    if env is not None:
        return env.group(0)
    short = final.strip().rstrip(".")
    if len(short) <= 60 and "\n" not in short and not re.search(r"[a-zA-Z]{3,}\s+[a-zA-Z]{3,}", short):
        segs = _MATH_SEG_RE.findall(short)
        cand = next((g for g in segs[-1] if g), short).strip() if segs else short.strip()
        if _readable(cand):
            return cand
    segs = list(_MATH_SEG_RE.finditer(tail))
    if segs:
        seg = next(g for g in segs[-1].groups() if g is not None).strip()
        after = tail[segs[-1].end():]
        if not _HAS_DIGIT.search(after) and (_HAS_DIGIT.search(seg) or len(seg) <= 40):
            return seg
    nums = _NUMBER_RE.findall(tail) or (_NUMBER_RE.findall(final) if len(final) > TAIL_CHARS else [])
    return nums[-1].strip() if nums else None


def _readable(x: str) -> bool:
    """Whether ``x`` reads as an answer (mathematics, text, or a malformed number that equals nothing)."""
    a = parse_answer(x)
    return a.tree is not None or a.invalid


def gold_answer(gold: str) -> str:
    """A reference answer as given: its box (or run of boxes) if boxed, the part after ``####`` in GSM8K
    style, else itself."""
    run = boxed_run(gold) if "box" in gold else []
    if run:
        return "; ".join(run)
    if "####" in gold:
        return gold.rsplit("####", 1)[1].strip()
    return gold.strip()
