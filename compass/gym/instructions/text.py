"""Text measures the instruction checks share: words, sentences, capital words, language.

IFEval's reference checker counts words with NLTK's ``RegexpTokenizer(r"\\w+")``,
sentences with NLTK's trained Punkt model and capital words with NLTK's
``word_tokenize``. Punkt's model is data we cannot ship or download, so
``split_sentences`` re-derives its decisions from the rules Punkt applies
(Kiss & Strunk 2006) with small hand-made word lists in place of the trained
statistics; see ``split_sentences`` for where the two can differ. Everything
here runs in time linear in the text (no regex that backtracks over a line),
so a multi-megabyte response is measured, not a denial of service.
"""
from __future__ import annotations

import functools
import json
import re

# -- words -------------------------------------------------------------------------------
_WORD = re.compile(r"\w+")


def count_words(text: str) -> int:
    """Runs of word characters (letters, digits, underscore in any script), as IFEval counts words."""
    return sum(1 for _ in _WORD.finditer(text))


# -- capital words (the NLTK word tokenizer's grouping, for ``isupper``) -----------------
# Only tokens with letters can be all-capital, so what matters is where the tokenizer cuts a run
# of letters: at brackets, most punctuation, a comma or colon before a non-digit, double dashes,
# and before the clitics of English contractions ("DON'T" is DO + N'T, "I'M" is I + 'M).
_TOKEN_CUT = re.compile(r"""[\s;@#$%&?!*()\[\]{}<>"`«»“”‘„\u2012-\u2015]|--|\.{2,}|[,:](?!\d)""")
_CLITIC = re.compile(r"(?i)(?<=[^'\s])('s|'m|'d|'ll|'re|'ve|n't)$")
_SPLIT_PAIRS = re.compile(r"(?i)^(can)(not)$|^(gon)(na)$|^(got)(ta)$|^(wan)(na)$|^(gim)(me)$|^(lem)(me)$")


def word_tokens(text: str) -> list[str]:
    """Tokens as NLTK's ``word_tokenize`` groups letters (punctuation-only tokens dropped)."""
    out = []
    for piece in _TOKEN_CUT.split(text):
        piece = piece.strip("'’")            # a quote before or after a word is its own token
        if not piece:
            continue
        m = _CLITIC.search(piece)
        if m:
            out.extend(p for p in (piece[:m.start()], m.group(1)) if p)
            continue
        m = _SPLIT_PAIRS.match(piece)
        out.extend([g for g in m.groups() if g] if m else [piece])
    return out


def count_capital_words(text: str) -> int:
    """Tokens whose cased letters are all upper case ("AI", "U.S.", also "I" and "A")."""
    return sum(1 for t in word_tokens(text) if t.isupper())


# -- sentences (Punkt's decisions without its trained model) -----------------------------
# A sentence may end at '.', '?' or '!' when the next character is whitespace (with more text
# after it) or one of these; Punkt looks at the last such position of each whitespace-free chunk.
_NONWORD = frozenset(")\";}]*:@'({[!?")
_CLOSERS = "\"')]}"
_CHUNK = re.compile(r"\S+")
_NUMBER = re.compile(r"-?[.,]?\d[\d,.\-]*\.?")
_INITIAL = re.compile(r"[^\W\d]\.")
# Abbreviations Punkt's English model knows: a period after them ends no sentence, unless a
# word that normally starts sentences follows.
ABBREVIATIONS = frozenset("""
    mr mrs ms dr prof sr jr st mt ft vs etc e.g i.e a.m p.m u.s u.k u.n d.c n.y l.a
    inc corp co ltd llc dept univ assn bros jan feb mar apr jun jul aug sep sept oct nov dec
    mon tue tues wed thu thurs fri sat sun gen gov sen rep col lt maj capt sgt cmdr adm
    rev hon pres supt messrs mme no nos vol vols fig figs approx est ave blvd rd
    calif fla ga ill mass mich minn conn penn tenn wash wis ariz colo okla ore
""".split())
# Words that normally start sentences and are written in lower case elsewhere: after an
# abbreviation, an ellipsis or an initial, such a word (capitalised) means a new sentence.
SENTENCE_STARTERS = frozenset("""
    the a an this that these those it its he she they we you there here his her their our my your
    in on at for with as but and or so if when while after before however also then thus therefore
    each every all some many most no not one what which who how why where to from by of
    is are was were be do does did has have had can could will would should may might must
    let please first second third finally next now today overall additionally furthermore moreover
    instead meanwhile although though because since once yes still yet both either neither such
    """.split())


def _ortho_starts_sentence(token: str) -> bool | None:
    """Punkt's orthographic evidence that ``token`` begins a sentence: True, False or None (unknown).

    Punkt asks its model how the word is usually capitalised; here a lower-case word (or
    punctuation that continues a sentence) says no, a capitalised common word says yes, and a
    capitalised other word (a name) or a non-letter says nothing.
    """
    if not token or token in ";:,.!?":
        return False
    first = token[0]
    if first.islower():
        return False
    if first.isupper():
        return True if token.lower().rstrip(".") in SENTENCE_STARTERS else None
    return None


def _next_token(after: str) -> str:
    """The first Punkt token of the text after a candidate end (a punctuation mark, or a word)."""
    if not after:
        return ""
    if after[0] in _NONWORD or after[0] in "`&#-,":
        return after[0]
    cut = next((i for i, c in enumerate(after) if c in _NONWORD), len(after))
    return after[:cut]


def _ends_sentence(word: str, after: str) -> bool:
    """Does the chunk prefix ``word`` (ending in '.', '?' or '!') end a sentence before ``after``?"""
    if "?" in word or "!" in word:
        return True                       # Punkt treats every '?' and '!' as a break
    # Punkt splits leading brackets, quotes and asterisks off a word; judge the last word.
    core = word
    for i in range(len(word) - 1, -1, -1):
        if word[i] in _NONWORD:
            core = word[i + 1:]
            break
    core = core.lstrip("`&#-,")
    nxt = _ortho_starts_sentence(_next_token(after))
    if core.endswith(".."):               # an ellipsis ends a sentence only before a sentence start
        return nxt is True
    if core == ".":
        return True
    typ = core[:-1].lower()
    if typ in ABBREVIATIONS or typ.rsplit("-", 1)[-1] in ABBREVIATIONS:
        return nxt is True and not _INITIAL.fullmatch(core)
    if _INITIAL.fullmatch(core):          # "J. Smith" no, "plan B. The" yes, "b. lower" no
        if nxt is None:                   # a name after an initial continues the sentence
            return not _next_token(after)[:1].isupper()
        return nxt
    if _NUMBER.fullmatch(core):           # "1. Apples" yes, "page 3. and" no
        return nxt is not False
    return True


def _only_closers(piece: str) -> bool:
    """Punkt moves closing quotes and brackets that open a sentence onto the previous one."""
    return not piece.lstrip(_CLOSERS).strip()


def split_sentences(text: str) -> list[str]:
    """Sentences as NLTK's English Punkt tokenizer cuts them (``sent_tokenize``), approximately.

    Line breaks do not end sentences (a heading without a full stop joins the next sentence)
    and every '?' or '!' does. Where Punkt consults its trained statistics (is this word an
    abbreviation, does the next word usually start sentences) the lists above stand in; they
    decide only after abbreviations, initials, ellipses and numbered-list markers.
    """
    chunks = list(_CHUNK.finditer(text))
    out, start = [], 0
    for k, m in enumerate(chunks):
        s = m.group()
        # the last '.', '?' or '!' of the chunk that has whitespace + text, or a NonWord char, after it
        cut = -1
        for p in range(len(s) - 1, -1, -1):
            at_end = p == len(s) - 1
            if s[p] in ".?!" and ((at_end and k + 1 < len(chunks)) or (not at_end and s[p + 1] in _NONWORD)):
                cut = p
                break
        if cut < 0:
            continue
        if cut == len(s) - 1:
            after, end, nxt_start = chunks[k + 1].group(), m.end(), chunks[k + 1].start()
        else:
            after, end = s[cut + 1:], m.start() + cut + 1
            nxt_start = end
        if _ends_sentence(s[:cut + 1], after):
            out.append(text[start:end])
            start = nxt_start
    out.append(text[start:len(text.rstrip())])
    return [p for i, p in enumerate(out) if p.strip() and not (i and _only_closers(p))]


def count_sentences(text: str) -> int:
    return len(split_sentences(text))


# -- JSON --------------------------------------------------------------------------------
NOT_JSON = object()   # json_value's answer for text that is not JSON (None is JSON's null)


def json_value(text: str):
    """The JSON value of a response, a markdown code fence around it allowed; NOT_JSON if it does not parse."""
    value = text.strip()
    for fence in ("```json", "```Json", "```JSON", "```"):
        value = value.removeprefix(fence)       # one after another, as the reference does
    if value.endswith("```"):
        value = value[:-3]
    try:
        return json.loads(value.strip())
    except (ValueError, RecursionError):
        return NOT_JSON


# -- language ----------------------------------------------------------------------------
def detect_language(text: str) -> str | None:
    """langdetect's code for ``text``, the same on every call (seed 0), or None when it cannot tell.

    Loose mode asks about the same texts several times, so short texts are cached.
    """
    return _detect_cached(text) if len(text) <= 20_000 else _detect(text)


@functools.lru_cache(maxsize=512)
def _detect_cached(text: str) -> str | None:
    return _detect(text)


def _detect(text: str) -> str | None:
    from langdetect import DetectorFactory, detect
    from langdetect.lang_detect_exception import LangDetectException
    DetectorFactory.seed = 0
    try:
        return detect(text)
    except LangDetectException:
        return None


@functools.lru_cache(maxsize=1)
def langdetect_codes() -> frozenset[str]:
    """The language codes langdetect can answer (its bundled profiles)."""
    from pathlib import Path

    import langdetect
    return frozenset(p.name for p in (Path(langdetect.__file__).parent / "profiles").iterdir())
