"""``ifeval`` (instruction): IFEval-style verifiable instructions in seven languages.

``Write a short text about tea to share with a friend. Answer in Thai. Use 3 bullets (* ).``;
the (non-thinking) teacher writes a few short sentences about the topic from
per-language sentence frames, shaped by the instructions (title, bullets,
highlights, postscript, end phrase, case, quotes, JSON). The verifier spec
uses IFEval's instruction ids and kwargs (``compass/gym/instructions/ifeval.py``);
difficulty 1..5 is the number of instructions, not counting
``language:response_language``, which every non-English item carries. Every teacher response is checked by
the verifier before it is used (langdetect is unreliable on short texts, so
a text it misreads is redrawn), and ``wrong`` breaks exactly one instruction.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace

from compass.gym.instructions.ifeval import count_words, followed
from stages.world.items import Item, verifier_spec
from stages.world.suites import Suite, register_suite

LANGUAGE_NAMES = {"en": "English", "id": "Indonesian", "ms": "Malay", "pt": "Portuguese", "vi": "Vietnamese",
                  "th": "Thai", "zh-TW": "Traditional Chinese"}
TOPICS_EN = ("coffee", "rain", "music", "books", "cats", "football", "trains", "flowers", "tea", "fruit", "travel",
             "bread", "dogs", "rice", "milk", "birds", "movies", "games", "cooking", "swimming")
TOPICS = {
    "en": TOPICS_EN,
    "id": ("kopi", "hujan", "musik", "buku", "kucing", "sepak bola", "kereta", "bunga", "teh", "buah",
           "perjalanan", "roti", "anjing", "nasi", "susu", "burung", "film", "permainan", "memasak", "berenang"),
    "ms": ("kopi", "hujan", "muzik", "buku", "kucing", "bola sepak", "kereta api", "bunga", "teh", "buah",
           "perjalanan", "roti", "anjing", "nasi", "susu", "burung", "filem", "permainan", "memasak", "berenang"),
    "pt": ("café", "chuva", "música", "livros", "gatos", "futebol", "trens", "flores", "chá", "frutas", "viagens",
           "pão", "cães", "arroz", "leite", "pássaros", "filmes", "jogos", "culinária", "natação"),
    "vi": ("cà phê", "mưa", "âm nhạc", "sách", "mèo", "bóng đá", "tàu hỏa", "hoa", "trà", "trái cây", "du lịch",
           "bánh mì", "chó", "cơm", "sữa", "chim", "phim", "trò chơi", "nấu ăn", "bơi lội"),
    "th": ("กาแฟ", "ฝน", "ดนตรี", "หนังสือ", "แมว", "ฟุตบอล", "รถไฟ", "ดอกไม้", "ชา", "ผลไม้", "การเดินทาง", "ขนมปัง",
           "สุนัข", "ข้าว", "นม", "นก", "ภาพยนตร์", "เกม", "การทำอาหาร", "การว่ายน้ำ"),
    "zh-TW": ("咖啡", "雨", "音樂", "書", "貓", "足球", "火車", "花", "茶", "水果", "旅行", "麵包", "狗", "米飯", "牛奶", "鳥",
              "電影", "遊戲", "烹飪", "游泳"),
}
# The lead sentence is 11 words, so that every prompt has 13 or more: data_filter matches a
# shorter eval prompt anywhere inside a training prompt, which a longer one cannot trigger.
AUDIENCES = ("a friend", "your class", "a child", "your family", "a neighbor", "your team", "a pen pal",
             "your readers", "a colleague", "your teacher")
# (sentence frame, its keyword): a keyword occurs in no other frame, topic or end phrase
# of its language, so keyword and forbidden-word instructions are decided by the frames used.
FRAMES = {
    "en": (("I like {t} a lot.", "like"), ("I think about {t} every day.", "think"),
           ("My friend talks about {t} every week.", "friend"), ("At home we often talk about {t}.", "home"),
           ("Many people enjoy {t} in the morning.", "morning"), ("There is always something new about {t}.", "new"),
           ("My family loves {t} very much.", "family"), ("For me {t} is a small joy.", "small")),
    "id": (("Saya sangat suka {t}.", "suka"), ("Saya memikirkan {t} setiap hari.", "memikirkan"),
           ("Teman saya bercerita tentang {t} setiap minggu.", "teman"),
           ("Di rumah kami sering membicarakan {t}.", "rumah"), ("Banyak orang menikmati {t} di pagi hari.", "pagi"),
           ("Selalu ada hal baru tentang {t}.", "baru"), ("Keluarga saya sangat mencintai {t}.", "keluarga"),
           ("Bagi saya {t} adalah kebahagiaan kecil.", "kebahagiaan")),
    "ms": (("Saya sangat gemar {t}.", "gemar"), ("Saya memikirkan {t} setiap hari.", "memikirkan"),
           ("Kawan saya bercakap tentang {t} setiap minggu.", "kawan"),
           ("Di rumah kami selalu berbual tentang {t}.", "berbual"),
           ("Ramai orang menikmati {t} pada waktu pagi.", "ramai"),
           ("Sentiasa ada perkara baharu tentang {t}.", "baharu"), ("Keluarga saya sangat menyayangi {t}.", "keluarga"),
           ("Bagi saya {t} ialah kegembiraan kecil.", "kegembiraan")),
    "pt": (("Eu gosto muito de {t}.", "gosto"), ("Eu penso em {t} todos os dias.", "penso"),
           ("Meu amigo fala sobre {t} toda semana.", "amigo"), ("Em casa nós conversamos sobre {t}.", "casa"),
           ("Muitas pessoas pensam em {t} pela manhã.", "manhã"), ("Sempre existe algo novo sobre {t}.", "novo"),
           ("Minha família adora {t}.", "família"), ("Para mim {t} é uma pequena alegria.", "alegria")),
    "vi": (("Tôi rất thích {t}.", "thích"), ("Tôi nghĩ về {t} mỗi ngày.", "nghĩ"),
           ("Bạn tôi kể về {t} mỗi tuần.", "kể"), ("Ở nhà chúng tôi hay nói về {t}.", "nhà"),
           ("Nhiều người nhắc đến {t} vào buổi sáng.", "sáng"), ("Luôn có điều mới về {t}.", "mới"),
           ("Gia đình tôi rất quý {t}.", "gia đình"), ("Với tôi {t} là niềm vui nhỏ.", "niềm vui")),
    "th": (("ฉันชอบ{t}มาก", "ชอบ"), ("ฉันคิดถึง{t}ทุกวัน", "ทุกวัน"), ("เพื่อนของฉันพูดถึง{t}ทุกสัปดาห์", "เพื่อน"),
           ("ที่บ้านเราคุยกันเรื่อง{t}", "บ้าน"), ("หลายคนนึกถึง{t}ในตอนเช้า", "ตอนเช้า"),
           ("มีเรื่องใหม่เกี่ยวกับ{t}เสมอ", "ใหม่"), ("ครอบครัวของฉันรัก{t}มาก", "ครอบครัว"),
           ("สำหรับฉัน{t}คือความสุข", "ความสุข")),
    "zh-TW": (("我很喜歡{t}。", "喜歡"), ("我每天都會想到{t}。", "每天"), ("我的朋友每週都談論{t}。", "朋友"),
              ("我們在家常常聊{t}。", "在家"), ("很多人早上會想起{t}。", "早上"), ("關於{t}總是有新鮮事。", "新鮮"),
              ("我的家人非常愛{t}。", "家人"), ("對我來說{t}是一種快樂。", "快樂")),
}
# Short, so that "End with: <phrase>" is no long run of words shared by many prompts.
END_PHRASES = {
    "en": ("Have a nice day.", "Thanks for reading.", "See you soon."),
    "id": ("Terima kasih sudah membaca.", "Semoga harimu menyenangkan.", "Sampai jumpa lagi."),
    "ms": ("Terima kasih kerana membaca.", "Semoga hari anda ceria.", "Jumpa lagi."),
    "pt": ("Obrigado pela leitura.", "Tenha um bom dia.", "Até a próxima."),
    "vi": ("Cảm ơn đã đọc.", "Chúc một ngày tốt lành.", "Hẹn gặp lại."),
    "th": ("ขอบคุณที่อ่าน", "ขอให้มีวันที่ดี", "แล้วเจอกันนะ"),
    "zh-TW": ("謝謝你的閱讀。", "祝你有美好的一天。", "下次再見。"),
}
JOINER = {"zh-TW": ""}  # sentences are joined by a space, except in Chinese
SPACED = ("en", "id", "ms", "pt", "vi")
# A teacher answer is at most this many UTF-8 bytes: Thai and Chinese take three bytes a
# character, and the tiny model's answers must stay within ~160 tokens.
MAX_BYTES = 300  # word counts and \b-bounded forbidden words make sense here

# instruction id -> the languages it applies to
IDS = {
    "length_constraints:number_words": SPACED,
    "change_case:english_lowercase": ("en",),
    "change_case:english_capital": ("en",),
    "keywords:existence": tuple(FRAMES),
    "keywords:forbidden_words": SPACED,
    "detectable_format:json_format": tuple(FRAMES),
    "startend:end_checker": tuple(FRAMES),
    "detectable_content:postscript": tuple(FRAMES),
    "detectable_format:number_bullet_lists": tuple(FRAMES),
    "language:response_language": tuple(FRAMES),
    "punctuation:no_comma": tuple(FRAMES),
    "startend:quotation": tuple(FRAMES),
    "detectable_format:title": tuple(FRAMES),
    "detectable_format:number_highlighted_sections": tuple(FRAMES),
}
# pairs of instructions no single answer can follow both of (in this teacher's layout)
CONFLICTS = {
    "detectable_format:json_format": {"detectable_format:number_bullet_lists", "detectable_format:title",
                                      "detectable_format:number_highlighted_sections", "detectable_content:postscript",
                                      "startend:end_checker", "startend:quotation", "change_case:english_capital"},
    "startend:quotation": {"detectable_format:number_bullet_lists"},
    "detectable_format:number_bullet_lists": {"detectable_format:number_highlighted_sections"},
    "change_case:english_lowercase": {"change_case:english_capital"},
}


def conflict(a: str, b: str) -> bool:
    return b in CONFLICTS.get(a, ()) or a in CONFLICTS.get(b, ())


@dataclass(frozen=True)
class Plan:
    """What the teacher writes; ``render`` turns it into text. ``lang`` is the language
    the text is written in (a wrong response may switch it)."""
    lang: str
    topic: int
    frames: tuple[int, ...]
    ps: tuple[str, int] | None = None      # (marker, frame of the postscript)
    end: int | None = None                 # index into END_PHRASES
    title: bool = False
    layout: str = "plain"                  # plain | bullets | highlight
    n_highlight: int = 0
    case: str | None = None                # None | lower | upper
    wrap: str | None = None                # None | json | quote
    comma: bool = False                    # a comma slipped in (only wrong responses)
    max_words: int | None = None           # the body cut short (only wrong responses)


def sentence(lang: str, frame: int, topic: int) -> str:
    return FRAMES[lang][frame][0].format(t=TOPICS[lang][topic])


def render(plan: Plan) -> str:
    lang = plan.lang
    sents = [sentence(lang, f, plan.topic) for f in plan.frames]
    if plan.comma:
        first = sents[0]
        sents[0] = (first[:-1] if first[-1] in ".。" else first) + ","
    if plan.layout == "bullets":
        body = "\n".join("* " + s for s in sents)
    else:
        if plan.layout == "highlight":
            sents = [f"*{s}*" if i < plan.n_highlight else s for i, s in enumerate(sents)]
        body = JOINER.get(lang, " ").join(sents)
    if plan.max_words is not None:
        body = " ".join(body.split()[:plan.max_words])
    parts = []
    if plan.title:
        topic = TOPICS[lang][plan.topic]
        parts.append(f"<<{topic[0].upper() + topic[1:]}>>")
    parts.append(body)
    if plan.ps:
        parts.append(f"{plan.ps[0].rstrip('.')}. {sentence(lang, plan.ps[1], plan.topic)}")
    if plan.end is not None:
        parts.append(END_PHRASES[lang][plan.end])
    text = "\n".join(parts)
    text = text.lower() if plan.case == "lower" else text.upper() if plan.case == "upper" else text
    if plan.wrap == "json":
        return json.dumps({"answer": text}, ensure_ascii=False)
    return f'"{text}"' if plan.wrap == "quote" else text


# -- instructions: id -> prompt sentence ----------------------------------------------
# Short sentences: the ones without a parameter are the same in every prompt, and a
# run of 13 such words that only one or two eval prompts hold would bar every
# training prompt that has it (see build.py); ``prompt_lines`` interleaves them.
FIXED_TEXT = {"change_case:english_lowercase": "All lowercase.",
              "change_case:english_capital": "All capitals.",
              "detectable_format:json_format": "Answer in JSON.",
              "punctuation:no_comma": "No commas.",
              "startend:quotation": "Use double quotes.",
              "detectable_format:title": "Add a <<title>>."}
# instructions whose sentence carries a parameter drawn from many values
VARIED = ("length_constraints:number_words", "keywords:existence", "keywords:forbidden_words")


def instruction_text(iid: str, kw: dict, lang: str) -> str:
    if iid == "length_constraints:number_words":
        return f"Use {kw['relation']} {kw['num_words']} words."
    if iid == "keywords:existence":
        ks = kw["keywords"]
        return f"Include the word {ks[0]}." if len(ks) == 1 else f"Include the words {ks[0]} and {ks[1]}."
    if iid == "keywords:forbidden_words":
        ws = kw["forbidden_words"]
        return f"Avoid the word {ws[0]}." if len(ws) == 1 else f"Avoid the words {ws[0]} and {ws[1]}."
    if iid == "startend:end_checker":
        return f"End with: {kw['end_phrase']}"
    if iid == "detectable_content:postscript":
        return f"Add a {kw['postscript_marker'].rstrip('.')}. line."
    if iid == "detectable_format:number_bullet_lists":
        return f"Use {kw['num_bullets']} bullets (* )."
    if iid == "detectable_format:number_highlighted_sections":
        return f"Highlight {kw['num_highlights']} *parts*."
    if iid == "language:response_language":
        return f"Answer in {LANGUAGE_NAMES[lang]}."
    return FIXED_TEXT[iid]


def prompt_order(rng: random.Random, ids: list[str]) -> list[int]:
    """A random order of the instructions in which no two fixed sentences meet when avoidable."""
    fixed = [i for i, iid in enumerate(ids) if iid not in VARIED]
    varied = [i for i in range(len(ids)) if i not in fixed]
    rng.shuffle(fixed)
    rng.shuffle(varied)
    order = []
    while fixed or varied:  # a varied one first: the lead sentence is followed by a parameter
        if varied:
            order.append(varied.pop())
        if fixed:
            order.append(fixed.pop())
    return order


def pick_ids(rng: random.Random, n: int, lang: str) -> list[str]:
    """``n`` compatible instructions besides the response language (a non-English item also carries that)."""
    base = ["language:response_language"] if lang != "en" else []
    pool = [i for i in IDS if lang in IDS[i] and i not in base]
    while True:  # some first picks leave too few compatible ids (JSON rules out most formats): draw again
        rng.shuffle(pool)
        ids = list(base)
        for iid in pool:
            if len(ids) < n + len(base) and not any(conflict(iid, other) for other in ids):
                ids.append(iid)
        if len(ids) == n + len(base):
            return ids


def plan_for(rng: random.Random, ids: list[str], lang: str) -> Plan:
    listed = "detectable_format:number_bullet_lists" in ids or "detectable_format:number_highlighted_sections" in ids
    # a title, a postscript and an end phrase each add a line: keep the whole answer short
    extra = sum(i in ids for i in ("detectable_format:title", "detectable_content:postscript", "startend:end_checker"))
    n_body = rng.randint(2, 3 if extra < 2 else 2) if listed else rng.randint(1, 3 if extra < 2 else 2)
    order = rng.sample(range(len(FRAMES[lang])), len(FRAMES[lang]))
    plan = Plan(lang, rng.randrange(len(TOPICS[lang])), tuple(order[:n_body]))
    if "detectable_content:postscript" in ids:
        plan = replace(plan, ps=(rng.choice(["P.S.", "P.P.S"]), order[n_body]))
    if "startend:end_checker" in ids:
        plan = replace(plan, end=rng.randrange(len(END_PHRASES[lang])))
    if "detectable_format:title" in ids:
        plan = replace(plan, title=True)
    if "detectable_format:number_bullet_lists" in ids:
        plan = replace(plan, layout="bullets")
    if "detectable_format:number_highlighted_sections" in ids:
        plan = replace(plan, layout="highlight", n_highlight=rng.randint(1, n_body))
    if "change_case:english_lowercase" in ids:
        plan = replace(plan, case="lower")
    if "change_case:english_capital" in ids:
        plan = replace(plan, case="upper")
    if "detectable_format:json_format" in ids:
        plan = replace(plan, wrap="json")
    if "startend:quotation" in ids:
        plan = replace(plan, wrap="quote")
    return plan


def used_frames(plan: Plan) -> list[int]:
    return list(plan.frames) + ([plan.ps[1]] if plan.ps else [])


def kwargs_for(rng: random.Random, iid: str, plan: Plan, text: str) -> dict:
    lang = plan.lang
    if iid == "length_constraints:number_words":
        n = count_words(text)
        if rng.random() < 0.5:
            return {"num_words": max(1, n - rng.randint(0, 3)), "relation": "at least"}
        return {"num_words": n + rng.randint(1, 3), "relation": "less than"}
    if iid == "keywords:existence":
        keys = [FRAMES[lang][f][1] for f in plan.frames]
        return {"keywords": rng.sample(keys, min(len(keys), rng.randint(1, 2)))}
    if iid == "keywords:forbidden_words":
        unused = [FRAMES[lang][f][1] for f in range(len(FRAMES[lang])) if f not in used_frames(plan)]
        return {"forbidden_words": rng.sample(unused, rng.randint(1, 2))}
    if iid == "startend:end_checker":
        return {"end_phrase": END_PHRASES[lang][plan.end]}
    if iid == "detectable_content:postscript":
        return {"postscript_marker": plan.ps[0]}
    if iid == "detectable_format:number_bullet_lists":
        return {"num_bullets": len(plan.frames)}
    if iid == "detectable_format:number_highlighted_sections":
        return {"num_highlights": plan.n_highlight}
    if iid == "language:response_language":
        return {"language": lang}
    return {}


def make_ifeval(rng: random.Random, item_id: str, level: int, language: str = "en") -> Item:
    lang = language if language in FRAMES else "en"
    for _ in range(100):  # redraw what is too long or what langdetect misreads (short texts)
        ids = pick_ids(rng, level, lang)
        plan = plan_for(rng, ids, lang)
        text = render(plan)
        if len(text.encode()) > MAX_BYTES:
            continue
        kwargs = [kwargs_for(rng, iid, plan, text) for iid in ids]
        spec = {"instruction_id_list": ids, "kwargs": kwargs}
        if all(followed(spec, text)):
            break
    else:
        raise RuntimeError(f"ifeval: no teacher text follows {ids} in {lang}")
    order = prompt_order(rng, ids)  # the spec lists the instructions in the prompt's order
    spec = {"instruction_id_list": [ids[i] for i in order], "kwargs": [kwargs[i] for i in order]}
    lines = [instruction_text(iid, kw, lang) for iid, kw in zip(spec["instruction_id_list"], spec["kwargs"])]
    lead = f"Write a short text about {TOPICS_EN[plan.topic]} to share with {rng.choice(AUDIENCES)}."
    prompt = " ".join([lead] + lines)
    return Item(item_id, "instruction", "ifeval", lang, prompt, text, verifier_spec("ifeval", **spec), level, text,
                {"plan": plan, "spec": spec})


# -- wrong: break one instruction ----------------------------------------------------
def _unused(plan: Plan, spec: dict) -> list[int]:
    """Frames the plan may add without touching a forbidden word."""
    banned = set()
    for iid, kw in zip(spec["instruction_id_list"], spec["kwargs"]):
        if iid == "keywords:forbidden_words":
            banned |= set(kw["forbidden_words"])
    return [f for f in range(len(FRAMES[plan.lang])) if f not in used_frames(plan)
            and FRAMES[plan.lang][f][1] not in banned]


def broken(plan: Plan, iid: str, kw: dict, spec: dict) -> Plan | None:
    """``plan`` with instruction ``iid`` broken, or None when this plan cannot break it."""
    lang, frames, spare = plan.lang, plan.frames, _unused(plan, spec)
    if iid == "length_constraints:number_words":
        if kw["relation"] == "less than":
            return replace(plan, frames=frames + (spare[0],)) if spare else None
        if len(frames) > 1:
            return replace(plan, frames=frames[:-1], n_highlight=min(plan.n_highlight, len(frames) - 1))
        words = len(render(plan).split())
        short = [replace(plan, max_words=m) for m in range(words - 1, 0, -1)]
        return next((p for p in short if count_words(render(p)) < kw["num_words"]), None)
    if iid == "keywords:existence":
        key = kw["keywords"][0]
        keep = tuple(f for f in frames if FRAMES[lang][f][1] != key)
        swap = [f for f in spare if FRAMES[lang][f][1] not in kw["keywords"]]
        return replace(plan, frames=keep + (swap[0],)) if swap else None
    if iid == "keywords:forbidden_words":
        word = kw["forbidden_words"][0]
        return replace(plan, frames=frames + tuple(f for f in range(len(FRAMES[lang])) if FRAMES[lang][f][1] == word))
    if iid == "detectable_format:number_bullet_lists":
        return replace(plan, frames=frames[:-1]) if len(frames) > 1 else None
    if iid == "language:response_language":
        return replace(plan, lang="en" if lang != "en" else "id", case=None)
    return {"change_case:english_lowercase": lambda: replace(plan, case=None),
            "change_case:english_capital": lambda: replace(plan, case=None),
            "detectable_format:json_format": lambda: replace(plan, wrap=None),
            "startend:quotation": lambda: replace(plan, wrap=None),
            "startend:end_checker": lambda: replace(plan, end=None),
            "detectable_content:postscript": lambda: replace(plan, ps=None),
            "punctuation:no_comma": lambda: replace(plan, comma=True),
            "detectable_format:title": lambda: replace(plan, title=False),
            "detectable_format:number_highlighted_sections": lambda: replace(plan, layout="plain", n_highlight=0),
            }[iid]()


def wrong_ifeval_response(rng: random.Random, item: Item) -> str:
    plan, spec = item.extra["plan"], item.extra["spec"]
    order = rng.sample(range(len(spec["instruction_id_list"])), len(spec["instruction_id_list"]))
    for i in order:
        bad = broken(plan, spec["instruction_id_list"][i], spec["kwargs"][i], spec)
        if bad is not None:
            text = render(bad)
            if not all(followed(spec, text)):
                return text
    return ""  # nothing breakable: an empty answer follows no instruction


SUITE = register_suite(Suite(
    name="ifeval", domain="instruction", make=make_ifeval, wrong=wrong_ifeval_response,
    languages=("en", "id", "vi", "pt", "ms", "th", "zh-TW"), reasoning=False,
    description="IFEval-style instructions (length, case, keywords, format, start/end, language); "
                "short teacher texts from per-language sentence frames"))
