"""``ifeval`` verifier: IFEval instruction checks (strict mode), one rule per instruction id.

Spec, in IFEval's layout::

    {"type": "ifeval", "instruction_id_list": ["length_constraints:number_words", ...],
     "kwargs": [{"num_words": 8, "relation": "at least"}, ...]}

Score = the fraction of instructions the final answer follows (an empty
final answer follows none). The rules reimplement IFEval's semantics
(Zhou et al. 2023) for the ids in ``RULES``; the ids that need NLTK's
sentence splitter are not implemented. An unknown id is a bad spec
(ValueError). Language detection is ``langdetect`` seeded for
determinism; langdetect has no Malay or Chinese-without-script code, so
``ms`` also accepts ``id`` and ``zh-TW``/``zh`` accept ``zh-tw`` and ``zh-cn``.
"""
from __future__ import annotations

import json
import re
from typing import Callable

from stages.gym.provisional import final_answer
from stages.gym.registry import register_verifier

# What langdetect may answer for a language code of a spec.
LANGDETECT_CODES = {"zh-TW": {"zh-tw", "zh-cn"}, "zh-tw": {"zh-tw", "zh-cn"}, "zh": {"zh-tw", "zh-cn"},
                    "zh-CN": {"zh-cn", "zh-tw"}, "ms": {"ms", "id"}}

_WORD = re.compile(r"\w+")  # IFEval counts words with NLTK's RegexpTokenizer(r"\w+")


def detect_language(text: str) -> str | None:
    """langdetect's code for ``text`` (deterministic), or None when it cannot tell."""
    from langdetect import DetectorFactory, detect
    from langdetect.lang_detect_exception import LangDetectException
    DetectorFactory.seed = 0
    try:
        return detect(text)
    except LangDetectException:
        return None


def _compare(count: int, relation: str, n: int) -> bool:
    if relation == "less than":
        return count < n
    if relation == "at least":
        return count >= n
    raise ValueError(f"unknown relation {relation!r} (IFEval knows 'less than' and 'at least')")


def count_words(text: str) -> int:
    return len(_WORD.findall(text))


def number_words(text: str, num_words: int, relation: str) -> bool:
    return _compare(count_words(text), relation, int(num_words))


def response_language(text: str, language: str) -> bool:
    found = detect_language(text)
    if found is None:  # IFEval counts an undetectable response as following
        return True
    return found in LANGDETECT_CODES.get(language, {language})


def english_lowercase(text: str) -> bool:
    return text.islower() and response_language(text, "en")


def english_capital(text: str) -> bool:
    return text.isupper() and response_language(text, "en")


def keywords_existence(text: str, keywords: list[str]) -> bool:
    return all(re.search(re.escape(k), text, flags=re.IGNORECASE) for k in keywords)


def forbidden_words(text: str, forbidden_words: list[str]) -> bool:
    return not any(re.search(r"\b" + re.escape(w) + r"\b", text, flags=re.IGNORECASE) for w in forbidden_words)


def keyword_frequency(text: str, keyword: str, frequency: int, relation: str) -> bool:
    return _compare(len(re.findall(re.escape(keyword), text, flags=re.IGNORECASE)), relation, int(frequency))


def json_format(text: str) -> bool:
    value = text.strip()
    for prefix in ("```json", "```Json", "```JSON", "```"):
        value = value.removeprefix(prefix)
    value = value.removesuffix("```").strip()
    try:
        json.loads(value)
    except ValueError:
        return False
    return True


def end_checker(text: str, end_phrase: str) -> bool:
    return text.strip().strip('"').lower().endswith(end_phrase.strip().lower())


def postscript(text: str, postscript_marker: str) -> bool:
    marker = postscript_marker.strip()
    if marker == "P.P.S":
        pattern = r"\s*p\.\s?p\.\s?s.*$"
    elif marker == "P.S.":
        pattern = r"\s*p\.\s?s\..*$"
    else:
        pattern = r"\s*" + re.escape(marker.lower()) + r".*$"
    return bool(re.findall(pattern, text.lower(), flags=re.MULTILINE))


def number_bullet_lists(text: str, num_bullets: int) -> bool:
    stars = re.findall(r"^\s*\*[^\*].*$", text, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", text, flags=re.MULTILINE)
    return len(stars) + len(dashes) == int(num_bullets)


def no_comma(text: str) -> bool:
    return "," not in text


def quotation(text: str) -> bool:
    value = text.strip()
    return len(value) > 1 and value[0] == '"' and value[-1] == '"'


def title(text: str) -> bool:
    return any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", text))


def highlighted_sections(text: str, num_highlights: int) -> bool:
    single = [h for h in re.findall(r"\*[^\n\*]*\*", text) if h.strip("*").strip()]
    double = [h for h in re.findall(r"\*\*[^\n\*]*\*\*", text) if h.removeprefix("**").removesuffix("**").strip()]
    return len(single) + len(double) >= int(num_highlights)


# IFEval instruction id -> rule(text, **kwargs); kwargs names are IFEval's.
RULES: dict[str, Callable[..., bool]] = {
    "length_constraints:number_words": number_words,
    "language:response_language": response_language,
    "change_case:english_lowercase": english_lowercase,
    "change_case:english_capital": english_capital,
    "keywords:existence": keywords_existence,
    "keywords:forbidden_words": forbidden_words,
    "keywords:frequency": keyword_frequency,
    "detectable_format:json_format": json_format,
    "startend:end_checker": end_checker,
    "detectable_content:postscript": postscript,
    "detectable_format:number_bullet_lists": number_bullet_lists,
    "punctuation:no_comma": no_comma,
    "startend:quotation": quotation,
    "detectable_format:title": title,
    "detectable_format:number_highlighted_sections": highlighted_sections,
}


def followed(spec: dict, text: str) -> list[bool]:
    """Per instruction of ``spec``: does ``text`` follow it? ValueError for an unknown id."""
    ids = spec.get("instruction_id_list") or []
    kwargs = spec.get("kwargs") or [{}] * len(ids)
    if len(kwargs) != len(ids):
        raise ValueError("ifeval spec: 'kwargs' must have one entry per instruction id")
    out = []
    for iid, kw in zip(ids, kwargs):
        if iid not in RULES:
            raise ValueError(f"ifeval spec: instruction id '{iid}' is not implemented "
                             f"(known: {', '.join(sorted(RULES))})")
        out.append(bool(RULES[iid](text, **{k: v for k, v in (kw or {}).items() if v is not None})))
    return out


@register_verifier("ifeval", needs_reference=False)
def _ifeval(spec: dict, response: str, reference: str) -> float:
    text = final_answer(response)
    ids = spec.get("instruction_id_list") or []
    if not text or not ids:
        return 0.0
    verdicts = followed(spec, text)
    return sum(verdicts) / len(verdicts)
