"""``code`` (code): small Python functions from parametrised templates, checked by unit tests.

``Write a Python function add_7(nums) that returns a list with 7 added to each of
the values in nums.``; the teacher plans in one line, then writes the function
in a ```` ```python ```` fence. The verifier runs ``assert`` tests (spec
``{"type": "code", "tests": [...], "timeout_s": 5}``; the reference is the
canonical solution). Difficulty 1..5 picks the template families: (1) maps,
``a * n + c``, letter counts, slices; (2) filters, sums and counts over a
threshold or a divisor; (3) defaults for empty lists, clamps, joins; (4)
two-rule fizzbuzz, long words; (5) three-rule fizzbuzz, running totals.
Names of functions and parameters vary per item. Expected outputs come from
running the canonical solution here (our own code, never a model's); ``wrong``
is an off-by-one or wrong-operator version that fails at least one test,
``alt`` another correct implementation.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable

from stages.world.items import Item, verifier_spec
from stages.world.suites import Suite, register_suite

TIMEOUT_S = 5
WORDS = ("apple", "banana", "cherry", "grape", "lemon", "mango", "melon", "peach", "plum", "kiwi", "tomato",
         "carrot", "onion", "pepper", "garlic", "radish", "bread", "butter", "cookie", "noodle", "river",
         "forest", "planet", "rocket", "garden", "window", "pillow", "camera", "guitar", "violin")
RULE_WORDS = ("Fizz", "Buzz", "Ping", "Pong", "Zip", "Zap", "Tick", "Tock", "Bim", "Bam", "Foo", "Bar")
SEPARATORS = ("-", "+", " ", "/", ":", "|", "*", ".")
# divisor pairs a < b where neither divides the other: every fizzbuzz branch has test inputs
COPRIME_ISH = tuple((a, b) for a in range(2, 10) for b in range(a + 1, 10) if b % a)


@dataclass(frozen=True)
class Task:
    """One function to write: its prompt parts, two correct bodies and faulty ones."""
    fn: str
    params: str
    desc: str
    plan: str
    body: str
    alt_plan: str
    alt_body: str
    mutants: tuple[str, ...]
    inputs: tuple[tuple, ...]

    def code(self, body: str | None = None) -> str:
        return f"def {self.fn}({self.params}):\n{self.body if body is None else body}"


def block(*lines: str) -> str:
    return "\n".join("    " + line for line in lines)


def ints(rng: random.Random, n: int, lo: int = 0, hi: int = 99) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


def list_inputs(rng: random.Random, n_tests: int, must: int | None = None, lo: int = 0, hi: int = 99):
    """``n_tests`` argument tuples, each a list of 3..6 ints; the first holds ``must`` (a boundary value)."""
    out = []
    for i in range(n_tests):
        xs = ints(rng, rng.randint(3, 6), lo, hi)
        if must is not None and i == 0:
            xs[rng.randrange(len(xs))] = must
        out.append((xs,))
    return tuple(out)


# Parameter names, nouns and function-name stems vary per item, so that no two
# items of a family share long runs of words (see build.py: a 13-gram that only
# one or two eval prompts hold must not appear in training prompts).
LIST_ARGS = ("xs", "nums", "values", "items", "data", "scores", "arr", "vals")
TEXT_ARGS = ("s", "text", "word", "line", "msg", "name", "phrase", "string")
NUMBER_NOUNS = ("numbers", "values", "integers", "elements", "entries")


def named(rng: random.Random, stems: tuple[str, ...], *parts) -> str:
    return "_".join([rng.choice(stems), *map(str, parts)])


# -- level 1 -----------------------------------------------------------------------
def map_arith(rng: random.Random, n: int) -> Task:
    op = rng.choice("+-*")
    k = rng.randint(2, 20) if op == "*" else rng.randint(2, 150)
    p, noun = rng.choice(LIST_ARGS), rng.choice(NUMBER_NOUNS)
    stems, what = {"+": (("add", "plus", "inc"), f"with {k} added to each of the {noun} in {p}"),
                   "-": (("sub", "minus", "dec"), f"with {k} subtracted from each of the {noun} in {p}"),
                   "*": (("times", "scale", "mul"), f"with each of the {noun} in {p} multiplied by {k}")}[op]
    other = {"+": "-", "-": "+", "*": "+"}[op]
    return Task(named(rng, stems, k), p, f"returns a list {what}", f"Build a list of x {op} {k} for each x.",
                block(f"return [x {op} {k} for x in {p}]"), f"Loop over {p} and append x {op} {k}.",
                block("out = []", f"for x in {p}:", f"    out.append(x {op} {k})", "return out"),
                (block(f"return [x {op} {k + 1} for x in {p}]"), block(f"return [x {other} {k} for x in {p}]")),
                list_inputs(rng, n))


def linear(rng: random.Random, n: int) -> Task:
    a, c = rng.randint(2, 9), rng.randint(1, 60)
    p = rng.choice(("n", "x", "k", "m", "num", "value"))
    return Task(named(rng, ("linear", "line", "affine", "calc"), a, c), p, f"returns {a} times {p} plus {c}",
                f"Multiply {p} by {a}, then add {c}.", block(f"return {a} * {p} + {c}"),
                f"Add {c} to {p} * {a}.", block(f"return {c} + {p} * {a}"),
                (block(f"return {a} * ({p} + {c})"), block(f"return {a} * {p} + {c + 1}")),
                tuple((x,) for x in rng.sample(range(1, 50), n)))


def count_char(rng: random.Random, n: int) -> Task:
    c = rng.choice("abcdeilmnoprtuy")
    p = rng.choice(TEXT_ARGS)
    pool = [w for w in WORDS if c in w] or list(WORDS)
    inputs = tuple((" ".join(rng.sample(pool, min(len(pool), rng.randint(1, 3)))),) for _ in range(n))
    return Task(named(rng, ("count", "num", "how_many", "tally"), c), p,
                f'returns how many times the letter "{c}" appears in {p}',
                f'Count "{c}" with {p}.count.', block(f'return {p}.count("{c}")'),
                f'Loop over {p} and count each "{c}".',
                block("n = 0", f"for ch in {p}:", f'    if ch == "{c}":', "        n += 1", "return n"),
                (block(f'return {p}.count("{c}") + 1'), block(f"return len({p})")), inputs)


def slice_text(rng: random.Random, n: int) -> Task:
    k = rng.randint(2, 9)
    p = rng.choice(TEXT_ARGS)
    inputs = tuple(("".join(rng.sample(WORDS, 3)),) for _ in range(n))
    if rng.random() < 0.5:
        return Task(named(rng, ("first", "head", "prefix", "take"), k), p, f"returns the first {k} characters of {p}",
                    f"Slice {p}[:{k}].", block(f"return {p}[:{k}]"), f"Take the characters at 0 to {k - 1}.",
                    block(f"return {p}[0:{k}]"), (block(f"return {p}[:{k + 1}]"), block(f"return {p}[1:{k + 1}]")),
                    inputs)
    return Task(named(rng, ("last", "tail", "suffix", "end"), k), p, f"returns the last {k} characters of {p}",
                f"Slice {p}[-{k}:].", block(f"return {p}[-{k}:]"), f"Start at len({p}) - {k}.",
                block(f"return {p}[len({p}) - {k}:]"), (block(f"return {p}[-{k + 1}:]"), block(f"return {p}[-{k}:-1]")),
                inputs)


# -- level 2 -----------------------------------------------------------------------
COMPARISONS = {">": ("above", "greater than", ">=", "<"), "<": ("below", "less than", "<=", ">"),
               ">=": ("at_least", "at least", ">", "<"), "<=": ("at_most", "at most", "<", ">")}


def threshold(rng: random.Random, n: int) -> Task:
    cmp = rng.choice(sorted(COMPARISONS))
    word, phrase, near, flip = COMPARISONS[cmp]
    t = rng.randint(0, 99)
    p, noun = rng.choice(LIST_ARGS), rng.choice(NUMBER_NOUNS)
    cond = f"x {cmp} {t}"
    kind = rng.choice(["keep", "sum", "count"])
    inputs = list_inputs(rng, n, must=t)
    bad = tuple(f"x {c} {t}" for c in (near, flip))
    if kind == "keep":
        return Task(named(rng, ("keep", "only", "filter", "select"), word, t), p,
                    f"returns the {noun} in {p} that are {phrase} {t}, in order",
                    f"Keep each x with {cond}.", block(f"return [x for x in {p} if {cond}]"),
                    f"Loop and append x when {cond}.",
                    block("out = []", f"for x in {p}:", f"    if {cond}:", "        out.append(x)", "return out"),
                    tuple(block(f"return [x for x in {p} if {b}]") for b in bad), inputs)
    return _sum_or_count(rng, kind == "sum", (word, t), p, noun, f"that are {phrase} {t}", f"are {phrase} {t}",
                         cond, bad, inputs)


def multiples(rng: random.Random, n: int) -> Task:
    m = rng.randint(2, 9)
    p, noun = rng.choice(LIST_ARGS), rng.choice(NUMBER_NOUNS)
    inputs = list_inputs(rng, n, must=m * rng.randint(1, 9))
    cond = f"x % {m} == 0"
    bad = (f"x % {m} == 1", f"x % {m + 1} == 0")
    return _sum_or_count(rng, rng.random() < 0.5, ("div", m), p, noun, f"divisible by {m}",
                         f"are divisible by {m}", cond, bad, inputs)


def _sum_or_count(rng: random.Random, total: bool, name_parts: tuple, p: str, noun: str, which: str,
                  are: str, cond: str, bad: tuple[str, ...], inputs) -> Task:
    """Sum, or count, the items of list ``p`` that satisfy ``cond`` (``bad``: wrong conditions)."""
    if total:
        return Task(named(rng, ("sum", "total", "add_up"), *name_parts), p,
                    f"returns the sum of the {noun} in {p} {which}",
                    f"Sum each x with {cond}.", block(f"return sum(x for x in {p} if {cond})"),
                    f"Add up x in a loop when {cond}.",
                    block("total = 0", f"for x in {p}:", f"    if {cond}:", "        total += x", "return total"),
                    tuple(block(f"return sum(x for x in {p} if {b})") for b in bad), inputs)
    return Task(named(rng, ("count", "num", "how_many"), *name_parts), p,
                f"returns how many {noun} in {p} {are}",
                f"Count each x with {cond}.", block(f"return len([x for x in {p} if {cond}])"),
                f"Add 1 for each x with {cond}.", block(f"return sum(1 for x in {p} if {cond})"),
                tuple(block(f"return len([x for x in {p} if {b}])") for b in bad), inputs)


# -- level 3 -----------------------------------------------------------------------
def default_extreme(rng: random.Random, n: int) -> Task:
    d = rng.randint(0, 99)
    p, noun = rng.choice(LIST_ARGS), rng.choice(NUMBER_NOUNS)
    f, word, other = ("max", "largest", "min") if rng.random() < 0.5 else ("min", "smallest", "max")
    inputs = ((list(),),) + list_inputs(rng, n - 1)
    return Task(named(rng, (f, f"{f}imum", word), "or", d), p,
                f"returns the {word} of the {noun} in {p}, or {d} if {p} is empty",
                f"Return {d} for an empty list, else {f}({p}).",
                block(f"if not {p}:", f"    return {d}", f"return {f}({p})"),
                "Use one conditional expression.", block(f"return {f}({p}) if {p} else {d}"),
                (block(f"if not {p}:", f"    return {d + 1}", f"return {f}({p})"),
                 block(f"if not {p}:", f"    return {d}", f"return {other}({p})")), inputs)


def clamp(rng: random.Random, n: int) -> Task:
    lo = rng.randint(0, 50)
    hi = lo + rng.randint(2, 50)
    p = rng.choice(("n", "x", "k", "m", "num", "value"))
    picks = [lo - rng.randint(1, 20), hi + rng.randint(1, 20), hi, rng.randint(lo + 1, hi - 1)]
    return Task(named(rng, ("clamp", "limit", "bound", "clip"), lo, hi), p,
                f"returns {p} limited to the range {lo} to {hi}",
                f"Take min with {hi}, then max with {lo}.", block(f"return max({lo}, min({hi}, {p}))"),
                f"Compare {p} with {lo} and {hi} in turn.",
                block(f"if {p} < {lo}:", f"    return {lo}", f"if {p} > {hi}:", f"    return {hi}", f"return {p}"),
                (block(f"return max({lo}, min({hi - 1}, {p}))"), block(f"return min({lo}, max({hi}, {p}))")),
                tuple((x,) for x in picks[:n]))


def repeat(rng: random.Random, n: int) -> Task:
    k = rng.randint(2, 6)
    sep = rng.choice(SEPARATORS)
    p = rng.choice(TEXT_ARGS)
    inputs = tuple((rng.choice(WORDS),) for _ in range(n))
    return Task(named(rng, ("repeat", "copies", "echo", "join"), k), p, f'returns {k} copies of {p} joined by "{sep}"',
                f'Join {k} copies of {p} with "{sep}".', block(f'return "{sep}".join([{p}] * {k})'),
                f'Add "{sep}" and {p} {k - 1} times.',
                block(f"out = {p}", f"for _ in range({k - 1}):", f'    out += "{sep}" + {p}', "return out"),
                (block(f'return "{sep}".join([{p}] * {k - 1})'), block(f"return {p} * {k}")), inputs)


# -- level 4 -----------------------------------------------------------------------
def fizz_two(rng: random.Random, n: int) -> Task:
    w1, w2 = rng.sample(RULE_WORDS, 2)
    a, b = rng.choice(COPRIME_ISH)
    if rng.random() < 0.5:
        a, b = b, a
    lcm = a * b // math.gcd(a, b)
    p = rng.choice(("n", "x", "k", "m", "num", "value"))
    picks = [a * rng.randint(1, 9), b * rng.choice([k for k in range(1, 12) if (b * k) % a]), lcm * rng.randint(1, 4),
             rng.choice([x for x in range(1, 100) if x % a and x % b])]
    rng.shuffle(picks)
    return Task(f"{w1.lower()}_{w2.lower()}", p,
                f'returns "{w1}" if {p} is divisible by {a}, else "{w2}" if {p} is divisible by {b}, '
                f"else {p} as a string", f"Check {a} first, then {b}, else str({p}).",
                block(f"if {p} % {a} == 0:", f'    return "{w1}"', f"if {p} % {b} == 0:", f'    return "{w2}"',
                      f"return str({p})"),
                "Use one conditional expression.",
                block(f'return "{w1}" if {p} % {a} == 0 else "{w2}" if {p} % {b} == 0 else str({p})'),
                (block(f"if {p} % {b} == 0:", f'    return "{w2}"', f"if {p} % {a} == 0:", f'    return "{w1}"',
                       f"return str({p})"),
                 block(f"if {p} % {a} == 1:", f'    return "{w1}"', f"if {p} % {b} == 0:", f'    return "{w2}"',
                       f"return str({p})")),
                tuple((x,) for x in picks[:n]))


def long_words(rng: random.Random, n: int) -> Task:
    k = rng.randint(3, 7)
    p = rng.choice(TEXT_ARGS)
    unit = rng.choice(("letters", "characters", "chars"))
    inputs = []
    for _ in range(n):
        words = rng.sample(WORDS, 4)
        words[0] = rng.choice([w for w in WORDS if len(w) == k] or [words[0]])  # a word at the boundary
        rng.shuffle(words)
        inputs.append((" ".join(words),))
    return Task(named(rng, ("longer_than", "long_words", "words_over", "wide"), k), p,
                f"returns the words of {p} with more than {k} {unit}, in order",
                f"Split {p} and keep words with len(w) > {k}.",
                block(f"return [w for w in {p}.split() if len(w) > {k}]"),
                f"Loop over the words and append those longer than {k}.",
                block("out = []", f"for w in {p}.split():", f"    if len(w) > {k}:", "        out.append(w)",
                      "return out"),
                (block(f"return [w for w in {p}.split() if len(w) >= {k}]"),
                 block(f"return [w for w in {p}.split() if len(w) < {k}]")), tuple(inputs))


# -- level 5 -----------------------------------------------------------------------
def fizz_three(rng: random.Random, n: int) -> Task:
    w1, w2 = rng.sample(RULE_WORDS, 2)
    a, b = rng.choice(COPRIME_ISH)
    lcm = a * b // math.gcd(a, b)
    p = rng.choice(("n", "x", "k", "m", "num", "value"))
    picks = [lcm * rng.randint(1, 4), a * rng.choice([k for k in range(1, 30) if (a * k) % b]),
             b * rng.choice([k for k in range(1, 30) if (b * k) % a]),
             rng.choice([x for x in range(1, 100) if x % a and x % b])]
    rng.shuffle(picks)
    both = [f"if {p} % {a} == 0 and {p} % {b} == 0:", f'    return "{w1}{w2}"']
    rest = [f"if {p} % {a} == 0:", f'    return "{w1}"', f"if {p} % {b} == 0:", f'    return "{w2}"',
            f"return str({p})"]
    return Task(f"{w1.lower()}{w2.lower()}", p,
                f'returns "{w1}{w2}" if {p} is divisible by both {a} and {b}, "{w1}" if only by {a}, '
                f'"{w2}" if only by {b}, else {p} as a string',
                f"Check both, then {a}, then {b}, else str({p}).", block(*both, *rest),
                f"Divisible by both means divisible by {lcm}.",
                block(f"if {p} % {lcm} == 0:", f'    return "{w1}{w2}"', *rest),
                (block(*rest), block(both[0].replace(" and ", " or "), *both[1:], *rest)),
                tuple((x,) for x in picks[:n]))


def running_total(rng: random.Random, n: int) -> Task:
    s = rng.randint(0, 50)
    p, noun = rng.choice(LIST_ARGS), rng.choice(NUMBER_NOUNS)
    return Task(named(rng, ("running", "prefix_sums", "cumulative", "totals"), s), p,
                f"starts at {s} and returns the running totals of the {noun} in {p}",
                f"Keep a total from {s} and append it after adding each x.",
                block(f"total = {s}", "out = []", f"for x in {p}:", "    total += x", "    out.append(total)",
                      "return out"),
                "Accumulate with itertools.", block("from itertools import accumulate",
                                                    f"return list(accumulate({p}, initial={s}))[1:]"),
                (block(f"total = {s}", "out = []", f"for x in {p}:", "    out.append(total)", "    total += x",
                       "return out"),
                 block("total = 0", "out = []", f"for x in {p}:", "    total += x", "    out.append(total)",
                       "return out")),
                list_inputs(rng, n, hi=20))


FAMILIES: dict[int, tuple[Callable[[random.Random, int], Task], ...]] = {
    1: (map_arith, linear, count_char, slice_text),
    2: (threshold, multiples),
    3: (default_extreme, clamp, repeat),
    4: (fizz_two, long_words),
    5: (fizz_three, running_total),
}
N_TESTS = {1: 3, 2: 3, 3: 4, 4: 4, 5: 4}


def outputs(code: str, fn: str, inputs: tuple[tuple, ...]) -> list:
    """Run our own generated function here (never a model's) on each input."""
    ns: dict = {}
    exec(compile(code, f"<{fn}>", "exec"), ns)
    return [ns[fn](*args) for args in inputs]


def agrees(code: str, fn: str, inputs: tuple[tuple, ...], expected: list) -> bool:
    """Whether a faulty version still passes every test (one that raises does not)."""
    try:
        return outputs(code, fn, inputs) == expected
    except Exception:
        return False


def assert_line(fn: str, args: tuple, expected) -> str:
    return f"assert {fn}({', '.join(map(repr, args))}) == {expected!r}"


def code_response(plan: str, code: str) -> str:
    return f"<think>{plan}</think>```python\n{code}\n```"


def make_code(rng: random.Random, item_id: str, level: int, language: str = "en") -> Item:
    while True:  # redraw in the (rare) case that no faulty version fails a test
        family = rng.choice(FAMILIES[level])
        task = family(rng, N_TESTS[level])
        expected = outputs(task.code(), task.fn, task.inputs)
        if outputs(task.code(task.alt_body), task.fn, task.inputs) != expected:
            raise AssertionError(f"{task.fn}: the other implementation disagrees")  # a template bug
        failing = [m for m in task.mutants if not agrees(task.code(m), task.fn, task.inputs, expected)]
        if failing:
            break
    tests = [assert_line(task.fn, args, out) for args, out in zip(task.inputs, expected)]
    prompt = f"Write a Python function {task.fn}({task.params}) that {task.desc}."
    spec = verifier_spec("code", tests=tests, timeout_s=TIMEOUT_S)
    return Item(item_id, "code", "code_function", "en", prompt, task.code(), spec, level,
                code_response(task.plan, task.code()), {"task": task, "failing": failing, "family": family.__name__})


def wrong_code_response(rng: random.Random, item: Item) -> str:
    task: Task = item.extra["task"]
    return code_response(task.plan, task.code(rng.choice(item.extra["failing"])))


def alt_code_response(rng: random.Random, item: Item) -> str:
    task: Task = item.extra["task"]
    return code_response(task.alt_plan, task.code(task.alt_body))


SUITE = register_suite(Suite(
    name="code", domain="code", make=make_code, wrong=wrong_code_response, alt=alt_code_response,
    languages=("en",), reasoning=True,
    description="small Python functions from templates, graded by assert tests run in a subprocess"))
