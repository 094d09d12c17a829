"""``math_word`` (math): short word problems with exact integer answers.

Five stories (shopping, discount, unit rate, ages, sharing), each a small
program of binary steps over the story's numbers. The teacher writes one
step per operation, ``<think>3 * 4 = 12. 2 * 5 = 10. 12 + 10 = 22.</think>22``;
difficulty 1..5 is the number of steps (about one more per level) and the
size of the numbers. Every division is exact and every value positive.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from stages.world.items import Item, verifier_spec
from stages.world.suites import Suite, register_suite
from stages.world.suites.arithmetic import SLIPS, math_response

MATH_VERIFIER = verifier_spec("math_exact")

NAMES = ("Ana", "Ben", "Chen", "Dewi", "Eli", "Farah", "Gus", "Hana", "Ivan", "Jade", "Kofi", "Lina", "Mateo",
         "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tara", "Umar", "Vera", "Wei", "Xena", "Yuki", "Zane",
         "Budi", "Linh", "Joao", "Siti", "Arun", "Mia", "Leo", "Ivy", "Noah", "Ema", "Tom", "Ayu", "Kai", "Rin")
GOODS = ("pen", "notebook", "apple", "mango:mangoes", "cup", "plate", "sock", "hat", "candle", "towel", "pencil",
         "eraser", "bowl", "spoon", "lamp", "mug", "bag", "scarf:scarves", "battery:batteries", "ruler", "orange",
         "lemon", "stamp", "card", "bottle", "brush:brushes", "bucket", "ribbon", "bell", "kite")
THINGS = ("marbles", "stickers", "cookies", "beads", "shells", "coins", "grapes", "crayons", "buttons", "nuts",
          "cherries", "candies", "seeds", "rocks", "tokens", "blocks")
PERCENTS = {10: 10, 20: 5, 25: 4, 50: 2}  # percent off -> the divisor that gives the discount
BILLS = (20, 50, 100, 200, 500, 1000)


def noun(good: str, plural: bool = True) -> str:
    one, _, many = good.partition(":")
    return (many or one + "s") if plural else one


def a_noun(good: str) -> str:
    one = noun(good, plural=False)
    return ("an " if one[0] in "aeiou" else "a ") + one


@dataclass(frozen=True)
class Step:
    """``a op b``; an operand is an int literal or ``("s", i)``, the value of step ``i``."""
    a: int | tuple
    op: str
    b: int | tuple


def ref(i: int) -> tuple:
    return ("s", i)


def run(steps: list[Step], slip: tuple[int, int] | None = None) -> tuple[list[str], int]:
    """Teacher lines ``a op b = c.`` and the answer; ``slip=(step, delta)`` errs at that step and carries on."""
    vals: list[int] = []
    lines = []
    for i, st in enumerate(steps):
        a = vals[st.a[1]] if isinstance(st.a, tuple) else st.a
        b = vals[st.b[1]] if isinstance(st.b, tuple) else st.b
        c = a + b if st.op == "+" else a - b if st.op == "-" else a * b if st.op == "*" else a // b
        if slip is not None and slip[0] == i:
            c += slip[1]
        vals.append(c)
        lines.append(f"{a} {st.op} {b} = {c}.")
    return lines, vals[-1]


def slippable(steps: list[Step]) -> list[int]:
    """Steps whose error cannot reach a later division (which would then not be exact)."""
    feeds = {i: set() for i in range(len(steps))}
    for j, st in enumerate(steps):
        for x in (st.a, st.b):
            if isinstance(x, tuple):
                feeds[x[1]].add(j)

    def reaches_division(i: int) -> bool:
        return any(steps[j].op == "/" or reaches_division(j) for j in feeds[i])
    return [i for i in range(len(steps)) if not reaches_division(i)]


# -- stories: (rng, level) -> (prompt, steps) -------------------------------------
def shopping(rng: random.Random, level: int) -> tuple[str, list[Step]]:
    kinds = {1: 1, 2: 2, 3: 2, 4: 2, 5: 3}[level]
    lo, hi = {1: (2, 9), 2: (2, 9), 3: (5, 25), 4: (5, 25), 5: (10, 40)}[level]
    name = rng.choice(NAMES)
    goods = rng.sample(GOODS, kinds)
    buys, steps = [], []
    for g in goods:
        q, p = rng.randint(2, 9), rng.randint(lo, hi)
        buys.append(f"{q} {noun(g)} at {p} dollars each")
        steps.append(Step(q, "*", p))
    for k in range(1, kinds):
        steps.append(Step(ref(len(steps) - 1) if k > 1 else ref(0), "+", ref(k)))
    text = f"{name} buys " + (buys[0] if kinds == 1 else ", ".join(buys[:-1]) + " and " + buys[-1]) + "."
    if level < 4:
        return f"{text} How many dollars does {name} spend?", steps
    total = run(steps)[1]
    bill = next(b for b in BILLS if b > total)
    steps.append(Step(bill, "-", ref(len(steps) - 1)))
    return f"{text} {name} pays with a {bill} dollar bill. How much change does {name} get in dollars?", steps


def discount(rng: random.Random, level: int) -> tuple[str, list[Step]]:
    pct = rng.choice(sorted(PERCENTS))
    div = PERCENTS[pct]
    price = div * rng.randint(2 if level <= 3 else 4, 25 if level <= 2 else 40)
    good, name = rng.choice(GOODS), rng.choice(NAMES)
    steps = [Step(price, "/", div), Step(price, "-", ref(0))]
    if level <= 2:  # the question (save or pay) is the only difference between levels 1 and 2
        text = f"{name} buys {a_noun(good)} that costs {price} dollars and is {pct}% off."
        return f"{text} How many dollars does {name} {'save' if level == 1 else 'pay'}?", steps[:level]
    q = rng.randint(2, 6)
    steps.append(Step(q, "*", ref(1)))
    text = f"{name} buys {q} {noun(good)} that cost {price} dollars each and are {pct}% off."
    if level >= 4:
        coupon = 5 * rng.randint(1, min(9, (run(steps)[1] - 1) // 5))  # the total stays positive
        steps.append(Step(ref(2), "-", coupon))
        text = f"{text} {name} uses a {coupon} dollar coupon."
    if level == 5:
        ship = rng.randint(3, 15)
        steps.append(Step(ref(3), "+", ship))
        text = f"{text} Shipping is {ship} dollars."
    return f"{text} How many dollars does {name} pay?", steps


def unit_rate(rng: random.Random, level: int) -> tuple[str, list[Step]]:
    n = rng.randint(2, 9)
    unit = rng.randint(2, 9 if level <= 2 else 30)
    goods, name = rng.sample(GOODS, 2), rng.choice(NAMES)
    text = f"{n} {noun(goods[0])} cost {n * unit} dollars."
    steps = [Step(n * unit, "/", n)]
    if level == 1:
        return f"{text} How many dollars does one cost?", steps
    m = rng.choice([k for k in range(2, 13) if k != n])
    steps.append(Step(ref(0), "*", m))
    if level <= 3:
        return f"{text} How many dollars do {m} {noun(goods[0])} cost?", steps
    if level == 4:
        budget = run(steps)[1] + rng.randint(1, 60)
        steps.append(Step(budget, "-", ref(1)))
        return f"{text} {name} has {budget} dollars and buys {m} of them. How many dollars are left?", steps
    m2, p2 = rng.randint(2, 6), rng.randint(2, 20)
    steps += [Step(m2, "*", p2), Step(ref(1), "+", ref(2))]
    budget = run(steps)[1] + rng.randint(1, 60)
    steps.append(Step(budget, "-", ref(3)))
    return (f"{text} {name} has {budget} dollars and buys {m} of them and {m2} {noun(goods[1])} at {p2} dollars "
            f"each. How many dollars are left?"), steps


def ages(rng: random.Random, level: int) -> tuple[str, list[Step]]:
    a, b, c = rng.sample(NAMES, 3)
    age = rng.randint(3, 15 if level <= 2 else 40)
    k = rng.randint(2, 9 if level <= 2 else 30)
    text = f"{a} is {age} years old. {b} is {k} years older than {a}."
    steps = [Step(age, "+", k)]
    if level == 1:
        return f"{text} How old is {b}?", steps
    if level == 2:
        y = rng.randint(2, 20)
        steps.append(Step(ref(0), "+", y))
        return f"{text} How old will {b} be in {y} years?", steps
    f = rng.choice([2, 3]) if level < 5 else rng.randint(2, 4)
    steps.append(Step(ref(0), "*", f))
    text = f"{text} {c} is {f} times as old as {b}."
    if level == 3:
        return f"{text} How old is {c}?", steps
    if level == 4:
        steps.append(Step(ref(0), "+", ref(1)))
        return f"{text} What is the sum of the ages of {b} and {c}?", steps
    steps += [Step(age, "+", ref(0)), Step(ref(2), "+", ref(1))]
    return f"{text} What is the sum of their three ages?", steps


def sharing(rng: random.Random, level: int) -> tuple[str, list[Step]]:
    name, other = rng.sample(NAMES, 2)
    thing = rng.choice(THINGS)
    k = rng.randint(2, 9)
    each = rng.randint(2, 9 if level <= 2 else 30)
    if level == 1:
        return (f"{name} shares {k * each} {thing} among {k} friends. How many {thing} does each friend get?",
                [Step(k * each, "/", k)])
    g = rng.randint(1, 20)
    if level == 2:
        steps = [Step(k * each + g, "-", g), Step(ref(0), "/", k)]
        text = f"{name} has {k * each + g} {thing} and gives {g} to {other}."
    else:
        per = rng.choice([p for p in range(3, 13) if (k * each + g) % p == 0] or [None])
        if per is None:  # keep every division exact: make the total a multiple of the box size
            per = rng.randint(3, 12)
            g = -(k * each) % per or per
        boxes = (k * each + g) // per
        steps = [Step(boxes, "*", per), Step(ref(0), "-", g), Step(ref(1), "/", k)]
        text = f"{name} has {boxes} boxes of {per} {thing} and gives {g} to {other}."
    text = f"{text} {name} shares the rest among {k} friends."
    if level <= 3:
        return f"{text} How many {thing} does each get?", steps
    eat = rng.randint(1, each - 1)
    steps.append(Step(ref(2), "-", eat))
    text = f"{text} Each friend eats {eat}."
    if level == 4:
        return f"{text} How many {thing} does each have left?", steps
    steps.append(Step(ref(3), "*", k))
    return f"{text} How many {thing} are left in all?", steps


STORIES = {"shopping": shopping, "discount": discount, "unit_rate": unit_rate, "ages": ages, "sharing": sharing}


def make_word(rng: random.Random, item_id: str, level: int, language: str = "en") -> Item:
    story = rng.choice(sorted(STORIES))
    prompt, steps = STORIES[story](rng, level)
    lines, answer = run(steps)
    return Item(item_id, "math", "math_word", "en", prompt, str(answer), MATH_VERIFIER, level,
                math_response(lines, answer), {"steps": steps, "story": story})


def wrong_word_response(rng: random.Random, item: Item) -> str:
    steps = item.extra["steps"]
    lines, answer = run(steps, (rng.choice(slippable(steps)), rng.choice(SLIPS)))
    assert str(answer) != item.reference
    return math_response(lines, answer, style=rng.choice(["plain", "narrated"]))


def narrated_word_response(rng: random.Random, item: Item) -> str:
    return math_response(*run(item.extra["steps"]), style="narrated")


SUITE = register_suite(Suite(
    name="math_word", domain="math", make=make_word, wrong=wrong_word_response, alt=narrated_word_response,
    languages=("en",), reasoning=True,
    description="word problems (shopping, discounts, unit rates, ages, sharing); one teacher step per operation"))
