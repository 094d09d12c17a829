"""Final answers as small syntax trees: LaTeX / plain-text normalisation, a tokenizer and a parser.

``parse_answer(text) -> Answer`` turns one final answer (``\\dfrac{1}{2}``, ``50\\%``,
``(-\\infty, 2) \\cup (3, \\infty)``, ``2\\frac{1}{3}``, ``10,\\!080``, ``5\\text{ cm}``) into
an ``Answer``: a tree of tuples plus a percent flag, or ``tree=None`` with the normalised text
when it is not mathematics we can read (then answers are compared as text).

Trees are plain tuples so they hash and cache: ``("num", Fraction)``, ``("sym", name)``,
``("const", "pi"|"e"|"i"|"oo")``, ``("add", a, b)``, ``("neg", a)``, ``("mul", a, b)``,
``("div", a, b)``, ``("pow", a, b)``, ``("func", name, a)``, ``("sqrt", a, n)``,
``("fact", a)``, ``("abs", a)``, ``("pm", a, b)`` (a ± b), ``("seq", open, close, items)``
(tuples and intervals: brackets kept), ``("set", items)`` (``\\{..\\}``), ``("list", items)``
(a bare comma list; ``;``-separated groups nest), ``("union", items)``, ``("ratio", items)`` (``7:32``),
``("rel", op, a, b)`` (op ``~=`` is ``\\approx``), ``("base", digits, base)``
(``204_5``), ``("matrix", rows)``, ``("text", words)``.

No sympy here: the verifier's fast path is this parser plus ``fractions.Fraction``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

# Answers longer than this are not parsed (compared as text): a final answer is short,
# and the cap bounds the parser's time and recursion on hostile input.
MAX_ANSWER_CHARS = 400


@dataclass(frozen=True)
class Answer:
    tree: tuple | None       # None: not readable as mathematics
    text: str                # the normalised text without case or spaces (``text_key``)
    percent: bool = False    # written with % / percent: the value is tree / 100
    invalid: bool = False    # a malformed number ("11 6/6", "4 0/0"): equals nothing


class ParseError(ValueError):
    pass


# -- normalisation (string level) -------------------------------------------------------------
_UNICODE = {"\u2212": "-", "\u2013": "-", "\u00d7": "*", "\u00f7": "/", "\u00b7": "*", "\u00b0": "",
            "\u221a": "\\sqrt", "\u03c0": "\\pi ", "\u221e": "\\infty ", "\u2264": "\\le ", "\u2265": "\\ge ",
            "\u2260": "\\ne ", "\u2248": "\\approx ", "\u222a": "\\cup ", "\u00b1": "\\pm ", "\u2009": " ",
            "\u00a0": " ",
            "\uff0c": ",", "\uff08": "(", "\uff09": ")", "\uff1a": ":", "\uff1b": ";", "\u2208": "\\in ",
            "\u2205": "\\emptyset ", "\u211d": "\\mathbb{R}", "\u20ac": " ", "\u00a3": " "}
_UNICODE_RE = re.compile("|".join(map(re.escape, _UNICODE)))

# Ordered (pattern, replacement, needles) rewrites; each says why in its comment. A rewrite runs only when
# one of its needles is in the text: most answers hold few commands, and ~25 regex passes per parse
# would be most of the parser's time.
_REWRITES = [
    (re.compile(r"\\\\+(?=[a-zA-Z])"), "\\\\", ("\\\\",)),           # "\\frac" typed with a doubled backslash
    # \left( \right] \left. : size hints only
    (re.compile(r"\\(?:left|right)(?![a-zA-Z])\s*\.?"), "", ("\\left", "\\right")),
    (re.compile(r"\\[bB]igg?[lr]?(?![a-zA-Z])|\\displaystyle|\\textstyle"), "", ("\\big", "\\Big", "style")),
    (re.compile(r"\\\$|\$"), " ", ("$",)),                               # math delimiters and currency
    (re.compile(r"\\[\[\]()]"), " ", ("\\",)),                             # \( \) \[ \] display delimiters
    (re.compile(r",\\!\s*(?=\d{3})"), "", (",\\!",)),                        # 10,\!080: LaTeX thousands separator
    (re.compile(r"\{,\}(?=\d{3})"), "", ("{,}",)),                          # 10{,}080
    (re.compile(r"(?<!\\)\\[!;:]|\\quad|\\qquad|~"), " ", ("\\", "~")),        # spacing
    (re.compile(r"(?<=\d)\\,(?=\d{3})"), "", ("\\,",)),                     # 10\,000: thin-space thousands
    (re.compile(r"(?<!\\)\\[, ]"), " ", ("\\",)),
    (re.compile(r"\\[dtc]frac"), r"\\frac", ("frac",)),
    (re.compile(r"\\[dt]binom"), r"\\binom", ("binom",)),
    # degrees carry no value
    (re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree"), " ", ("circ", "degree")),
    (re.compile(r"\\(?:mathrm|text|textrm|mbox|textnormal)\{\s*(?:degrees?|deg)\s*\}|\bdegrees?\b"), " ", ("deg",)),
    # \frac34, \frac 59, \frac9{19}, \frac{270}7, \sqrt3: one-character arguments get braces
    (re.compile(r"\\(frac|binom)\s*([0-9a-zA-Z])\s*([0-9a-zA-Z])"), r"\\\1{\2}{\3}", ("frac", "binom")),
    (re.compile(r"\\(frac|binom)\s*([0-9a-zA-Z])\s*\{"), r"\\\1{\2}{", ("frac", "binom")),
    (re.compile(r"\\(frac|binom)\s*(\{[^{}]*\})\s*([0-9a-zA-Z])"), r"\\\1\2{\3}", ("frac", "binom")),
    (re.compile(r"\\sqrt\s*([0-9a-zA-Z])"), r"\\sqrt{\1}", ("sqrt",)),
    (re.compile(r"\\(?:emptyset|varnothing)(?![a-zA-Z])"), r"\\{\\}", ("emptyset", "varnothing")),  # the empty set
    # the reals, as the interval a solution set is written as
    (re.compile(r"\\mathbb\s*\{\s*R\s*\}|\\mathbb\s*R(?![a-zA-Z])|\\R(?![a-zA-Z])|\b(?:all\s+)?real\s+numbers\b", re.I),
     r"(-\\infty,\\infty)", ("\\mathbb", "\\R", "eal", "EAL")),
    (re.compile(r"^\s*[a-zA-Z]\s*\\in(?![a-zA-Z])\s*"), "", ("\\in",)),  # "x \in [-2, 7]" states the interval
    (re.compile(r"\*\*"), "^", ("**",)),                                  # Python-style powers
    (re.compile(r"(?<=\S)\s+or\s+(?=\S)"), ", ", ("or",)),               # "x = 0 or x = 2": a list of solutions
    (re.compile(r"(?<=\S)\s+and\s+(?=\S)"), " \\\\land ", ("and",)),    # a list too, but "x > 1 and x < 3" intersects
    (re.compile(r"(?<![\d.])\d{1,3}(?:\.\d{3}){2,}(?![\d.])"),      # 1.234.567: dot-grouped thousands
     lambda m: m.group(0).replace(".", ""), (".",)),
]
_PERCENT_RE = re.compile(r"(?:\\?%|(?<![a-zA-Z])(?:percent(?:age)?|pct))\s*\.?\s*$", re.I)
_COMMA_THOUSANDS = re.compile(r"(?<![\d.,])[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,])")
_TRAILING_PUNCT = re.compile(r"[\s.;:]+$")


def normalize(text: str) -> tuple[str, bool]:
    """The answer text with presentation removed, and whether it was a percentage."""
    s = text if text.isascii() else _UNICODE_RE.sub(lambda m: _UNICODE[m.group(0)], text)
    for pat, rep, needles in _REWRITES:
        for needle in needles:
            if needle in s:
                s = pat.sub(rep, s)
                break
    s = _TRAILING_PUNCT.sub("", s.strip())
    percent = False
    m = _PERCENT_RE.search(s)
    if m:
        percent, s = True, s[:m.start()].strip()
    # "58,500" is one number unless commas also separate items ("(1,234)", "3, 5, 7")
    m = _COMMA_THOUSANDS.search(s)
    if m and s.count(",") == m.group(0).count(",") and not re.search(r"[()\[\]{}]", s):
        s = s[:m.start()] + m.group(0).replace(",", "") + s[m.end():]
    return s.strip(), percent


# -- tokens ---------------------------------------------------------------------------------------
FUNCS = {"sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
         "log", "ln", "exp", "lg"}
CONSTS = {"pi": "pi", "infty": "oo", "infinity": "oo", "inf": "oo", "e": "e", "i": "i"}
GREEK = {"alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta", "vartheta", "iota",
         "kappa", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau", "upsilon", "phi", "varphi", "chi", "psi",
         "omega", "Gamma", "Delta", "Theta", "Lambda", "Xi", "Sigma", "Phi", "Psi", "Omega"}
# Two-letter runs are a product of variables ("xy") unless they are a unit.
UNITS2 = {"cm", "mm", "km", "kg", "mg", "ml", "ft", "in", "yd", "mi", "hr", "oz", "lb", "mL", "sq", "pm", "am",
          "or", "if", "is", "of", "to", "as", "at", "by", "on", "no", "so", "be", "we", "it"}   # and short words
_OPS = {r"\cdot": "*", r"\times": "*", r"\ast": "*", r"\div": "/", r"\pm": "pm", r"\mp": "mp",
        r"\cup": "cup", r"\le": "<=", r"\leq": "<=", r"\leqslant": "<=", r"\ge": ">=", r"\geq": ">=",
        r"\geqslant": ">=", r"\ne": "!=", r"\neq": "!=", r"\lt": "<", r"\gt": ">", r"\{": "{{", r"\}": "}}",
        r"\lbrace": "{{", r"\rbrace": "}}", r"\vert": "|", r"\mid": "|", r"\lvert": "|", r"\rvert": "|",
        r"\approx": "~=", r"\to": "=", r"\land": "land", r"\wedge": "land", r"\lor": ",", r"\vee": ",",
        r"\colon": ":"}
# \text{ and } / \text{ or } between answers: the same separators as the bare words
_CONNECTIVES = {"and": ("op", "land"), "or": ("op", ",")}
_TEXT_CMDS = {"text", "textbf", "textit", "textrm", "mbox", "mathrm", "mathbf", "mathit", "operatorname",
              "textnormal", "textup", "mathsf", "hbox", "emph"}
_IGNORED_CMDS = {"displaystyle", "limits", "nolimits", "boxed"}

_TOKEN_RE = re.compile(r"""
    (?P<ws>\s+)
  | (?P<mixed>(?<![\d./])(?:\d{1,3}(?:\ \d{3})+|\d+)\s+\d+\s*/\s*\d+(?![\d./])
            | (?<![\d./])\d+\s*\\frac\{\s*\d+\s*\}\{\s*\d+\s*\})    # 2 1/3, 1 000 4/9, 2\frac{1}{3}
  | (?P<num>\d{1,3}(?:\ \d{3})+(?![\d.])|\d+(?:\.\d*)?|\.\d+)       # 1 000 (space-grouped), 12, 1.5, .5
  | (?P<cmd>\\[a-zA-Z]+|\\[{}|])
  | (?P<word>[a-zA-Z]+)
  | (?P<op><=|>=|!=|\\\\|[-+*/^_=<>(),;:\[\]{}|!&'])
""", re.X)
_MIXED_PARTS = re.compile(r"(\d{1,3}(?: \d{3})+|\d+)\s*(?:\\frac\{\s*(\d+)\s*\}\{\s*(\d+)\s*\}|(\d+)\s*/\s*(\d+))")


def _read_group(s: str, i: int) -> tuple[str, int]:
    """Contents of the brace group opening at s[i] == '{', and the index after it."""
    depth = 0
    for j in range(i, len(s)):
        c = s[j]
        if c == "{" and (j == 0 or s[j - 1] != "\\"):
            depth += 1
        elif c == "}" and (j == 0 or s[j - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return s[i + 1:j], j + 1
    raise ParseError("unbalanced braces")


def _mixed_value(text: str) -> Fraction | None:
    """2 1/3 -> 7/3; None for a malformed one (zero denominator, or a part that is not proper)."""
    m = _MIXED_PARTS.fullmatch(text.strip())
    whole = int(m.group(1).replace(" ", ""))
    num, den = (int(m.group(2)), int(m.group(3))) if m.group(2) is not None else (int(m.group(4)), int(m.group(5)))
    if den == 0 or num >= den:
        return None
    return whole + Fraction(num, den)


def tokenize(s: str) -> list[tuple[str, object]]:
    """(kind, value) tokens: num, mixed, sym, const, func, word, cmd, op ("end" added last)."""
    out: list[tuple[str, object]] = []
    i, n = 0, len(s)
    while i < n:
        m = _TOKEN_RE.match(s, i)
        if not m:
            raise ParseError(f"unexpected character {s[i]!r}")
        kind, text = m.lastgroup, m.group(0)
        i = m.end()
        if kind == "ws":
            continue
        if kind == "mixed":
            out.append(("mixed", _mixed_value(text)))
        elif kind == "num":
            out.append(("num", _fraction(text.replace(" ", "").rstrip(".") or "0")))
        elif kind == "word":
            out.extend(_word_tokens(text))
        elif kind == "op":
            out.append(("op", text))
        else:   # a command
            name = text[1:]
            if text in _OPS:
                out.append(("op", _OPS[text]))
            elif name in _TEXT_CMDS:
                if i < n and s[i] == "{":
                    inner, i = _read_group(s, i)
                else:
                    inner = ""
                if re.fullmatch(r"[\sA-Za-z']*", inner):
                    # \text{ cm}: words, never variables; \text{ and } a separator
                    out.extend(_CONNECTIVES.get(w, ("word", w)) for w in inner.split())
                else:
                    out.extend(tokenize(inner)[:-1])                  # \text{(B)}, \mathrm{5}: read inside
            elif name in _IGNORED_CMDS:
                continue
            elif name in CONSTS:
                out.append(("const", CONSTS[name]))
            elif name in FUNCS:
                out.append(("func", name))
            elif name in GREEK:
                out.append(("sym", name))
            else:
                out.append(("cmd", name))
    out.append(("end", None))
    return out


def _word_tokens(text: str) -> list[tuple[str, object]]:
    if text in FUNCS:
        return [("func", text)]
    if text in ("pi", "infty", "oo", "inf", "infinity"):
        return [("const", CONSTS.get(text, "oo"))]
    if text == "sqrt":
        return [("cmd", "sqrt")]
    if len(text) == 1:
        return [("const", text)] if text in ("e", "i") else [("sym", text)]
    if len(text) == 2 and text not in UNITS2 and text.lower() != "no":      # "No": an answer, not N*o
        return [("sym", c) if c not in "ei" else ("const", c) for c in text]     # "xy" is x*y
    return [("word", text)]


# -- parser -------------------------------------------------------------------------------------------
_REL_OPS = {"=", "~=", "<", ">", "<=", ">=", "!="}      # ~=: \approx
_STARTS_PRIMARY = {"num", "mixed", "sym", "const", "func", "cmd"}


class _Parser:
    """Recursive descent: groups (;) > items (, and) > relation > ratio > union > additive/± > product > unary >
    power > primary."""

    def __init__(self, tokens):
        self.t = tokens
        self.i = 0
        self.last = len(tokens) - 1      # the "end" token, returned for any look past it

    def peek(self, k: int = 0):
        j = self.i + k
        return self.t[j] if j < self.last else self.t[self.last]

    def next(self):
        tok = self.t[self.i]
        self.i += 1
        return tok

    def accept(self, value) -> bool:        # the parser's hottest call: peek inlined
        i = self.i
        kind, v = self.t[i] if i < self.last else self.t[self.last]
        if kind == "op" and v == value:
            self.i += 1
            return True
        return False

    def expect(self, value):
        if not self.accept(value):
            raise ParseError(f"expected {value!r}, got {self.peek()[1]!r}")

    def is_op(self, *values) -> bool:
        kind, v = self.peek()
        return kind == "op" and v in values

    # top level: one relation, a bare comma list, or groups separated by ";" ("p=5,q=2; p=7,q=2")
    def parse_top(self):
        groups = [self.items()]
        while self.accept(";"):
            groups.append(self.items())
        if self.peek()[0] != "end":
            raise ParseError(f"trailing {self.peek()[1]!r}")
        return groups[0] if len(groups) == 1 else ("list", tuple(groups))

    def items(self):
        """A comma list; "and" separates items too, except between two inequalities, which it intersects."""
        items = [self.relation()]
        while True:
            if self.accept(","):
                items.append(self.relation())
            elif self.accept("land"):
                right = self.relation()
                if _is_inequality(items[-1]) and _is_inequality(right):
                    items[-1] = ("rel", "and", items[-1], right)
                else:
                    items.append(right)
            else:
                return items[0] if len(items) == 1 else ("list", tuple(items))

    def separator(self) -> bool:
        """An item separator inside brackets: "," or ";" (the latter where commas are decimal: (1,5; 2))."""
        return self.accept(",") or self.accept(";")

    def relation(self):
        left = last = self.ratio()
        while self.peek()[0] == "op" and self.peek()[1] in _REL_OPS:
            op = self.next()[1]
            right = self.ratio()
            step = ("rel", op, last, right)
            # a < x < b, a = b = c: a chain is the conjunction of its steps
            left = step if left is last else ("rel", "and", left, step)
            last = right
        return left

    def ratio(self):
        """a : b (: c): a ratio, looser than + and \\cup, tighter than = (S_a:S_b = 7:32)."""
        items = [self.union()]
        while self.accept(":"):
            items.append(self.union())
        return items[0] if len(items) == 1 else ("ratio", tuple(items))

    def union(self):
        items = [self.additive()]
        while self.accept("cup"):
            items.append(self.additive())
        return items[0] if len(items) == 1 else ("union", tuple(items))

    def additive(self):
        left = self.product()
        while True:
            if self.accept("+"):
                left = ("add", left, self.product())
            elif self.accept("-"):
                left = ("add", left, ("neg", self.product()))
            elif self.accept("pm"):
                left = ("pm", left, self.product())
            elif self.accept("mp"):
                left = ("pm", left, ("neg", self.product()))
            else:
                return left

    def product(self):
        left = self.unary()
        while True:
            if self.accept("*"):
                left = ("mul", left, self.unary())
            elif self.accept("/"):
                left = ("div", left, self.unary())
            elif self._starts_implicit_factor(left):
                left = ("mul", left, self.power())
            else:
                return left

    def _starts_implicit_factor(self, left) -> bool:
        kind, v = self.peek()
        if kind in ("num", "mixed"):
            # "4 2" is two numbers, not 8; a number may follow a variable only as in "x 2" (rare)
            return left[0] not in ("num", "neg") and not _ends_with_number(left)
        if kind in _STARTS_PRIMARY:
            return (kind, v) != ("cmd", "end")
        return kind == "op" and v in ("(", "[", "{")

    def unary(self):
        if self.accept("-"):
            return ("neg", self.unary())
        if self.accept("+"):
            return self.unary()
        if self.accept("pm"):     # "\pm 3" alone: both signs
            return ("pm", ("num", Fraction(0)), self.unary())
        return self.power()

    def power(self):
        base = self.postfix(self.primary())
        if self.accept("^"):
            exp = self.unary() if self.is_op("-", "+") else self.postfix(self.primary())
            return ("pow", base, exp)
        return base

    def postfix(self, node):
        while True:
            if self.accept("!"):
                node = ("fact", node)
            elif self.accept("'"):
                node = ("sym", _name(node) + "'")
            elif self.is_op("_"):
                self.next()
                sub = self.primary()
                if node[0] == "num" and sub[0] in ("num", "sym"):
                    node = ("base", _digits(node), sub)          # 204_5: digits in base 5
                else:
                    node = ("sym", _name(node) + "_" + _name(sub))
            else:
                return node

    def group(self):
        """A brace group {..} as one expression."""
        self.expect("{")
        inner = self.relation()
        self.expect("}")
        return inner

    def primary(self):
        kind, v = self.next()
        if kind == "num":
            return ("num", v)
        if kind == "mixed":
            if v is None:
                raise _Invalid()
            return ("num", v)
        if kind == "sym":
            return ("sym", v)
        if kind == "const":
            return ("const", v)
        if kind == "func":
            return self.function(v)
        if kind == "cmd":
            return self.command(v)
        if kind == "word":
            raise ParseError(f"word {v!r}")
        if kind == "op":
            if v in ("(", "["):
                return self.bracketed(v)
            if v == "{":
                items = [self.relation()]
                while self.separator():
                    items.append(self.relation())
                self.expect("}")
                return items[0] if len(items) == 1 else ("set", tuple(items))
            if v == "{{":
                return self.set_literal()
            if v == "|":
                inner = self.additive()
                self.expect("|")
                return ("abs", inner)
        raise ParseError(f"unexpected {v!r}")

    def bracketed(self, open_):
        if self.is_op(")", "]"):
            return ("seq", open_, self.next()[1], ())
        items = [self.relation()]
        while self.separator():
            items.append(self.relation())
        kind, close = self.next()
        if kind != "op" or close not in (")", "]"):
            raise ParseError("unclosed bracket")
        if len(items) == 1 and (open_ + close) in ("()", "[]"):
            return items[0]                 # grouping
        return ("seq", open_, close, tuple(items))

    def set_literal(self):
        if self.accept("}}"):
            return ("set", ())
        items = [self.relation()]
        while self.separator():
            items.append(self.relation())
        self.expect("}}")
        return ("set", tuple(items))

    def function(self, name):
        base = None
        if name == "log" and self.accept("_"):
            base = self.primary()
        power = None
        if self.accept("^"):                 # \sin^2 x
            power = self.postfix(self.primary())
        arg = self.power()
        node = ("func", name, arg) if base is None else ("div", ("func", "ln", arg), ("func", "ln", base))
        return ("pow", node, power) if power is not None else node

    def command(self, name):
        if name == "frac":
            return ("div", self.group(), self.group())
        if name == "binom":
            return ("func2", "binom", self.group(), self.group())
        if name == "sqrt":
            index = None
            if self.accept("["):
                index = self.relation()
                self.expect("]")
            arg = self.group() if self.is_op("{") else self.power()
            return ("sqrt", arg, index if index is not None else ("num", Fraction(2)))
        if name == "begin":
            return self.matrix()
        raise ParseError(f"unknown command \\{name}")

    def matrix(self):
        env = self.env_name()
        if "matrix" not in env and env != "array":
            raise ParseError(f"environment {env}")
        if env == "array" and self.is_op("{"):      # column spec
            depth = 0
            while True:
                kind, v = self.next()
                depth += (v == "{") - (v == "}")
                if depth == 0 or kind == "end":
                    break
        rows, row = [], [self.relation()]
        while True:
            if self.accept("&"):
                row.append(self.relation())
            elif self.accept("\\\\"):
                rows.append(tuple(row))
                if self.peek() == ("cmd", "end"):
                    row = []
                    continue
                row = [self.relation()]
            elif self.peek() == ("cmd", "end"):
                self.next()
                self.env_name()
                if row:
                    rows.append(tuple(row))
                if len({len(r) for r in rows}) != 1:
                    raise ParseError("ragged matrix")
                return ("matrix", tuple(rows))
            else:
                raise ParseError("bad matrix")

    def env_name(self) -> str:
        self.expect("{")
        parts = []
        while not self.accept("}"):
            kind, v = self.next()
            if kind == "end":
                raise ParseError("unclosed environment name")
            parts.append(str(v) if kind != "sym" else v)
        return "".join(p for p in parts if p != "*")


def _is_inequality(t) -> bool:
    """An order relation, or a chain of them (1 < x <= 3)."""
    if t[0] != "rel":
        return False
    return t[1] in ("<", ">", "<=", ">=") or (t[1] == "and" and _is_inequality(t[2]) and _is_inequality(t[3]))


class _Invalid(Exception):
    """A malformed mixed number: the whole answer equals nothing."""


def _ends_with_number(node) -> bool:
    while node[0] in ("add", "mul", "div", "pm"):
        node = node[2]
    return node[0] == "num"


def _digits(node) -> str:
    v = node[1]
    if v.denominator != 1:
        raise ParseError("fractional digits")
    return str(v.numerator)


def _name(node) -> str:
    if node[0] in ("sym", "const"):
        return node[1]
    if node[0] == "num" and node[1].denominator == 1:
        return str(node[1].numerator)
    raise ParseError("bad subscript")


def _strip_units(tokens: list) -> list:
    """Drop unit words after a quantity ("5 cm", "15 cm^2", "18 dollars", "3 km/h"), at the end and before
    each top-level comma ("5 cm, 12 cm^2": two quantities)."""
    out, seg, depth = [], [], 0
    for tok in tokens[:-1]:
        kind, v = tok
        if kind == "op":
            depth += (v in ("(", "[", "{", "{{")) - (v in (")", "]", "}", "}}"))
            if v == "," and depth == 0:
                out += _strip_tail(seg) + [tok]
                seg = []
                continue
        seg.append(tok)
    return out + _strip_tail(seg) + [tokens[-1]]


def _strip_tail(tokens: list) -> list:
    """``tokens`` without the unit words that end them; unchanged when they are all words (a text answer)."""
    end = j = len(tokens)
    while j > 0:
        kind, v = tokens[j - 1]
        if kind == "word":
            j -= 1
        elif kind == "num" and j >= 3 and tokens[j - 2] == ("op", "^") and tokens[j - 3][0] == "word":
            j -= 2
        elif kind == "op" and v == "/" and j < end and tokens[j][0] == "word":
            j -= 1
        else:
            break
    if j == end or j == 0:
        return tokens
    return tokens[:j]


_TEXT_PUNCT = {"(", ")", "[", "]", ".", ",", ";", "land"}    # what may sit between the words of a text answer
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")


def parse_answer(text: str) -> Answer:
    """The answer ``text`` read as mathematics (cached: gold answers repeat across samples)."""
    if len(text) > 4 * MAX_ANSWER_CHARS:       # not an answer; never normalised, parsed or cached
        return Answer(None, text_key(text))
    return _parse_cached(text)


def _fraction(text: str) -> Fraction:
    """``Fraction(text)``; an ASCII integer through ``int`` first (three times faster: most answers are one)."""
    digits = text[1:] if text[:1] in ("-", "+") else text
    return Fraction(int(text)) if digits.isascii() and digits.isdigit() else Fraction(text)


@lru_cache(maxsize=65536)
def _parse_cached(text: str) -> Answer:
    raw = text.strip()
    if _PLAIN_NUMBER.fullmatch(raw):                 # the common case, without any regex rewriting
        return Answer(("num", _fraction(raw)), raw)
    s, percent = normalize(raw)
    if _PLAIN_NUMBER.fullmatch(s):
        return Answer(("num", _fraction(s)), s, percent)
    if not s or len(s) > MAX_ANSWER_CHARS:     # bounds parser time and recursion on hostile input
        return Answer(None, text_key(s), percent)
    try:
        tokens = _strip_units(tokenize(s))
        words = [v for k, v in tokens if k == "word"]
        if words and all(k in ("word", "end") or (k == "op" and v in _TEXT_PUNCT) for k, v in tokens):
            return Answer(("text", " ".join(w.lower() for w in words)), text_key(s), percent)
        # single-letter words ("\text{B}") read as the letter
        tokens = [("sym", v) if k == "word" and len(v) == 1 else (k, v) for k, v in tokens]
        tree = _Parser(tokens).parse_top()
    except _Invalid:
        return Answer(None, text_key(s), percent, invalid=True)
    except (ParseError, RecursionError, ValueError, ZeroDivisionError, IndexError):
        return Answer(None, text_key(s), percent)
    return Answer(tree, text_key(s), percent)


_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox|textit|mathbf)\s*")
_SPACE_OR_BRACE = re.compile(r"[\s{}]")


def text_key(s: str) -> str:
    """Text answers compare without case, spaces, braces or \\text wrappers."""
    if "\\" in s:
        s = _TEXT_WRAPPER.sub("", s)
    return _SPACE_OR_BRACE.sub("", s).lower()


parse_answer.cache_clear = _parse_cached.cache_clear     # the benchmark clears it to measure cold parses
