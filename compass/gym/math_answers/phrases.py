"""The words that introduce a final answer, and those that end it, in the languages models answer in.

A model asked in Spanish writes "La respuesta es 5", in Chinese "答案是 5", in Russian "Ответ: 7". The
phrases below are the "answer is" of each (en, es, pt, fr, it, de, ru, zh, ja, ko, id, vi, tr, pl, nl);
``extract`` takes the text after the last one. Only the word for *answer* (and Vietnamese "kết quả",
result, which is how Vietnamese states one) starts an answer: "the solution" does not, as in English.

``CLAUSE_END`` is where the stated answer stops: "5 porque 2+3=5" states 5, "7, потому что ..." states 7.
"""
from __future__ import annotations

import re

# Matched against the lower-cased text, without re.I, and each only when a substring of it is there: one
# case-insensitive alternation of all of them costs ~15 us on a 300-character response, these ~5 us
# (the verifier scores tens of thousands of pairs a second).
# "answer" in each language; "final" before it needs no pattern (only where the marker ends matters)
_ANSWER_WORDS = (
    r"answer|respuesta|resposta|r[ée]ponse|risposta|antwort|ответ|jawaban(?:nya)?|đáp\s+án|đáp\s+số|kết\s+quả"
    r"|cevap|yanıt|odpowied[źz]|antwoord"
)
_ANSWER_KEYS = ("answer", "respu", "respo", "pons", "rispo", "antw", "ответ", "jawab", "đáp", "kết", "cevap",
                "yanıt", "odpowied")
# the verb after it (a whole word: "es" must not start "estimated") or the sign
_IS_WORDS = (
    r"is|was|would\s+be|will\s+be|should\s+be"
    r"|es|é|est|è|ist|lautet|равен|равна|равно|будет|это|adalah|ialah|là|şudur|wynosi|jest|is\s+gelijk\s+aan"
)
_IS = rf"(?:{_IS_WORDS})(?![^\W\d_])|=|:|：|—|-(?=\s)"
_WORD_MARKER = re.compile(
    rf"(?:{_ANSWER_WORDS})(?:\s+(?:final|finale|finales|akhir|finalmente))?\s*(?:{_IS})\s*[:：]?")
# CJK: no spaces between words; "答案是", "答案为", "答案：", "最终答案是", "答え：", "答えは", "정답:", "답은"
_CJK_KEYS = ("答", "답")
_CJK_MARKER = re.compile(r"(?:答案|答え|答|정답|답)\s*(?:是|为|為|は|은|는|:|：)\s*[:：]?")
# "A: 42" at a line start (GSM8K's own solutions), and "#### 42"
_A_MARKER = re.compile(r"(?m)^[ \t]*(?:\*\*)?a(?:\*\*)?[ \t]*:")
_GROUPS = ((_ANSWER_KEYS, _WORD_MARKER), (_CJK_KEYS, _CJK_MARKER), ((":",), _A_MARKER))


def last_marker_end(text: str) -> int | None:
    """Where the text after the last answer marker ("answer is", "La respuesta es", "答案是", "Ответ:",
    "####", "A:") starts in ``text``; None when there is no marker."""
    low = text.lower()
    if len(low) != len(text):           # lower() changed a length ("İ"): positions must stay the text's
        low = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
    hashes = low.rfind("####")
    end = hashes + 4 if hashes >= 0 else None
    for keys, rx in _GROUPS:
        if any(k in low for k in keys):
            last = None
            for m in rx.finditer(low):
                if not _JUDGEMENT.match(low, m.end()):      # "this answer is wrong" judges, it answers nothing
                    last = m
            if last is not None and (end is None or last.end() > end):
                end = last.end()
    return end


# what follows "answer is" when a model comments on an answer rather than giving one
_JUDGEMENT = re.compile(r"\s*(?:not\s+)?(?:correct|incorrect|wrong|right)\b")


# "because" and the like, after which the stated answer has ended
_BECAUSE = (r"because|since|which|as|porque|pues|ya\s+que|parce\s+que|car|puisque|perch[ée]|poich[ée]"
            r"|weil|da|denn|потому\s+что|так\s+как|поскольку|karena|sebab|vì|bởi\s+vì|çünkü|ponieważ|omdat")
CLAUSE_END = re.compile(
    r"(?<=[^\d\s])\.(?=\s|$)|(?<=\d)\.(?=\s|$)|\n|[。；]|，(?!\s*\d)|;(?!\s*[-+(\[\d])"
    rf"|,\s+(?:so|which|because|since|and|{_BECAUSE})\b"
    rf"|\s+(?:{_BECAUSE})\s|因为|因為|所以|なぜなら|왜냐하면",
    re.I)
