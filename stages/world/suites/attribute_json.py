"""``attribute_json`` (ecommerce): extract a listing's attributes to JSON following a schema.

The prompt shows the schema compactly (``{"brand": "string", ...}``); the
verifier spec holds the same schema as JSON Schema (every key required, no
others), and the reference is the gold object as a JSON string. The
(non-thinking) teacher answers with that JSON, keys in the schema's order
(random per item). Difficulty: level 1 asks for brand and color, 2 adds
material, 3 adds the pack quantity (an integer), 4 states the values in a
sentence instead of ``Key: value`` lines, 5 adds distractors (another color
on offer, another brand mentioned).
"""
from __future__ import annotations

import json
import random

from stages.world.items import Item, verifier_spec
from stages.world.suites import Suite, register_suite
from stages.world.suites.catalog import (BRANDS, COLORS, DEPARTMENT_OF, LANGUAGES, MATERIALS, MODELS,
                                         NOUN_MATERIALS, NOUNS, OTHER_BRAND_PHRASES, color_name, draw_noun,
                                         pick_adjective, render_title, sentences)

FIELDS = {1: ("brand", "color"), 2: ("brand", "color", "material"), 3: ("brand", "color", "material", "quantity")}
TYPES = {"brand": "string", "color": "string", "material": "string", "quantity": "integer"}
# Instruction first, schema last: neither template run reaches 13 n-gram tokens
# (one per character in Chinese and Thai, hence their short wording).
INSTRUCTIONS = {
    "en": "Extract the attributes as JSON (schema below).",
    "zh-TW": "擷取屬性，輸出 JSON：",
    "id": "Ekstrak atribut sebagai JSON (skema di bawah).",
    "vi": "Trích xuất JSON theo lược đồ dưới đây.",
    "th": "ตอบเป็น JSON:",
    "pt": "Extraia os atributos em JSON (esquema abaixo).",
    "ms": "Ekstrak atribut dalam JSON (skema di bawah).",
}
LINES = {   # levels 1-3: one "Key: value" line per attribute
    "en": {"color": "Color: {v}", "material": "Material: {v}", "quantity": "Pack of {v}"},
    "zh-TW": {"color": "顏色：{v}", "material": "材質：{v}", "quantity": "數量：{v}入"},
    "id": {"color": "Warna: {v}", "material": "Bahan: {v}", "quantity": "Isi {v} pcs"},
    "vi": {"color": "Màu sắc: {v}", "material": "Chất liệu: {v}", "quantity": "Bộ {v} cái"},
    "th": {"color": "สี: {v}", "material": "วัสดุ: {v}", "quantity": "จำนวน {v} ชิ้น"},
    "pt": {"color": "Cor: {v}", "material": "Material: {v}", "quantity": "Kit com {v} unidades"},
    "ms": {"color": "Warna: {v}", "material": "Bahan: {v}", "quantity": "Pek {v} unit"},
}
PROSE = {   # levels 4-5: the same values in a sentence
    "en": "Made of {material} in {color}, sold in packs of {quantity}",
    "zh-TW": "採用{material}材質，{color}款，一組{quantity}入",
    "id": "Terbuat dari {material}, warna {color}, isi {quantity} pcs per paket",
    "vi": "Làm từ {material}, màu {color}, mỗi bộ {quantity} cái",
    "th": "ตัวนี้สี{color} ทำจาก{material} มี {quantity} ชิ้น",
    "pt": "Produto de {material} na cor {color}, kit com {quantity} unidades",
    "ms": "Diperbuat daripada {material}, warna {color}, {quantity} unit setiap pek",
}
ALSO_COLOR = {   # level 5: a color on offer that is not this item's
    "en": "Also available in {x}",
    "zh-TW": "另有{x}可選",
    "id": "Tersedia juga warna {x}",
    "vi": "Ngoài ra còn có màu {x}",
    "th": "มีสี{x}ด้วย",
    "pt": "Também disponível na cor {x}",
    "ms": "Turut tersedia dalam warna {x}",
}


def json_schema(fields: tuple[str, ...]) -> dict:
    return {"type": "object", "properties": {f: {"type": TYPES[f]} for f in fields},
            "required": list(fields), "additionalProperties": False}


def make_attribute_json(rng: random.Random, item_id: str, level: int, lang: str) -> Item:
    # keys in a random order (a JSON object has none): the teacher follows the shown
    # order, and the schema line is not the same 8 n-gram tokens in every prompt
    fields = tuple(rng.sample(FIELDS[min(level, 3)], len(FIELDS[min(level, 3)])))
    cat, idx = draw_noun(rng, with_attributes=True)
    noun = NOUNS[cat][lang][idx]
    color = rng.choice(sorted(COLORS))
    gold = {"brand": rng.choice(BRANDS), "color": color_name(color, lang),
            "material": MATERIALS[rng.choice(NOUN_MATERIALS[cat][idx])][lang], "quantity": rng.randint(2, 12)}
    gold = {f: gold[f] for f in fields}
    title = render_title(lang, brand=gold["brand"], noun=noun, adj=pick_adjective(rng, lang, noun),
                         model=rng.choice(MODELS))
    other_color = None
    if level <= 3:  # the lines follow the schema's order
        details = "\n".join(LINES[lang][f].format(v=gold[f]) for f in fields if f != "brand")
    else:
        said = [PROSE[lang].format(material=gold["material"], color=gold["color"], quantity=gold["quantity"])]
        if level >= 5:
            other_color = color_name(rng.choice([c for c in sorted(COLORS) if c != color]), lang)
            other_brand = rng.choice([b for b in BRANDS if b != gold["brand"]])
            phrase = OTHER_BRAND_PHRASES[lang][0 if DEPARTMENT_OF[cat] == "tech" else 1]
            said += [ALSO_COLOR[lang].format(x=other_color), phrase.format(x=other_brand)]
            rng.shuffle(said)
        details = sentences(lang, said)
    display = json.dumps({f: TYPES[f] for f in fields})
    prompt = f"{INSTRUCTIONS[lang]}\n{title}\n{details}\n{display}"
    answer = json.dumps(gold, ensure_ascii=False)
    extra = {"gold": gold, "fields": fields, "other_color": other_color}
    return Item(item_id, "ecommerce", "attribute_json", lang, prompt, answer,
                verifier_spec("json_schema", schema=json_schema(fields)), level, answer, extra)


def wrong_attribute_json(rng: random.Random, item: Item) -> str:
    """A plausible extraction mistake: a wrong value (the distractor color when there is
    one), a missing key, a quoted number, or JSON cut short."""
    gold = dict(item.extra["gold"])
    kind = rng.choice(["value", "missing", "truncated"] + (["quoted"] if "quantity" in gold else []))
    if kind == "value":
        names = [color_name(c, item.language) for c in sorted(COLORS)]
        gold["color"] = item.extra["other_color"] or rng.choice([n for n in names if n != gold["color"]])
    elif kind == "missing":
        del gold[rng.choice(sorted(gold))]
    elif kind == "quoted":
        gold["quantity"] = str(gold["quantity"])
    text = json.dumps(gold, ensure_ascii=False)
    return text[:-1] if kind == "truncated" else text


def alt_attribute_json(rng: random.Random, item: Item) -> str:
    """The same object in other words: fenced, pretty-printed, or keys in another order."""
    gold = item.extra["gold"]
    kind = rng.choice(["fenced", "indented", "reordered"])
    if kind == "fenced":
        return f"```json\n{item.response}\n```"
    if kind == "indented":
        return json.dumps(gold, ensure_ascii=False, indent=2)
    return json.dumps(dict(reversed(list(gold.items()))), ensure_ascii=False)


SUITE = register_suite(Suite(
    name="attribute_json", domain="ecommerce", make=make_attribute_json, wrong=wrong_attribute_json,
    alt=alt_attribute_json, languages=LANGUAGES,
    description="product attributes to JSON following a schema in the prompt; scored per field"))
