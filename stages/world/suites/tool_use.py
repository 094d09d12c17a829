"""``tool_use`` (tool): pick the tools a request needs and fill their arguments.

The prompt lists a few tool schemas (JSON, one per line: the tools the request
needs plus a distractor) and a user request; the teacher names the calls in a
short thought, then writes one ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
per call. The reference is the JSON list of gold calls (verifier
``{"type": "tool_call"}``). Difficulty 1..5 sets the number of calls
(1, 1, 2, 2, 3) and of arguments per call (one at level 1, several from level
4 on); at level 5 one tool is called twice, with other arguments. JSON is written without spaces, to keep
prompts and answers within the tiny model's budget.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Callable

from stages.world.items import Item, verifier_spec
from stages.world.suites import Suite, register_suite

TOOL_VERIFIER = verifier_spec("tool_call")
CITIES = ("Paris", "Tokyo", "Jakarta", "Hanoi", "Bangkok", "Lisbon", "Taipei", "Kuala Lumpur", "Rome", "Cairo",
          "Lima", "Oslo", "Seoul", "Delhi", "Madrid", "Berlin", "Sydney", "Toronto", "Nairobi", "Dubai", "Manila",
          "Vienna", "Prague", "Dublin", "Chicago", "Boston", "Denver", "Osaka", "Surabaya", "Porto")
CURRENCIES = ("USD", "EUR", "JPY", "IDR", "THB", "VND", "MYR", "TWD", "BRL", "GBP", "SGD", "KRW")
PRODUCTS = ("running shoes", "phone case", "rice cooker", "desk lamp", "yoga mat", "water bottle", "backpack",
            "headphones", "coffee mug", "umbrella", "sunglasses", "keyboard", "notebook", "blender", "pillow",
            "toothbrush", "wallet", "tea kettle", "face mask", "charger")
TASKS = ("call mom", "buy milk", "water the plants", "pay rent", "feed the cat", "book a dentist",
         "send the report", "pick up the kids", "take my pills", "walk the dog", "check the oven", "stretch")
PHRASES = ("good morning", "thank you", "where is the station", "how much is this", "see you tomorrow",
           "I am hungry", "the bill please", "nice to meet you", "help me please", "happy birthday")
TARGETS = ("Spanish", "French", "Thai", "Indonesian", "Vietnamese", "Portuguese", "Malay", "Japanese", "German")
CONTACTS = ("Ana", "Ben", "Chen", "Dewi", "Eli", "Farah", "Hana", "Ivan", "Linh", "Mateo", "Nia", "Omar", "Priya",
            "Rosa", "Siti", "Wei")


@dataclass(frozen=True)
class Tool:
    """A function the user may need, under several API spellings: each item draws one
    name and one key per parameter, so the model must read the schema it is shown."""
    names: tuple[str, ...]
    params: tuple[tuple[tuple[str, ...], str], ...]   # (key spellings, JSON type) per parameter
    draw: Callable[[random.Random], tuple]            # random argument values, in parameter order
    ask: str                                          # the request phrase, ``{0}``.. the values


@dataclass(frozen=True)
class Api:
    """One spelling of a tool: its name and parameter keys."""
    tool: str
    name: str
    keys: tuple[str, ...]

    def schema(self) -> str:
        types = [t for _, t in TOOLS[self.tool].params]
        return compact({"name": self.name, "parameters": dict(zip(self.keys, types))})


def compact(obj) -> str:
    """JSON without spaces: the shortest text for the tiny model's token budget."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _time(rng: random.Random) -> str:
    return f"{rng.randint(6, 21)}:{rng.choice(['00', '15', '30', '45'])}"


PLACE = (("city", "location", "place"), "string")
TOOLS = {
    "weather": Tool(("get_weather", "weather_now", "fetch_weather", "current_weather"), (PLACE,),
                    lambda r: (r.choice(CITIES),), "check the weather in {0}"),
    "time": Tool(("get_time", "local_time", "time_in", "current_time"), (PLACE,),
                 lambda r: (r.choice(CITIES),), "tell me the time in {0}"),
    "order": Tool(("track_order", "order_status", "where_is_order", "get_order"),
                  ((("order_id", "id", "order"), "string"),), lambda r: (f"A{r.randint(1000, 9999)}",),
                  "track order {0}"),
    "currency": Tool(("convert_currency", "currency_convert", "fx_convert", "exchange"),
                     ((("amount", "value", "sum"), "integer"), (("from", "source", "base"), "string"),
                      (("to", "target", "quote"), "string")),
                     lambda r: (r.randint(5, 999), *r.sample(CURRENCIES, 2)), "convert {0} {1} to {2}"),
    "search": Tool(("search_products", "find_products", "product_search", "shop_search"),
                   ((("query", "keywords", "item"), "string"), (("max_price", "budget", "price_limit"), "integer")),
                   lambda r: (r.choice(PRODUCTS), r.randint(2, 60) * 5), "find a {0} under {1} dollars"),
    "cart": Tool(("add_to_cart", "cart_add", "put_in_cart", "basket_add"),
                 ((("product_id", "sku", "item_id"), "string"), (("quantity", "qty", "count"), "integer")),
                 lambda r: (f"P{r.randint(100, 999)}", r.randint(1, 9)), "add {1} of item {0} to my cart"),
    "reminder": Tool(("set_reminder", "remind_me", "create_reminder", "new_reminder"),
                     ((("time", "at", "when"), "string"), (("text", "note", "task"), "string")),
                     lambda r: (_time(r), r.choice(TASKS)), "remind me at {0} to {1}"),
    "translate": Tool(("translate_text", "translate", "to_language", "translator"),
                      ((("text", "phrase", "source_text"), "string"), (("target", "language", "lang"), "string")),
                      lambda r: (r.choice(PHRASES), r.choice(TARGETS)), 'translate "{0}" into {1}'),
    "taxi": Tool(("book_taxi", "order_taxi", "call_cab", "ride_request"),
                 ((("pickup", "origin", "start"), "string"), (("dropoff", "destination", "end"), "string")),
                 lambda r: tuple(r.sample(CITIES, 2)), "book a taxi from {0} to {1}"),
    "message": Tool(("send_message", "message", "text_contact", "notify"),
                    ((("to", "contact", "recipient"), "string"), (("text", "body", "content"), "string")),
                    lambda r: (r.choice(CONTACTS), r.choice(TASKS)), "tell {0} to {1}"),
}
ONE_ARG = tuple(t for t in sorted(TOOLS) if len(TOOLS[t].params) == 1)
N_CALLS = {1: 1, 2: 1, 3: 2, 4: 2, 5: 3}


def spell(rng: random.Random, tool: str) -> Api:
    t = TOOLS[tool]
    return Api(tool, rng.choice(t.names), tuple(rng.choice(keys) for keys, _ in t.params))


def draw_calls(rng: random.Random, level: int) -> tuple[list[dict], list[str], dict[str, Api]]:
    """Gold calls, the request phrases and the spelling of each tool used."""
    multi = [t for t in sorted(TOOLS) if t not in ONE_ARG]
    tools = [rng.choice(ONE_ARG if level == 1 else multi)]
    if level >= 3:  # level 3 adds any tool, levels 4-5 a tool with several arguments
        tools.append(rng.choice(sorted(TOOLS) if level == 3 else multi))
    if level == 5:  # and calls one of the two again (three calls, two schemas: the prompt stays short)
        tools.insert(rng.randint(0, 2), rng.choice(tools))
    apis = {t: spell(rng, t) for t in sorted(set(tools))}
    calls, asks = [], []
    for tool in tools:
        for _ in range(20):  # the same call twice would be one request
            values = TOOLS[tool].draw(rng)
            call = {"name": apis[tool].name, "arguments": dict(zip(apis[tool].keys, values))}
            if call not in calls:
                break
        calls.append(call)
        asks.append(TOOLS[tool].ask.format(*values))
    return calls, asks, apis


def request(asks: list[str]) -> str:
    text = asks[0] if len(asks) == 1 else ", ".join(asks[:-1]) + " and " + asks[-1]
    return text[0].upper() + text[1:] + "."


def call_block(call: dict, args_first: bool = False) -> str:
    obj = {"arguments": call["arguments"], "name": call["name"]} if args_first else call
    return f"<tool_call>{compact(obj)}</tool_call>"


def tool_response(calls: list[dict], args_first: bool = False) -> str:
    names = ", ".join(c["name"] for c in calls)
    return f"<think>Calls: {names}.</think>" + "\n".join(call_block(c, args_first) for c in calls)


def make_tool(rng: random.Random, item_id: str, level: int, language: str = "en") -> Item:
    calls, asks, apis = draw_calls(rng, level)
    shown = list(apis.values()) + [spell(rng, rng.choice([t for t in sorted(TOOLS) if t not in apis]))]
    rng.shuffle(shown)
    prompt = "Tools:\n" + "\n".join(api.schema() for api in shown) + "\nUser: " + request(asks)
    return Item(item_id, "tool", "tool_call", "en", prompt, compact(calls), TOOL_VERIFIER,
                level, tool_response(calls), {"calls": calls, "apis": apis})


def wrong_tool_response(rng: random.Random, item: Item) -> str:
    """A wrong argument value, or (with several calls) a call left out."""
    calls = [dict(c, arguments=dict(c["arguments"])) for c in item.extra["calls"]]
    if len(calls) > 1 and rng.random() < 0.4:
        del calls[rng.randrange(len(calls))]
        return tool_response(calls)
    call = rng.choice(calls)
    api = next(a for a in item.extra["apis"].values() if a.name == call["name"])
    i = rng.randrange(len(api.keys))
    old = call["arguments"][api.keys[i]]
    new = old
    while new == old:
        new = old + rng.choice([-10, -1, 1, 10]) if isinstance(old, int) else TOOLS[api.tool].draw(rng)[i]
    call["arguments"][api.keys[i]] = new
    return tool_response(calls)


def alt_tool_response(rng: random.Random, item: Item) -> str:
    """The same calls in another order (several calls) or with the keys the other way round (one call)."""
    calls = item.extra["calls"]
    if len(calls) > 1:
        return tool_response(calls[::-1])
    return tool_response(calls, args_first=True)


SUITE = register_suite(Suite(
    name="tool_use", domain="tool", make=make_tool, wrong=wrong_tool_response, alt=alt_tool_response,
    languages=("en",), reasoning=True,
    description="tool calls for a user request from JSON tool schemas; several calls per turn at higher levels"))
