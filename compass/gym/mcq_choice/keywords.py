"""Keyword tables of the multiple-choice verifier (``mcq``; read by ``compass.gym.mcq_choice.extract``), per language.

Words are written as people type them (with diacritics); ``extract``
folds them the same way as the response (NFKC, Latin diacritics dropped,
``đ`` -> ``d``) and matches them case-insensitively, so "Đáp án", "dap an"
and "ĐÁP ÁN" are one cue. Longer phrases need not come first: the module
sorts each alternation longest-first.

The roles, in the order a committed answer says them:

- ``ANSWER``: "answer"/"I choose": a cue that the next label is the answer
  ("the answer is B", "答案是 B", "Chọn B", "ตอบ ข");
- ``CORRECT``: "correct", before or after the answer word ("correct answer",
  "jawaban yang benar", "正確答案", "คำตอบที่ถูกต้อง");
- ``COPULA``: "is" between cue and label ("adalah", "là", "คือ", "é", "是");
- ``OPTION``: "option/alternative/letter", a filler before the label ("the
  answer is option B", "a resposta é a letra B", "คำตอบคือข้อ B"). Alone
  ("Alternativa B") it only commits at the very end of a response, since
  reasoning walks through the options by these words;
- ``ARTICLE``: tiny words that may precede the label ("the", pt "a"/"o");
- ``OR``: separators of a list of labels; a committed list ("A or B",
  "Resposta: A, C e E") is no single answer.
"""
from __future__ import annotations

LANGUAGES = ("en", "zh-TW", "id", "vi", "th", "pt", "ms")

ANSWER = {
    "en": ("answer", "final answer", "i choose", "i pick", "i select", "i would choose", "i'd choose",
           "i'll go with", "i would go with", "i'd go with", "my choice is", "choose", "pick"),
    "zh-TW": ("答案", "答", "最終答案", "選擇", "選", "应选", "應選", "选择", "选", "答案应为", "我選"),
    "id": ("jawaban", "jawabannya", "jawaban akhir", "saya memilih", "saya pilih", "memilih", "pilih"),
    "vi": ("đáp án", "câu trả lời", "trả lời", "chọn", "tôi chọn", "đáp số"),
    "th": ("คำตอบ", "ตอบ", "เลือก", "คำตอบสุดท้าย"),
    "pt": ("resposta", "resposta final", "gabarito", "escolho", "escolha", "eu escolho", "marque", "assinale"),
    "ms": ("jawapan", "jawapannya", "jawapan akhir", "saya memilih", "saya pilih", "pilih"),
}

CORRECT = {
    "en": ("correct", "right", "best", "final", "most appropriate", "most likely"),
    "zh-TW": ("正確", "正确", "最佳", "最終", "的"),
    "id": ("yang benar", "yang tepat", "benar", "tepat", "yang paling tepat", "paling tepat"),
    "vi": ("đúng", "chính xác", "đúng nhất", "phù hợp nhất"),
    "th": ("ที่ถูกต้อง", "ที่ถูก", "ถูกต้อง", "ที่ถูกต้องที่สุด", "ที่เหมาะสมที่สุด"),
    "pt": ("correta", "correto", "certa", "certo", "mais adequada", "verdadeira", "final"),
    "ms": ("yang betul", "yang tepat", "betul", "tepat", "yang paling tepat"),
}

COPULA = {
    "en": ("is", "would be", "will be", "should be", "must be", "is probably", "=", "is therefore"),
    "zh-TW": ("是", "為", "为", "應為", "应为", "應該是", "应该是", "乃"),
    "id": ("adalah", "ialah", "yaitu", "yakni", "merupakan"),
    "vi": ("là", "sẽ là", "chính là"),
    "th": ("คือ", "เป็น", "ได้แก่"),
    "pt": ("é", "seria", "será", "está", "fica"),
    "ms": ("ialah", "adalah", "iaitu", "merupakan"),
}

OPTION = {
    "en": ("option", "choice", "letter", "answer choice", "alternative"),
    "zh-TW": ("選項", "选项", "第"),
    "id": ("pilihan", "opsi", "huruf"),
    "vi": ("phương án", "lựa chọn", "câu", "đáp án"),
    "th": ("ข้อ", "ตัวเลือก", "ตัวเลือกที่"),
    "pt": ("alternativa", "opção", "letra", "item"),
    "ms": ("pilihan", "opsyen", "huruf"),
}

ARTICLE = ("the", "a", "o", "either")

OR = {
    "en": ("or", "and", "and/or"),
    "zh-TW": ("或", "或者", "和", "與", "与", "及", "還是"),
    "id": ("atau", "dan"),
    "vi": ("hoặc", "và", "hay"),
    "th": ("หรือ", "และ"),
    "pt": ("ou", "e"),
    "ms": ("atau", "dan"),
}
OR_SYMBOLS = (",", "/", "、", "&", "，", ";")

# Labels by position: an answer may name the second option "B", "ข" (Thai
# exams label choices ก ข ค ง จ) or "乙" (Chinese exams: the heavenly stems).
LATIN_LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
THAI_LABELS = "กขคงจฉชซ"
STEM_LABELS = "甲乙丙丁戊己庚辛壬癸"


def union(table: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """Every language's words of one role, without repeats."""
    seen: dict[str, None] = {}
    for words in table.values():
        for w in words:
            seen.setdefault(w, None)
    return tuple(seen)
