"""``arithmetic`` (math): integer expressions with ``+ - *`` and the usual precedence.

``What is 7 + 5 * 3?``; the teacher writes one step per operation,
``<think>5 * 3 = 15. 7 + 15 = 22.</think>22``. Difficulty 1..5 sets the
number of operations and the operand size (``LEVELS``).
"""
from __future__ import annotations

import random

from stages.world.items import Item, verifier_spec
from stages.world.suites import Suite, register_suite

MATH_VERIFIER = verifier_spec("math_exact")
# difficulty -> (operations, smallest operand, largest operand); a factor of "*"
# is drawn from 2..9 (levels 1-3) or 2..12 (levels 4-5), and at most two "*"
# per expression keep every trace within ~60 characters.
LEVELS = {1: (1, 1, 9), 2: (2, 1, 9), 3: (2, 2, 20), 4: (3, 2, 20), 5: (3, 10, 50)}
SLIPS = (-10, -2, -1, 1, 2, 10)


def math_expression(rng: random.Random, level: int) -> tuple[list[int], list[str]]:
    n_ops, lo, hi = LEVELS[level]
    mul_hi = 9 if level <= 3 else 12
    nums, ops, n_mul = [rng.randint(lo, hi)], [], 0
    for _ in range(n_ops):
        op = rng.choice("+-*") if n_mul < 2 else rng.choice("+-")
        if op == "*":
            n_mul += 1
            nums.append(rng.randint(2, mul_hi))
        else:
            nums.append(rng.randint(lo, hi))
        ops.append(op)
    return nums, ops


def render_expression(nums: list[int], ops: list[str]) -> str:
    parts = [str(nums[0])]
    for op, n in zip(ops, nums[1:]):
        parts += [op, str(n)]
    return " ".join(parts)


def solve(nums: list[int], ops: list[str], slip: tuple[int, int] | None = None) -> tuple[list[str], int]:
    """Teacher steps (``a op b = c.``), products first, then left to right.

    ``slip=(step, delta)`` makes the teacher err by ``delta`` at that step and
    carry the error on (a plausible wrong trace; its answer is always wrong,
    since every later step preserves a nonzero difference).
    """
    nums, ops, steps = list(nums), list(ops), []

    def apply(i: int) -> None:
        a, b, op = nums[i], nums[i + 1], ops[i]
        c = a * b if op == "*" else a + b if op == "+" else a - b
        if slip is not None and slip[0] == len(steps):
            c += slip[1]
        steps.append(f"{a} {op} {b} = {c}.")
        nums[i:i + 2] = [c]
        ops.pop(i)

    while "*" in ops:
        apply(ops.index("*"))
    while ops:
        apply(0)
    return steps, nums[0]


def math_response(steps: list[str], answer: int, style: str = "plain") -> str:
    if style == "narrated":  # same reasoning, other words: a true tie with "plain"
        n = len(steps)
        words = [("So" if n == 1 else "First," if i == 0 else "Finally," if i == n - 1 else "Then") for i in range(n)]
        steps = [f"{w} {s}" for w, s in zip(words, steps)]
    return f"<think>{' '.join(steps)}</think>{answer}"


def make_math(rng: random.Random, item_id: str, level: int, language: str = "en") -> Item:
    nums, ops = math_expression(rng, level)
    steps, answer = solve(nums, ops)
    expr = render_expression(nums, ops)
    return Item(item_id, "math", "arithmetic", "en", f"What is {expr}?", str(answer), MATH_VERIFIER, level,
                math_response(steps, answer), {"nums": nums, "ops": ops})


def wrong_math_response(rng: random.Random, item: Item, style: str = "plain") -> str:
    nums, ops = item.extra["nums"], item.extra["ops"]
    slip = (rng.randrange(len(ops)), rng.choice(SLIPS))
    steps, answer = solve(nums, ops, slip)
    assert str(answer) != item.reference
    return math_response(steps, answer, style)


def narrated_math_response(rng: random.Random, item: Item) -> str:
    return math_response(*solve(item.extra["nums"], item.extra["ops"]), style="narrated")


SUITE = register_suite(Suite(
    name="arithmetic", domain="math", make=make_math, languages=("en",), reasoning=True,
    wrong=lambda rng, item: wrong_math_response(rng, item, style=rng.choice(["plain", "narrated"])),
    alt=narrated_math_response,
    description="integer expressions with + - * and precedence; one teacher step per operation"))
