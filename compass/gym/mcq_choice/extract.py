"""Which option a multiple-choice answer names: the reading of the ``mcq`` verifier (paper §2.5.3, item 1).

``extract_choice(text, options)`` returns the label of the option ``text``
names, or None; ``options`` is label -> option text, a list labelled A, B,
C..., or a string of letters (as the ``mcq`` spec has it).

An answer names an option by its label (``B``, ``(B)``, ``[B]``, ``（Ｂ）``,
Thai ``ข``, Chinese ``乙``: labels are aliases by position) or by its text.
The final answer (text after ``</think>``) is read in tiers, the first that
finds anything decides:

1. commitments: "the answer is B" in any of en, zh-TW, id, vi, th, pt, ms
   (keyword tables in ``compass.gym.mcq_choice.keywords``), "B is correct",
   ``\\boxed{B}``, a response ending in "Alternativa B" or a line holding only
   a label, "... é a C." at a sentence end. The LAST one wins, so reasoning
   that walks past wrong options before committing is read right; when the
   last one lists several labels ("A or B", "Resposta: A, C e E") there is no
   single answer: None;
2. the response opens with a label: ``B``, ``B. Shoes``, ``C) Toys``;
3. option text: exactly one option's text appears (case, spacing, Latin
   diacritics ignored; a longer option's text hides the shorter one inside
   it), else the one the final sentence names (not when that sentence is an
   item of a bulleted list). Numbers and one-character texts ("48", "脾")
   count only as the whole answer: they occur in any calculation or word;
4. a bracketed label somewhere ("I pick (B) here"); two different: None.

``lang`` does not select the tables: every language's cues are always on,
because models switch language ("Answer: B" after Thai reasoning) and a union
of cues costs nothing in precision here. Responses longer than
``_WINDOW`` characters are read at their head and tail only (an answer sits
at one end), which keeps a multi-megabyte response in milliseconds.
"""
from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from compass.gym.mcq_choice import keywords as kw
from compass.gym.score import final_answer

_WINDOW = 20_000
_THAI = "\u0e00-\u0e7f"
_CJK = "\u3400-\u9fff\uf900-\ufaff"


# -- normalisation ------------------------------------------------------------------------
def _build_fold() -> dict[int, str]:
    """Latin letters with diacritics -> the bare letter, one char for one char (positions survive)."""
    table: dict[int, str] = {}
    for cp in list(range(0xC0, 0x250)) + list(range(0x1E00, 0x1F00)):
        base = unicodedata.normalize("NFD", chr(cp))[0]
        if base != chr(cp) and base.isascii() and base.isalpha():
            table[cp] = base
    table.update({ord("đ"): "d", ord("Đ"): "D", ord("ø"): "o", ord("Ø"): "O"})
    return table


_FOLD = _build_fold()
# Markdown emphasis and code marks only decorate the answer ("**B**"); blank them, keeping positions.
_BLANK = {ord(c): " " for c in "*`#"}


def _prepare(text: str) -> str:
    """NFKC (full-width "（Ｂ）" reads "(B)", Thai "ำ" as the tables write it) without markdown marks."""
    t = unicodedata.normalize("NFKC", text).translate(_BLANK).strip()
    if len(t) > 2 * _WINDOW:
        t = t[:_WINDOW // 4] + "\n" + t[-_WINDOW:]
    return t


def fold(text: str) -> str:
    """``text`` without Latin diacritics, same length: "Đáp án" -> "Dap an"."""
    return text.translate(_FOLD)


# -- keyword patterns ---------------------------------------------------------------------
def _latin(c: str) -> bool:
    return fold(c).isascii() and fold(c).isalpha()


def _word(w: str) -> str:
    """One keyword as a regex: spaces flexible; a Latin word cannot start or end inside another word."""
    w = unicodedata.normalize("NFKC", w)
    body = r"\s+".join(re.escape(part) for part in w.split())
    if _latin(w[0]):
        body = r"(?<![^\W\d_])" + body
    if _latin(w[-1]):
        body += r"(?![^\W\d_])"
    return body


def _words(words, with_folded: bool = True) -> str:
    """Alternation of ``words`` (and their diacritic-free spellings), longest first, case-insensitive."""
    forms = set(words)
    if with_folded:
        forms |= {fold(w) for w in words}
    return "(?i:" + "|".join(_word(w) for w in sorted(forms, key=len, reverse=True)) + ")"


_ANSWER = _words(kw.union(kw.ANSWER))
_CORRECT = _words(kw.union(kw.CORRECT))
_COPULA = _words(kw.union(kw.COPULA))
_COPULA_EXACT = _words(tuple(w for w in kw.union(kw.COPULA) if w not in ("=",)), with_folded=False)
_OPTION = _words(kw.union(kw.OPTION))
_ARTICLE = _words(kw.ARTICLE)
_OR = "(?:" + _words(kw.union(kw.OR)) + "|" + "|".join(re.escape(s) for s in kw.OR_SYMBOLS) + ")"

# "the (correct) answer", "correct option", "alternativa correta", then ":" / "is" / "é a letra";
# "the answer to this question is", "a alternativa que melhor se encaixa é a": a short gap, then "is".
_HEAD = (rf"(?:(?:{_CORRECT}\s*)?{_ANSWER}(?:\s*{_CORRECT})?|{_CORRECT}\s*{_OPTION}|{_OPTION}\s*{_CORRECT})"
         rf"(?:[^.\n。:!?]{{0,30}}?{_COPULA})?|{_OPTION}[^.\n。:;!?]{{0,60}}?{_COPULA}")
_CUE = (rf"(?:{_HEAD})\s*[:\-–—=]?\s*(?:{_COPULA}\s*)?[:\-–—=]?\s*"
        rf"(?:(?:{_ARTICLE}|{_OPTION})\s*){{0,3}}")
_TERM = r"(?=\s*(?:$|[.,;:!?。，、)\]\n]))"        # a label that ends its phrase
_OPEN, _CLOSE = r"[\(\[【「]", r"[\)\]】」]"


class _Labels:
    """Regexes for one set of option labels; a label matches by its key or any positional alias."""

    def __init__(self, keys: tuple[str, ...]):
        n = len(keys)
        self.keys = keys
        self.alias: dict[str, int] = {}
        for i in range(n):
            for table in (kw.LATIN_LABELS, kw.THAI_LABELS, kw.STEM_LABELS):
                if i < len(table):
                    self.alias.setdefault(table[i], i)
        for i, k in enumerate(keys):     # the row's own keys win over aliases
            self.alias[k] = i
            self.alias.setdefault(k.upper(), i)
        latin = "".join(c for c in kw.LATIN_LABELS[:n])
        alts = [rf"(?<![A-Za-z0-9])[{latin}](?![A-Za-z0-9])",
                rf"(?<![{_THAI}])[{kw.THAI_LABELS[:n]}](?![{_THAI}])",
                rf"(?<![{_CJK}])[{kw.STEM_LABELS[:n]}](?![{_CJK}])"]
        known = latin + latin.lower() + kw.THAI_LABELS[:n] + kw.STEM_LABELS[:n]
        odd = [k for k in keys if not (len(k) == 1 and k in known)]   # "1", "opt2": matched as words
        alts += [rf"(?<!\w){re.escape(k)}(?!\w)" for k in odd]
        strict = "(?:" + "|".join(alts) + ")"
        loose = rf"(?:{strict}|(?<![A-Za-z0-9])[{latin.lower()}]{_TERM})"   # "answer: b", not "is a dog"
        # After a cue a Thai or Chinese label may touch the cue ("คำตอบคือข", "答案是乙"): no lookbehind.
        cued = (rf"(?:[{latin}](?![A-Za-z0-9])|[{kw.THAI_LABELS[:n]}](?![{_THAI}])|"
                rf"[{kw.STEM_LABELS[:n]}](?![{_CJK}])|{loose})")
        one = rf"(?:{_OPEN}\s*{cued}\s*{_CLOSE}|{cued})"
        self.label = re.compile(cued)
        # a list item ends its phrase or leads to the next one: "A, C e E." is a list, "B and C is wrong" is B
        more = rf"(?=\s*(?:$|[.,;:!?。，、)\]\n]|{_OR}))"
        listed = rf"{one}(?:\s*{_OR}\s*(?:(?:{_ARTICLE}|{_OPTION})\s*){{0,2}}{one}{more})*"
        self.more = re.compile(rf"\s*{_OR}\s*{one}")
        self.commit = [
            re.compile(rf"{_CUE}(?P<labels>{listed})"),
            # "B is correct", "C là đáp án đúng", "alternativa C. é a CORRETA", "ข้อ ข ถูกต้อง"
            re.compile(rf"(?P<labels>{_OPEN}?{strict}{_CLOSE}?)\s*[.:]?\s*(?:{_OPTION}\s*)?(?:{_COPULA}\s*)?"
                       rf"(?:{_ARTICLE}\s*)?"
                       rf"(?:(?:{_CORRECT}\s*)?{_ANSWER}|{_CORRECT})(?!\s*{_ANSWER})"),
            re.compile(rf"\\boxed\{{\s*(?:\\text\{{)?\s*(?P<labels>{listed})\s*\}}"),
            re.compile(rf"<answer>\s*(?P<labels>{listed})\s*</answer>"),
            # the response ends with "Alternativa B" or a line that is only a label
            re.compile(rf"(?:{_OPTION}\s*|\n\s*)(?P<labels>{one})\s*[.。!)]*\s*$"),
            # "... é a C." / "is B." at a sentence end (exact spellings: folded "é" would be "e", "and")
            re.compile(rf"{_COPULA_EXACT}\s*(?:(?:{_ARTICLE}|{_OPTION})\s*){{0,2}}(?P<labels>{strict})"
                       rf"(?=\s*(?:$|[.。!\n]))"),
        ]
        self.start = re.compile(rf"\s*(?P<labels>{_OPEN}?\s*{loose}\s*)(?:{_CLOSE}|[.:、．。](?=\s|$)|"
                                rf"\s*[-–—]\s|(?=\s*(?:\n|$)))")
        self.bracketed = re.compile(rf"{_OPEN}\s*({loose})\s*{_CLOSE}")

    def index(self, label: str) -> int | None:
        s = label.strip()
        if s in self.alias:
            return self.alias[s]
        return self.alias.get(s.upper())

    def found(self, span: str) -> set[int]:
        """Positions of the labels written in ``span``."""
        return {i for i in (self.index(m.group(0)) for m in self.label.finditer(span)) if i is not None}


@lru_cache(maxsize=256)
def _labels(keys: tuple[str, ...]) -> _Labels:
    return _Labels(keys)


@lru_cache(maxsize=4096)
def _option_pattern(text: str) -> re.Pattern | None:
    """A regex finding an option's text in folded text: case, spacing and punctuation free.

    Numbers and one-character texts get a pattern for the whole answer (it starts with ``[\\W_]*``)."""
    tokens = re.findall(r"\w+", fold(unicodedata.normalize("NFKC", text)))
    if not tokens:
        return None
    if sum(len(t) for t in tokens) < 2 or not any(c.isalpha() for t in tokens for c in t):
        # numbers ("48", "0,125") turn up in any calculation, one character ("脾") inside any word:
        # they name an option only as the whole answer
        return re.compile(r"[\W_]*" + r"[\W_]+".join(re.escape(t) for t in tokens) + r"[\W_]*", re.IGNORECASE)
    body = r"[\W_]*".join(re.escape(t) for t in tokens)
    # Word edges only where the script has them (Thai and Chinese write no spaces).
    if not re.match(rf"[{_THAI}{_CJK}]", tokens[0]):
        body = r"(?<!\w)" + body
    if not re.search(rf"[{_THAI}{_CJK}]$", tokens[-1]):
        body += r"(?!\w)"
    return re.compile(body, re.IGNORECASE)


_BULLET = re.compile(r"\s*(?:[-*•]|\d+[.)])\s")
_SENTENCE_END = re.compile(r"[.!?。！？\n](?=\s|$)|[。！？\n]")


def _by_text(text: str, texts: tuple[str, ...]) -> int | None:
    """The one option whose text the answer quotes; when several are quoted, the one its final sentence names."""
    f = fold(text)
    spans: list[tuple[int, int, int]] = []
    for i, t in enumerate(texts):
        pat = _option_pattern(t) if t else None
        if pat is None:
            continue
        if pat.pattern.startswith(r"[\W_]*"):      # a number: the whole answer or nothing
            if pat.fullmatch(f):
                spans.append((0, len(f), i))
            continue
        spans += [(m.start(), m.end(), i) for m in pat.finditer(f)]
    # "Tas" inside a quoted "Tas Ransel" is no mention of option "Tas"
    spans = [s for s in spans if not any(o[0] <= s[0] and s[1] <= o[1] and (o[1] - o[0]) > (s[1] - s[0])
                                         for o in spans)]
    named = {i for _, _, i in spans}
    if len(named) == 1:
        return named.pop()
    if not named:
        return None
    body = f.rstrip(" .!?。！？\n")
    cut = max((m.end() for m in _SENTENCE_END.finditer(body)), default=0)
    if _BULLET.match(body, cut):       # the last line is an item of a list the reasoning walks through
        return None
    last = {i for s, e, i in spans if e > cut}
    return last.pop() if len(last) == 1 else None


def read_choice(text: str, keys: tuple[str, ...], texts: tuple[str, ...]) -> int | None:
    """The position of the option ``text`` names, or None (absent or ambiguous)."""
    t = _prepare(text)
    if not t:
        return None
    lab = _labels(keys)
    last: tuple[int, set[int]] | None = None
    for pat in lab.commit:
        for m in pat.finditer(t):
            pos = m.start("labels")
            if last is None or pos >= last[0]:
                got = lab.found(m.group("labels"))
                if got:
                    last = (pos, got)
    if last is not None:
        return next(iter(last[1])) if len(last[1]) == 1 else None
    m = lab.start.match(t)
    if m and not lab.more.match(t, m.end()):     # "(A) or (B)" opens with a label but names two
        got = lab.found(m.group("labels"))
        if len(got) == 1:
            return got.pop()
    if any(texts):
        i = _by_text(t, texts)
        if i is not None:
            return i
    bracketed = {lab.index(b) for b in lab.bracketed.findall(t)} - {None}
    return bracketed.pop() if len(bracketed) == 1 else None


# -- options --------------------------------------------------------------------------------
def normalize_options(options) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(labels, texts) of ``options``: a dict label -> text, a list of texts (labelled A, B, C...),
    or a string of letters (labels without texts); ValueError for anything else."""
    if isinstance(options, str):
        keys = tuple(c for c in options if not c.isspace())
        texts = ("",) * len(keys)
    elif isinstance(options, dict):
        keys = tuple(str(k).strip() for k in options)
        if not all(isinstance(v, str) for v in options.values()):
            raise ValueError("option texts must be strings")
        texts = tuple(options.values())
    elif isinstance(options, (list, tuple)):
        if len(options) > len(kw.LATIN_LABELS) or not all(isinstance(v, str) for v in options):
            raise ValueError("options list must hold at most 26 strings")
        keys = tuple(kw.LATIN_LABELS[:len(options)])
        texts = tuple(options)
    else:
        raise ValueError(f"options must be a dict, list or string, got {type(options).__name__}")
    if not keys:
        raise ValueError("no options")
    if len(set(keys)) != len(keys) or not all(keys):
        raise ValueError("option labels must be distinct and non-empty")
    return keys, texts


def extract_choice(text: str, options="ABCD") -> str | None:
    """The label of the option ``text`` names (see the module doc), None when absent or ambiguous.

    Reads ``text`` as given; ``predict`` first drops a ``<think>`` block."""
    if not text:
        return None
    keys, texts = normalize_options(options)
    i = read_choice(text, keys, texts)
    return None if i is None else keys[i]


def predict(response: str, options) -> str | None:
    """``extract_choice`` on the final answer of ``response`` (after ``</think>``)."""
    return extract_choice(final_answer(response), options)


def resolve_label(label: str, options) -> str | None:
    """The option key a gold label names (its key, or a positional alias: "B", "ข", "乙"); None if none."""
    keys, _ = normalize_options(options)
    i = _labels(keys).index(str(label))
    return None if i is None else keys[i]
