"""IFEval's 25 instruction checks (Zhou et al. 2023), strict and loose (the ``ifeval`` verifier's rules).

Instructions come in IFEval's layout: ``instruction_id_list`` (ids such as
``length_constraints:number_words``) and ``kwargs``, one object per id.

Each rule re-implements the reference checker's semantics (google-research
``instruction_following_eval``; lm-eval carries the same code), quirks
included where they decide labels: keyword counts are case-insensitive
substring counts, ``number_bullet_lists`` wants an exact count,
``nth_paragraph_first_word`` indexes the raw ``\\n\\n`` split. Deliberate
differences: keywords, markers and section splitters are matched literally
(the reference pastes them into regexes; no IFEval kwarg has a regex
metacharacter); a missing kwarg is an error, not a random value; and a
``letter`` that is not a-z ('#', '!' in IFEval's own data) is counted as
itself where the reference swaps in a random letter. Patterns that would
backtrack over a long line are replaced by line scans with the same verdicts.
The extra ``compass:*`` rules live in ``extra``; ``RULES`` holds both.
An unknown id or kwargs that do not fit raise InstructionError (a ValueError).
"""
from __future__ import annotations

import re

from compass.gym.instructions import extra  # noqa: F401  (registers the compass:* rules into RULES)
from compass.gym.instructions.kit import (COUNT, LETTER, POSITIVE, RELATION, RULES, TEXT, TEXTS, InstructionError,
                                            compare, get_rule, rule)
from compass.gym.instructions.text import (NOT_JSON, count_capital_words, count_sentences, count_words,
                                             detect_language, json_value, langdetect_codes)

__all__ = ["IFEVAL_IDS", "MODES", "RULES", "InstructionError", "count_words", "evaluate", "followed",
           "response_variants"]

# langdetect has no Malay and no script-less Chinese: what it may answer for such a code. (The
# world's items were drawn against this rule; ``compass:response_language`` separates them.)
LANGDETECT_CODES = {"zh-TW": {"zh-tw", "zh-cn"}, "zh-tw": {"zh-tw", "zh-cn"}, "zh": {"zh-tw", "zh-cn"},
                    "zh-CN": {"zh-cn", "zh-tw"}, "ms": {"ms", "id"}}


def _known_language(kw: dict) -> None:
    if kw["language"] not in LANGDETECT_CODES and kw["language"] not in langdetect_codes():
        raise ValueError(f"language '{kw['language']}' is not a langdetect code")


def _nth_within(kw: dict) -> None:
    if kw["nth_paragraph"] > kw["num_paragraphs"]:
        raise ValueError("nth_paragraph must be <= num_paragraphs")


# -- language and case -------------------------------------------------------------------
@rule("language:response_language", _known_language, language=TEXT)
def response_language(text: str, language: str) -> bool:
    """The whole response is in ``language`` (langdetect; undetectable text passes, as in IFEval)."""
    found = detect_language(text)
    return found is None or found in LANGDETECT_CODES.get(language, {language})


@rule("change_case:english_lowercase")
def english_lowercase(text: str) -> bool:
    """English, and no capital letter."""
    return text.islower() and response_language(text, "en")


@rule("change_case:english_capital")
def english_capital(text: str) -> bool:
    """English, and no lower-case letter."""
    return text.isupper() and response_language(text, "en")


@rule("change_case:capital_word_frequency", capital_frequency=COUNT, capital_relation=RELATION)
def capital_word_frequency(text: str, capital_frequency: int, capital_relation: str) -> bool:
    """All-capital words (NLTK tokens) appear less than / at least ``capital_frequency`` times."""
    return compare(count_capital_words(text), capital_relation, capital_frequency)


# -- length ------------------------------------------------------------------------------
@rule("length_constraints:number_words", num_words=COUNT, relation=RELATION)
def number_words(text: str, num_words: int, relation: str) -> bool:
    """Words (runs of word characters) less than / at least ``num_words``."""
    return compare(count_words(text), relation, num_words)


@rule("length_constraints:number_sentences", num_sentences=COUNT, relation=RELATION)
def number_sentences(text: str, num_sentences: int, relation: str) -> bool:
    """Sentences (Punkt's cuts, see ``text.split_sentences``) less than / at least ``num_sentences``."""
    return compare(count_sentences(text), relation, num_sentences)


def _count_pieces(pieces: list[str]) -> int | None:
    """Pieces that count as paragraphs: an empty first or last piece is dropped, an empty inner one is fatal."""
    n = len(pieces)
    for i, p in enumerate(pieces):
        if not p.strip():
            if 0 < i < len(pieces) - 1:
                return None
            n -= 1
    return n


_DIVIDER = re.compile(r"\s?\*\*\*\s?")


@rule("length_constraints:number_paragraphs", num_paragraphs=POSITIVE)
def number_paragraphs(text: str, num_paragraphs: int) -> bool:
    """Exactly ``num_paragraphs`` paragraphs separated by the markdown divider ``***``."""
    return _count_pieces(_DIVIDER.split(text)) == num_paragraphs


_FIRST_WORD_STOP = set(".,?!'\"")


@rule("length_constraints:nth_paragraph_first_word", _nth_within, num_paragraphs=POSITIVE, nth_paragraph=POSITIVE,
      first_word=TEXT)
def nth_paragraph_first_word(text: str, num_paragraphs: int, nth_paragraph: int, first_word: str) -> bool:
    """Exactly ``num_paragraphs`` paragraphs split by "\\n\\n", paragraph ``nth_paragraph`` opening with ``first_word``."""
    pieces = text.split("\n\n")
    count = sum(1 for p in pieces if p.strip())
    if nth_paragraph > count:
        return False
    # IFEval indexes the raw split, empty pieces included: kept for agreement
    para = pieces[nth_paragraph - 1].strip()
    if not para:
        return False
    word = para.split()[0].strip().lstrip("'").lstrip('"')
    head = []
    for ch in word:
        if ch in _FIRST_WORD_STOP:
            break
        head.append(ch.lower())
    return count == num_paragraphs and "".join(head) == first_word.lower()


# -- keywords ----------------------------------------------------------------------------
@rule("keywords:existence", keywords=TEXTS)
def keywords_existence(text: str, keywords: list[str]) -> bool:
    """Every keyword occurs (case-insensitive, anywhere)."""
    return all(re.search(re.escape(k), text, flags=re.IGNORECASE) for k in keywords)


@rule("keywords:forbidden_words", forbidden_words=TEXTS)
def forbidden_words(text: str, forbidden_words: list[str]) -> bool:
    """No forbidden word occurs as a whole word (case-insensitive)."""
    return not any(re.search(r"\b" + re.escape(w) + r"\b", text, flags=re.IGNORECASE) for w in forbidden_words)


@rule("keywords:frequency", keyword=TEXT, frequency=COUNT, relation=RELATION)
def keyword_frequency(text: str, keyword: str, frequency: int, relation: str) -> bool:
    """``keyword`` occurs (case-insensitive substring) less than / at least ``frequency`` times."""
    n = len(re.findall(re.escape(keyword.strip()), text, flags=re.IGNORECASE))
    return compare(n, relation, frequency)


@rule("keywords:letter_frequency", letter=LETTER, let_frequency=COUNT, let_relation=RELATION)
def letter_frequency(text: str, letter: str, let_frequency: int, let_relation: str) -> bool:
    """``letter`` (either case) occurs less than / at least ``let_frequency`` times."""
    return compare(text.lower().count(letter), let_relation, let_frequency)


# -- content and format ------------------------------------------------------------------
@rule("detectable_content:number_placeholders", num_placeholders=COUNT)
def number_placeholders(text: str, num_placeholders: int) -> bool:
    """At least ``num_placeholders`` square-bracket placeholders such as [name] (within a line)."""
    n = 0
    for line in text.split("\n"):
        i = line.find("[")
        while i >= 0:
            j = line.find("]", i + 1)
            if j < 0:
                break
            n += 1
            i = line.find("[", j + 1)
    return n >= num_placeholders


@rule("detectable_content:postscript", postscript_marker=TEXT)
def postscript(text: str, postscript_marker: str) -> bool:
    """A postscript starting with the marker (P.S. / P.P.S also with a space after a dot)."""
    marker = postscript_marker.strip()
    if marker == "P.P.S":
        pattern = r"p\.\s?p\.\s?s"
    elif marker == "P.S.":
        pattern = r"p\.\s?s\."
    else:
        pattern = re.escape(marker.lower())
    return re.search(pattern, text.lower()) is not None


@rule("detectable_format:number_bullet_lists", num_bullets=COUNT)
def number_bullet_lists(text: str, num_bullets: int) -> bool:
    """Exactly ``num_bullets`` markdown bullet lines (``* `` or ``-``)."""
    return count_bullets(text) == num_bullets


def count_bullets(text: str) -> int:
    """Lines starting (after spaces) with ``*`` not followed by another ``*``, plus lines starting with ``-``.

    As IFEval's pattern ``^\\s*\\*[^\\*].*$`` does, a line that is only ``*`` takes the next line as its text.
    """
    lines = text.split("\n")
    stars = dashes = 0
    skip = False
    for i, line in enumerate(lines):
        body = line.lstrip()
        if body.startswith("-"):
            dashes += 1
        if skip:
            skip = False
            continue
        if body.startswith("*"):
            if len(body) > 1 and body[1] != "*":
                stars += 1
            elif len(body) == 1 and i + 1 < len(lines):
                stars += 1
                skip = True
    return stars + dashes


@rule("detectable_format:constrained_response")
def constrained_response(text: str) -> bool:
    """Contains one of "My answer is yes.", "My answer is no.", "My answer is maybe."."""
    return any(option in text for option in ("My answer is yes.", "My answer is no.", "My answer is maybe."))


_SINGLE_HL = re.compile(r"\*[^\n*]*\*")
_DOUBLE_HL = re.compile(r"\*\*[^\n*]*\*\*")


@rule("detectable_format:number_highlighted_sections", num_highlights=COUNT)
def number_highlighted_sections(text: str, num_highlights: int) -> bool:
    """At least ``num_highlights`` non-empty *highlighted* spans (a **double** one counts again)."""
    n = sum(1 for h in _SINGLE_HL.findall(text) if h.strip("*").strip())
    n += sum(1 for h in _DOUBLE_HL.findall(text) if h[2:-2].strip())
    return n >= num_highlights


@rule("detectable_format:multiple_sections", section_spliter=TEXT, num_sections=COUNT)
def multiple_sections(text: str, section_spliter: str, num_sections: int) -> bool:
    """At least ``num_sections`` sections, each opened by "<spliter> <number>"."""
    pattern = r"\s?" + re.escape(section_spliter.strip()) + r"\s?\d+\s?"
    return len(re.split(pattern, text)) - 1 >= num_sections


@rule("detectable_format:json_format")
def json_format(text: str) -> bool:
    """The whole response is JSON (a markdown code fence around it is allowed)."""
    return json_value(text) is not NOT_JSON


@rule("detectable_format:title")
def title(text: str) -> bool:
    """A title in double angle brackets, <<like this>>, on one line."""
    for line in text.split("\n"):
        i, j = line.find("<<"), line.rfind(">>")
        # the reference's greedy <<[^\n]+>> match on this line runs from the first << to the last >>
        if i >= 0 and j >= i + 3 and line[i:j + 2].lstrip("<").rstrip(">").strip():
            return True
    return False


# -- combinations, start and end ---------------------------------------------------------
@rule("combination:two_responses")
def two_responses(text: str) -> bool:
    """Two different responses separated by ``******``."""
    kept = []
    pieces = text.split("******")
    for i, piece in enumerate(pieces):
        if piece.strip():
            kept.append(piece.strip())
        elif 0 < i < len(pieces) - 1:
            return False
    return len(kept) == 2 and kept[0] != kept[1]


@rule("combination:repeat_prompt", prompt_to_repeat=TEXT)
def repeat_prompt(text: str, prompt_to_repeat: str) -> bool:
    """Starts by repeating ``prompt_to_repeat`` (case-insensitive)."""
    return text.strip().lower().startswith(prompt_to_repeat.strip().lower())


@rule("startend:end_checker", end_phrase=TEXT)
def end_checker(text: str, end_phrase: str) -> bool:
    """Ends with ``end_phrase`` (case-insensitive; surrounding double quotes ignored)."""
    return text.strip().strip('"').lower().endswith(end_phrase.strip().lower())


@rule("startend:quotation")
def quotation(text: str) -> bool:
    """Wrapped in double quotation marks."""
    value = text.strip()
    return len(value) > 1 and value[0] == '"' and value[-1] == '"'


@rule("punctuation:no_comma")
def no_comma(text: str) -> bool:
    """No comma (ASCII ',')."""
    return "," not in text


IFEVAL_IDS = tuple(sorted(i for i in RULES if not i.startswith("compass:")))


# -- evaluation --------------------------------------------------------------------------
MODES = ("strict", "loose")


def response_variants(response: str, mode: str = "strict") -> list[str]:
    """The texts a response is judged by: itself (strict), or IFEval's 8 loose variants.

    Loose (the paper's upper bound): the response, without its first line, without its last
    line, without both (each stripped), and those four with every ``*`` removed; an
    instruction is followed if any variant follows it.
    """
    if mode == "strict":
        return [response]
    if mode != "loose":
        raise InstructionError(f"mode must be one of {MODES}, got {mode!r}")
    lines = response.split("\n")
    base = [response, "\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(), "\n".join(lines[1:-1]).strip()]
    return list(dict.fromkeys(base + [v.replace("*", "") for v in base]))   # same verdicts, fewer checks


def evaluate(instruction_ids, kwargs_list, response: str, mode: str = "strict") -> list[bool]:
    """Per instruction: does ``response`` follow it? InstructionError when an id or its kwargs don't fit.

    ``kwargs_list`` has one dict (or None) per id; None for the whole list means no kwargs.
    All instructions are checked for fit before any text is judged.
    """
    if not isinstance(instruction_ids, (list, tuple)):
        raise InstructionError("instruction_id_list must be a list")
    if kwargs_list is None:
        kwargs_list = [None] * len(instruction_ids)
    if not isinstance(kwargs_list, (list, tuple)):
        raise InstructionError("kwargs must be a list with one object per instruction id")
    if len(kwargs_list) != len(instruction_ids):
        raise InstructionError(f"kwargs has {len(kwargs_list)} entries for {len(instruction_ids)} instruction ids")
    bound = [(r, r.bind(kw)) for r, kw in ((get_rule(i), kw) for i, kw in zip(instruction_ids, kwargs_list))]
    variants = [v for v in response_variants(response, mode) if v.strip()]   # blank text follows nothing
    return [any(r.fn(v, **kw) for v in variants) for r, kw in bound]


def followed(spec: dict, text: str) -> list[bool]:
    """Per instruction of ``spec`` (strict): does ``text`` follow it? ValueError for an unknown id or bad kwargs."""
    return evaluate(spec.get("instruction_id_list") or [], spec.get("kwargs") or None, text, spec.get("mode", "strict"))

