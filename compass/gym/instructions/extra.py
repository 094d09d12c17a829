"""Compass's own instruction checks (ids ``compass:*``), beyond IFEval's 25.

The kinds the IFEval paper names (keyword detection, word or symbol counting,
response formatting, language detection), for the constraints the project's
prompts use: the seven market languages, JSON objects, tables, numbered
lists, length caps. Each rule declares its kwargs (``kit``), so a spec
that does not fit is rejected before any text is read. Relations are IFEval's
"less than" / "at least" plus "at most" / "exactly"; where a rule has a
``relation`` it defaults to "exactly".

Market languages (``compass:response_language``): en, pt, vi by langdetect
(seeded); th by script (Thai letters are the majority); zh-TW / zh-CN by
script (Han letters are the majority), then by characters that exist in only
one of the two writing systems (這/这, 們/们, ...): more traditional-only
than simplified-only characters is zh-TW and the reverse zh-CN; a text with
neither (or as many of each) is both, since it is valid in both. id / ms:
langdetect has no Malay profile and calls Malay Indonesian, so a text it
calls ``id`` is told apart by words that are common in only one of the two
standards (ms: ialah, kerana, sahaja, baharu, ...; id: bahwa, karena, saja,
bisa, ...); without such words, or with as many of each, it is both.
"""
from __future__ import annotations

import re

from compass.gym.instructions.kit import COUNT, POSITIVE, TEXT, TEXTS, Param, compare, rule
from compass.gym.instructions.text import NOT_JSON, count_words, detect_language, json_value

EXACTLY = Param("relation+", default="exactly")
MARKET_LANGUAGES = ("en", "zh-TW", "zh-CN", "id", "vi", "th", "pt", "ms")

# -- language ----------------------------------------------------------------------------
# (simplified, traditional) pairs of common characters where each form belongs to one system only.
_PAIRS = ("这這们們说說个個来來时時会會为為国國对對发發经經现現学學过過还還样樣么麼没沒开開关關书書长長买買卖賣"
          "车車东東电電话話问問间間听聽见見觉覺让讓认認识識语語读讀写寫头頭门門马馬鸟鳥鱼魚爱愛欢歡乐樂体體场場"
          "无無实實点點业業动動产產种種员員机機两兩边邊网網钱錢价價质質货貨费費单單号號码碼选選应應该該请請谢謝"
          "给給从從与與将將专專华華万萬亿億双雙杂雜视視饭飯计計设設备備务務购購订訂颜顏气氣热熱钟鐘岁歲龙龍乡鄉"
          "园園图圖馆館厅廳医醫药藥师師术術艺藝报報纸紙笔筆灯燈脑腦脸臉岛島观觀运運达達远遠进進连連风風飞飛鸡雞"
          "猫貓汤湯红紅绿綠蓝藍黄黃银銀铁鐵极極级級组組织織结結统統练練线線细細终終总總刚剛剧劇办辦区區卫衛历歷"
          "压壓厂廠变變吗嗎响響团團围圍块塊坏壞声聲处處够夠妈媽宝寶宽寬导導层層帮幫带帶广廣张張归歸录錄态態战戰"
          "护護担擔换換据據数數断斷显顯条條构構标標树樹桥橋检檢楼樓汉漢济濟测測温溫满滿灵靈烧燒状狀独獨环環画畫"
          "疗療盘盤确確礼禮离離称稱稳穩简簡类類紧緊约約纯純绝絕继繼续續维維编編罗羅职職联聯脚腳节節获獲营營虽雖"
          "补補装裝规規览覽讨討议議记記讲講论論访訪证證评評试試详詳误誤课課谁誰调調谈談负負财財责責贵貴资資赛賽"
          "转轉轮輪软軟轻輕较較输輸适適释釋针針错錯锅鍋键鍵镜鏡闭閉闻聞阅閱队隊阳陽阴陰际際陆陸险險随隨难難页頁"
          "顶頂项項顺順须須顾顧预預领領题題饮飲饱飽饿餓驾駕验驗骑騎麦麥齐齊")
SIMPLIFIED_ONLY = frozenset(_PAIRS[0::2])
TRADITIONAL_ONLY = frozenset(_PAIRS[1::2]) | {"裡", "裏", "後", "臺", "灣"}
# Words common in one of Malay / Indonesian and rare in the other (standard spelling and usage).
MALAY_WORDS = frozenset("""ialah kerana sahaja baharu sentiasa cuba mahu selepas semasa bahawa percuma telefon filem
    muzik kualiti kuantiti universiti teksi sila awak gemar bercakap berbual ramai perkara kedai jualan saiz puan encik
    mesti wang hendak pejabat kerajaan polis tempahan penghantaran bekalan kempen kawan""".split())
INDONESIAN_WORDS = frozenset("""bahwa karena saja bisa coba mau setelah sesudah gratis telepon musik kualitas kuantitas
    universitas taksi silakan kamu toko ukuran kantor pemerintah polisi pengiriman pemesanan nggak gak enggak udah
    banget    aja dong sih kok agar mobil uang bioskop apotek karyawan""".split())


def _scripts(text: str) -> tuple[int, int, int, int]:
    """Letters in total, Han, Thai and kana/hangul (which say Japanese or Korean, not Chinese)."""
    letters = han = thai = other_cjk = 0
    for ch in text:
        if not ch.isalpha():
            continue
        letters += 1
        o = ord(ch)
        if 0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF:
            han += 1
        elif 0x0E00 <= o <= 0x0E7F:
            thai += 1
        elif 0x3040 <= o <= 0x30FF or 0xAC00 <= o <= 0xD7AF:
            other_cjk += 1
    return letters, han, thai, other_cjk


def market_languages(text: str) -> set[str]:
    """The market languages ``text`` counts as (several when the rule cannot separate them, none for no letters)."""
    letters, han, thai, other_cjk = _scripts(text)
    if not letters:
        return set()
    if 2 * han > letters and other_cjk * 10 < han:
        trad = sum(1 for ch in text if ch in TRADITIONAL_ONLY)
        simp = sum(1 for ch in text if ch in SIMPLIFIED_ONLY)
        if trad == simp:
            return {"zh-TW", "zh-CN"}
        return {"zh-TW" if trad > simp else "zh-CN"}
    if 2 * thai > letters:
        return {"th"}
    found = detect_language(text)
    if found in ("en", "pt", "vi"):
        return {found}
    if found == "id":
        words = re.findall(r"[a-z]+", text.lower())
        ms = sum(1 for w in words if w in MALAY_WORDS)
        id_ = sum(1 for w in words if w in INDONESIAN_WORDS)
        return {"ms"} if ms > id_ else {"id"} if id_ > ms else {"id", "ms"}
    return {found} if found else set()


def _market(kw: dict) -> None:
    if kw["language"] not in MARKET_LANGUAGES:
        raise ValueError(f"language must be one of {list(MARKET_LANGUAGES)}, got {kw['language']!r}")


@rule("compass:response_language", _market, language=TEXT)
def response_language(text: str, language: str) -> bool:
    """The response is in ``language``, one of the market languages (rule in the module doc)."""
    return language in market_languages(text)


# -- counting ----------------------------------------------------------------------------
@rule("compass:symbol_count", symbol=TEXT, count=COUNT, relation=EXACTLY)
def symbol_count(text: str, symbol: str, count: int, relation: str) -> bool:
    """``symbol`` (a literal string, e.g. "!" or "#") occurs ``relation`` ``count`` times."""
    return compare(text.count(symbol), relation, count)


@rule("compass:max_chars", max_chars=COUNT)
def max_chars(text: str, max_chars: int) -> bool:
    """At most ``max_chars`` characters, surrounding whitespace not counted."""
    return len(text.strip()) <= max_chars


def _paragraphs(text: str) -> list[str]:
    """Runs of non-blank lines (a blank line, spaces allowed, separates paragraphs)."""
    out, cur = [], []
    for line in text.split("\n"):
        if line.strip():
            cur.append(line)
        elif cur:
            out.append("\n".join(cur))
            cur = []
    if cur:
        out.append("\n".join(cur))
    return out


@rule("compass:paragraph_word_limit", max_words=POSITIVE)
def paragraph_word_limit(text: str, max_words: int) -> bool:
    """Every paragraph (blank-line separated) has at most ``max_words`` words."""
    paras = _paragraphs(text)
    return bool(paras) and all(count_words(p) <= max_words for p in paras)


# -- keywords ----------------------------------------------------------------------------
@rule("compass:keyword_order", keywords=TEXTS)
def keyword_order(text: str, keywords: list[str]) -> bool:
    """Every keyword occurs (case-insensitive), each after the previous one."""
    pos = 0
    for k in keywords:
        m = re.compile(re.escape(k), re.IGNORECASE).search(text, pos)
        if not m:
            return False
        pos = m.end()
    return True


@rule("compass:starts_with", start_phrase=TEXT)
def starts_with(text: str, start_phrase: str) -> bool:
    """Begins with ``start_phrase`` (case-insensitive, leading whitespace ignored)."""
    return text.lstrip().lower().startswith(start_phrase.strip().lower())


@rule("compass:ends_with_question")
def ends_with_question(text: str) -> bool:
    """The last character (closing quotes, brackets and markdown emphasis aside) is '?' or '？'."""
    return text.rstrip().rstrip("\"'”’)]*_ \n\t").endswith(("?", "？"))


# -- format ------------------------------------------------------------------------------
@rule("compass:json_object", required_keys=Param("texts", default=()))
def json_object(text: str, required_keys: list[str]) -> bool:
    """The whole response (a code fence allowed) is one JSON object holding ``required_keys``."""
    value = json_value(text)
    return value is not NOT_JSON and isinstance(value, dict) and all(k in value for k in required_keys)


_NUMBERED = re.compile(r"\s*(\d{1,9})[.)]\s+\S")


@rule("compass:numbered_list", num_items=COUNT, relation=EXACTLY)
def numbered_list(text: str, num_items: int, relation: str) -> bool:
    """``relation`` ``num_items`` lines numbered "1." / "1)", numbered in order (each list from 1)."""
    numbers = [int(m.group(1)) for m in map(_NUMBERED.match, text.split("\n")) if m]
    in_order = all(b == a + 1 or b == 1 for a, b in zip(numbers, numbers[1:])) and (not numbers or numbers[0] == 1)
    return in_order and compare(len(numbers), relation, num_items)


_SEPARATOR_CELL = re.compile(r":?-+:?")


def _is_separator(line: str) -> bool:
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    return "|" in line and all(_SEPARATOR_CELL.fullmatch(c) for c in cells)


def count_table_rows(text: str) -> int:
    """Data rows of markdown tables: the lines with '|' after a header line and its ---|--- line."""
    lines = text.split("\n")
    rows, i = 0, 1
    while i < len(lines):
        if "|" in lines[i - 1] and _is_separator(lines[i]):
            i += 1
            while i < len(lines) and "|" in lines[i] and lines[i].strip():
                rows += 1
                i += 1
        i += 1
    return rows


@rule("compass:table_rows", num_rows=COUNT, relation=EXACTLY)
def table_rows(text: str, num_rows: int, relation: str) -> bool:
    """A markdown table with ``relation`` ``num_rows`` data rows (header and --- line not counted)."""
    return compare(count_table_rows(text), relation, num_rows)


# Unicode's pictographic blocks, dingbats and miscellaneous symbols, and the emoji presentation
# selector / keycap mark; text symbols outside them (©, ™, arrows, ✓ is U+2713 and counts) are judged by block.
_EMOJI = re.compile("[\U0001F000-\U0001FAFF\u2600-\u27BF\u2B05-\u2B07\u2B1B\u2B1C\u2B50\u2B55"
                    "\u231A\u231B\u23E9-\u23FA\uFE0F\u20E3]")


@rule("compass:no_emoji")
def no_emoji(text: str) -> bool:
    """No emoji (pictographs, dingbats, flags, emoji presentation selectors)."""
    return _EMOJI.search(text) is None


_URL = re.compile(r"(?i)\b(?:https?://|www\.)\S")


@rule("compass:no_urls")
def no_urls(text: str) -> bool:
    """No web address (http://, https:// or www.)."""
    return _URL.search(text) is None
