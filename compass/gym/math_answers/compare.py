"""Equivalence of two parsed answers (``parse.Answer``), cheapest test first.

Scalars: exact ``Fraction`` arithmetic when both sides are rational; otherwise numeric
evaluation (complex floats) at fixed pseudo-random points for the variables, which
proves inequality outright and equality up to a 1e-9 relative tolerance; only an
inconclusive or failed evaluation goes to sympy, behind a timeout (``sympy_worker``).

Structures: tuples and intervals compare item by item with their brackets (``[1,2)`` is
not ``[1,2]``, ``(1,2)`` is not ``(2,1)``); sets, bare comma lists and unions compare as
multisets (order free); ``a \\pm b`` is the set {a+b, a-b}; an equation ``x = 5`` equals
``5``; two equations are equal when their ``lhs - rhs`` are proportional; matrices compare
entry by entry (a one-column matrix equals the tuple of its entries).
"""
from __future__ import annotations

import cmath
import math
import random
from fractions import Fraction

from compass.gym.math_answers import sympy_worker
from compass.gym.math_answers.intervals import as_tree, is_inequality_form, is_interval_form, solution_set, var_of
from compass.gym.math_answers.parse import Answer
from compass.gym.math_answers.relations import (chain_steps, collapse_chain, drop_leading_label, expression_value,
                                                is_label, labelled_values, split_approximation, stated_value)

# Exact powers are computed only while the result stays small; beyond that the
# numeric path (or sympy under its timeout) decides, so "2^{2^{100}}" never hangs here.
MAX_EXACT_BITS = 1 << 16
CLOSE, FAR = 1e-9, 1e-6       # relative tolerances: equal below CLOSE, unequal above FAR
N_POINTS = 3


class _Undecided(Exception):
    """Numeric evaluation cannot settle this pair (overflow, infinity, unknown node)."""


# -- exact rational evaluation ------------------------------------------------------------------
def exact(t) -> Fraction | None:
    """The rational value of a tree without variables, or None (irrational, symbolic, too big)."""
    try:
        return _exact(t)
    except (ZeroDivisionError, OverflowError, ValueError, RecursionError):
        return None


def _exact(t):
    k = t[0]
    if k == "num":
        return t[1]
    if k == "neg":
        v = _exact(t[1])
        return None if v is None else -v
    if k in ("add", "mul", "div"):
        a = _exact(t[1])
        if a is None:
            return None
        b = _exact(t[2])
        if b is None:
            return None
        return a + b if k == "add" else a * b if k == "mul" else a / b
    if k == "pow":
        return _exact_pow(_exact(t[1]), _exact(t[2]))
    if k == "sqrt":
        n = _exact(t[2])
        return _exact_pow(_exact(t[1]), None if n is None or n == 0 else 1 / n)
    if k == "fact":
        v = _exact(t[1])
        if v is None or v.denominator != 1 or not 0 <= v <= 500:
            return None
        return Fraction(math.factorial(int(v)))
    if k == "func2" and t[1] == "binom":
        n, r = _exact(t[2]), _exact(t[3])
        if n is None or r is None or n.denominator != 1 or r.denominator != 1 or not 0 <= n <= 2000:
            return None
        return Fraction(math.comb(int(n), int(r))) if r >= 0 else Fraction(0)
    return None


def _exact_pow(base: Fraction | None, exp: Fraction | None) -> Fraction | None:
    if base is None or exp is None:
        return None
    if exp.denominator == 1:
        e = abs(exp.numerator)
        size = max(base.numerator.bit_length() + base.denominator.bit_length(), 1)
        if e > 10_000 or size * e > MAX_EXACT_BITS:
            return None
        return base ** exp.numerator
    # a rational exponent: exact only for perfect powers (\sqrt{16}, 8^{2/3})
    q = exp.denominator
    if base < 0 or q > 64:
        return None
    root = _int_root(base.numerator, q), _int_root(base.denominator, q)
    if root[0] is None or root[1] is None:
        return None
    return _exact_pow(Fraction(root[0], root[1]), Fraction(exp.numerator))


def _int_root(n: int, q: int) -> int | None:
    if n.bit_length() > 4096:
        return None
    r = math.isqrt(n) if q == 2 else round(n ** (1.0 / q)) if n < 2 ** 1000 else None
    if r is None:
        return None
    for c in (r - 1, r, r + 1):
        if c >= 0 and c ** q == n:
            return c
    return None


# -- numeric evaluation ------------------------------------------------------------------------
_FUNCS = {
    "sin": cmath.sin, "cos": cmath.cos, "tan": cmath.tan, "cot": lambda z: 1 / cmath.tan(z),
    "sec": lambda z: 1 / cmath.cos(z), "csc": lambda z: 1 / cmath.sin(z), "arcsin": cmath.asin,
    "arccos": cmath.acos, "arctan": cmath.atan, "sinh": cmath.sinh, "cosh": cmath.cosh, "tanh": cmath.tanh,
    "log": cmath.log, "ln": cmath.log, "lg": cmath.log10, "exp": cmath.exp,
}
_CONSTS = {"pi": complex(math.pi), "e": complex(math.e), "i": 1j}


def _num(t, env: dict) -> complex:
    k = t[0]
    if k == "num":
        return complex(float(t[1]))
    if k == "sym":
        return env[t[1]]
    if k == "const":
        if t[1] == "oo":
            raise _Undecided("infinity")
        return _CONSTS[t[1]]
    if k == "neg":
        return -_num(t[1], env)
    if k == "add":
        return _num(t[1], env) + _num(t[2], env)
    if k == "mul":
        return _num(t[1], env) * _num(t[2], env)
    if k == "div":
        return _num(t[1], env) / _num(t[2], env)
    if k == "pow":
        return _pow(_num(t[1], env), _num(t[2], env))
    if k == "sqrt":
        a, n = _num(t[1], env), _num(t[2], env)
        if n == 2:
            return cmath.sqrt(a)
        if a.imag == 0 and a.real < 0 and n.imag == 0 and float(n.real).is_integer() and int(n.real) % 2:
            return complex(-((-a.real) ** (1 / n.real)))     # odd roots of negatives are real
        return _pow(a, 1 / n)
    if k == "func":
        return _FUNCS[t[1]](_num(t[2], env))
    if k == "abs":
        return complex(abs(_num(t[1], env)))
    if k == "fact":
        v = _num(t[1], env)
        if v.imag != 0 or v.real < 0 or v.real > 170:
            raise _Undecided("factorial")
        return complex(math.gamma(v.real + 1))
    if k == "func2" and t[1] == "binom":
        n, r = _num(t[2], env), _num(t[3], env)
        if n.imag or r.imag or n.real > 170:
            raise _Undecided("binomial")
        return complex(math.gamma(n.real + 1) / (math.gamma(r.real + 1) * math.gamma(n.real - r.real + 1)))
    raise _Undecided(f"node {k}")


def _pow(a: complex, b: complex) -> complex:
    if abs(b) > 1e4 and abs(a) != 1:
        raise _Undecided("huge exponent")
    if a.imag == 0 and b.imag == 0 and (a.real >= 0 or float(b.real).is_integer()):
        return complex(a.real ** b.real)       # real powers stay real ((-2)^3 = -8 exactly)
    return a ** b


def free_symbols(t, out: set | None = None) -> set:
    out = set() if out is None else out
    if t[0] == "sym":
        out.add(t[1])
    for c in t[1:]:
        if isinstance(c, tuple) and c and isinstance(c[0], str):
            free_symbols(c, out)
        elif isinstance(c, tuple):
            for x in c:
                if isinstance(x, tuple):
                    free_symbols(x, out)
    return out


def _points(names: set) -> list[dict]:
    """Fixed pseudo-random assignments (both signs, away from 0) so results repeat run to run."""
    rng = random.Random(20240917)
    names = sorted(names)
    pts = []
    for _ in range(N_POINTS):
        pts.append({n: complex(rng.choice((-1, 1)) * rng.uniform(0.3, 2.2)) for n in names})
    return pts


class _Undefined(_Undecided):
    """A constant expression divides by zero (6/0): it equals no answer."""


def _values(a, b, names: set | None = None) -> list[tuple[complex, complex]]:
    names = free_symbols(a) | free_symbols(b) if names is None else names
    out = []
    for env in _points(names):
        try:
            va, vb = _num(a, env), _num(b, env)
        except ZeroDivisionError:
            # with variables, a zero denominator at a sample point proves nothing
            raise (_Undecided if names else _Undefined)("division by zero") from None
        except (OverflowError, ValueError, KeyError, TypeError, RecursionError) as e:
            raise _Undecided(str(e)) from None
        if not (cmath.isfinite(va) and cmath.isfinite(vb)):
            raise _Undecided("not finite")
        out.append((va, vb))
    return out


def numeric_verdict(a, b) -> bool | None:
    """True/False when evaluation at the sample points settles ``a == b``; None when it cannot."""
    try:
        vals = _values(a, b)
    except _Undefined:
        return False
    except _Undecided:
        return None
    close = True
    for va, vb in vals:
        diff, scale = abs(va - vb), max(abs(va), abs(vb))
        if diff > FAR * scale + 1e-9:
            return False
        if diff > CLOSE * scale + 1e-12:
            close = False
    return True if close else None


def _proportional_verdict(a, b, positive: bool = False) -> bool | None:
    """Whether a = c*b for a nonzero constant c (two equations lhs-rhs describing one relation); with
    ``positive``, c must be a positive real (an inequality keeps its direction only so)."""
    try:
        vals = _values(a, b)
    except _Undecided:
        return None
    ratio = None
    for va, vb in vals:
        if abs(vb) < 1e-12 or abs(va) < 1e-12:
            if abs(va) > 1e-9 or abs(vb) > 1e-9:
                return False
            continue
        r = va / vb
        if positive and (abs(r.imag) > CLOSE * abs(r) or r.real <= 0):
            return False
        if ratio is None:
            ratio = r
        elif abs(r - ratio) > CLOSE * abs(ratio) + 1e-12:
            return False
    return True


# -- sympy text of a tree ------------------------------------------------------------------------
_SYMPY_FUNCS = {"ln": "log", "arcsin": "asin", "arccos": "acos", "arctan": "atan"}
_SYMPY_CONSTS = {"pi": "pi", "e": "E", "i": "I", "oo": "oo"}


def to_sympy(t) -> str:
    """sympy source for a scalar tree (symbols written as ``Symbol('x')`` so any name is safe)."""
    k = t[0]
    if k == "num":
        return f"({t[1].numerator}/{t[1].denominator})" if t[1].denominator != 1 else f"({t[1].numerator})"
    if k == "sym":
        return f"Symbol({t[1]!r})"
    if k == "const":
        return _SYMPY_CONSTS[t[1]]
    if k == "neg":
        return f"(-{to_sympy(t[1])})"
    if k in ("add", "mul", "div", "pow"):
        op = {"add": "+", "mul": "*", "div": "/", "pow": "**"}[k]
        return f"({to_sympy(t[1])}{op}{to_sympy(t[2])})"
    if k == "sqrt":
        return f"root({to_sympy(t[1])},{to_sympy(t[2])})"
    if k == "func":
        if t[1] == "lg":
            return f"log({to_sympy(t[2])},10)"
        return f"{_SYMPY_FUNCS.get(t[1], t[1])}({to_sympy(t[2])})"
    if k == "abs":
        return f"Abs({to_sympy(t[1])})"
    if k == "fact":
        return f"factorial({to_sympy(t[1])})"
    if k == "func2":
        return f"binomial({to_sympy(t[2])},{to_sympy(t[3])})"
    raise ValueError(f"no sympy form for {k}")


# -- equivalence -----------------------------------------------------------------------------------
class Comparer:
    """Compares trees; ``symbolic`` turns the sympy fallback on, each call bounded by ``timeout_s``."""

    def __init__(self, timeout_s: float = 2.0, symbolic: bool = True):
        self.timeout_s = timeout_s
        self.symbolic = symbolic

    def answers(self, gold: Answer, resp: Answer) -> bool:
        if gold.text and gold.text == resp.text and gold.percent == resp.percent:
            return True                                 # the same text, whatever it means
        if gold.invalid or resp.invalid or gold.tree is None or resp.tree is None:
            return False
        g, r = gold.tree, resp.tree
        if resp.percent and not gold.percent:
            # 28% is 0.28; and a whole-number gold answering "what percentage" writes the percentage itself
            # (GSM8K: "60% of the students" for a gold of 60). Not a fractional gold: Math-Verify's own cases
            # hold "4 4/9%" unequal to 40/9.
            if self.equiv(g, _scaled(r)):
                return True
            value = exact(g)
            return value is not None and value.denominator == 1 and value >= 1 and self.equiv(g, r)
        if gold.percent and not resp.percent:           # "10\%" answered as 10 or as 0.1
            return self.equiv(g, r) or self.equiv(_scaled(g), r)
        return self.equiv(g, r)

    def equiv(self, a, b) -> bool:
        """Whether gold-side tree ``a`` equals response-side tree ``b`` (the order matters where the gold's
        form decides between two readings: a set gold accepts a parenthesised list, not the reverse)."""
        a, b = _expand_pm(a), _expand_pm(b)
        if a[0] == "rel" or b[0] == "rel":
            approx = split_approximation(a)
            if approx is not None:                      # a gold through \approx states its exact value
                a = approx[0] if approx[0] is not None else approx[1]
            approx = split_approximation(b)
            if approx is not None:
                # the value before the approximation counts; the decimal after it only against a decimal gold
                exact_b, approx_b = approx
                return ((exact_b is not None and self.equiv(a, exact_b))
                        or (_is_decimal(a) and self.equiv(a, approx_b)))
        if a[0] in _ARITHMETIC or b[0] in _ARITHMETIC:   # 2\begin{pmatrix}..\end{pmatrix}: one matrix
            a, b = _reduce_matrices(a), _reduce_matrices(b)
        if not (a[0] == b[0] == "rel" and a[1] == b[1] == "and"):
            a, b = collapse_chain(a), collapse_chain(b)         # x = 5+5+1 = 11 states 11
        la, lb = labelled_values(a), labelled_values(b)
        if la is not None or lb is not None:
            return self.labelled(a, la, b, lb)
        ia, ib = is_inequality_form(a), is_inequality_form(b)
        if ia or ib:
            verdict = self.solution_sets(a, ia, b, ib)
            if verdict is not None:
                return verdict
        ka, kb = a[0], b[0]
        if (ka == "rel") != (kb == "rel"):
            return self.stated(a, b)
        if ka in ("list", "set") or kb in ("list", "set"):
            if ka == "seq" or kb == "seq":
                # a set of solutions written as a parenthesised list, (1,3) for {1,3}: the gold says "set";
                # and a set written where the gold writes a tuple, {3, 5} for (3, 5): the response says "set"
                if ka in ("list", "set"):
                    return b[1:3] == ("(", ")") and self.multiset(_items(a), b[3])
                return kb == "set" and a[1:3] == ("(", ")") and self.multiset(a[3], _items(b))
            return self.multiset(_items(a), _items(b))
        if ka == "union" or kb == "union":
            return ka == kb and self.multiset(a[1], b[1])
        if ka == "ratio" or kb == "ratio":
            return self.ratio(a, b)
        if ka == "seq" or kb == "seq":
            if ka == "matrix" or kb == "matrix":
                return self.matrix_vs_seq(a, b)
            return (ka == kb and a[1] == b[1] and a[2] == b[2] and len(a[3]) == len(b[3])
                    and all(self.equiv(x, y) for x, y in zip(a[3], b[3])))
        if ka == "matrix" or kb == "matrix":
            return (ka == kb and len(a[1]) == len(b[1]) and len(a[1][0]) == len(b[1][0])
                    and all(self.equiv(x, y) for ra, rb in zip(a[1], b[1]) for x, y in zip(ra, rb)))
        if ka == "rel":
            return self.relation(a, b)
        if ka == "text" or kb == "text":
            return _text_of(a) is not None and _text_of(a) == _text_of(b)
        if ka == "base" or kb == "base":
            return _base_equal(a, b)
        return self.scalar(a, b)

    def multiset(self, xs, ys) -> bool:
        """Gold items ``xs`` against response items ``ys`` in any order; a response that repeats an item
        (``{(1,2), (2,1), (2,1)}``) states it once, unless the gold itself repeats one (roots counted with
        their multiplicity)."""
        xs, ys = drop_leading_label(xs), drop_leading_label(ys)
        if len(ys) > len(xs) and len(self._distinct(xs)) == len(xs):
            ys = self._distinct(ys)
        if len(xs) != len(ys):
            return False
        left = list(ys)
        for x in xs:
            for j, y in enumerate(left):
                if self.equiv(x, y):
                    del left[j]
                    break
            else:
                return False
        return True

    def _distinct(self, items) -> tuple:
        out: list = []
        for x in items:
            if not any(x == y or self.equiv(y, x) for y in out):
                out.append(x)
        return tuple(out)

    def labelled(self, a, la, b, lb) -> bool:
        """Answers naming several things: matched label by label when both name them, else the named values
        in the order written against the bare ones (``AB=4, CD=5`` is ``4, 5``, not ``5, 4``)."""
        if la is not None and lb is not None:
            if len(la[0]) != len(lb[0]) or set(la[0]) != set(lb[0]):
                return False
            value_of = dict(zip(*lb))
            return all(self.equiv(v, value_of[k]) for k, v in zip(*la))
        values = (la or lb)[1]
        other = b if la is not None else a
        if other[0] == "rel":
            return False
        bare = other[3] if other[0] == "seq" and other[1:3] == ("(", ")") else other[1] if other[0] == "list" else None
        if bare is None or len(bare) != len(values):
            return False
        pairs = zip(values, bare) if la is not None else zip(bare, values)
        return all(self.equiv(x, y) for x, y in pairs)

    def solution_sets(self, a, ia: bool, b, ib: bool) -> bool | None:
        """Inequalities against inequalities or intervals, as sets of reals; None when not readable so."""
        sa = solution_set(a, free_symbols, exact) if ia else None
        sb = solution_set(b, free_symbols, exact) if ib else None
        if ia and ib:
            if sa is not None and sb is not None:
                return sa == sb and var_of(a, free_symbols) == var_of(b, free_symbols)
            return None
        known, other = (sa, b) if ia else (sb, a)
        if known is None or not is_interval_form(other):
            return None
        tree = as_tree(known)
        return tree is not None and (self.equiv(other, tree) if ia else self.equiv(tree, other))

    def stated(self, a, b) -> bool:
        """An equation against a value: ``x = 5`` states 5 (the value named by a label, or the final value of a
        computation); an equation that names no value equals no bare value."""
        rel, other = (a, b) if a[0] == "rel" else (b, a)
        value = stated_value(rel, free_symbols)
        if value is None and rel is b:                  # a response's "a+b = 7" states 7
            value = expression_value(rel, free_symbols)
        if value is None:
            return False
        return self.equiv(value, other) if rel is a else self.equiv(other, value)

    def ratio(self, a, b) -> bool:
        """``7:32`` equals ``14:64`` (the same proportion) and, as two terms, the quotient ``7/32``."""
        if a[0] == b[0] == "ratio":
            xs, ys = a[1], b[1]
            return len(xs) == len(ys) and all(
                self.scalar(("mul", x, ys[0]), ("mul", y, xs[0])) for x, y in zip(xs[1:], ys[1:]))
        r, other = (a, b) if a[0] == "ratio" else (b, a)
        if len(r[1]) != 2 or other[0] in _STRUCTURES:
            return False
        return self.scalar(("div", r[1][0], r[1][1]), other)

    def matrix_vs_seq(self, a, b) -> bool:
        m, s = (a, b) if a[0] == "matrix" else (b, a)
        rows = m[1]
        if all(x[0] == "seq" for x in s[3]):          # [[1,2],[3,4]]: a list of rows
            return (len(rows) == len(s[3]) and all(len(r) == len(x[3]) for r, x in zip(rows, s[3]))
                    and all(self.equiv(p, q) for r, x in zip(rows, s[3]) for p, q in zip(r, x[3])))
        if s[1] != "(" or s[2] != ")":
            return False
        flat = [r[0] for r in rows] if len(rows[0]) == 1 else list(rows[0]) if len(rows) == 1 else None
        return flat is not None and len(flat) == len(s[3]) and all(self.equiv(x, y) for x, y in zip(flat, s[3]))

    def relation(self, a, b) -> bool:
        """Two relations of the same kind (inequalities in one variable went to ``solution_sets`` first)."""
        a, b = _orient(a), _orient(b)
        if a[1] != b[1]:
            return False
        if a[1] == "and":
            return self.multiset(tuple(map(_orient, chain_steps(a))), tuple(map(_orient, chain_steps(b))))
        if a[1] == "=":
            if is_label(a[2]) and a[2] == b[2]:
                return self.equiv(a[3], b[3])
            if (_has_structure(a) or _has_structure(b)
                    or not (free_symbols(a[2]) or free_symbols(a[3]) or free_symbols(b[2]) or free_symbols(b[3]))):
                # a statement about constants ("\log 10^5 = 5"): the same statement, side by side
                return self.equiv(a[2], b[2]) and self.equiv(a[3], b[3])
            da, db = ("add", a[2], ("neg", a[3])), ("add", b[2], ("neg", b[3]))
            verdict = _proportional_verdict(da, db)
            if verdict is not None:
                return verdict
            return self._sympy(da, db) or self._sympy(da, ("neg", db))
        if self.equiv(a[2], b[2]) and self.equiv(a[3], b[3]):
            return True
        if a[1] in ("<", "<=") and not _has_structure(a) and not _has_structure(b):
            # x + y < 1 is -x - y > -1 and 2x + 2y < 2: the gaps rhs - lhs are positive multiples
            return _proportional_verdict(("add", a[3], ("neg", a[2])), ("add", b[3], ("neg", b[2])),
                                         positive=True) is True
        return False

    def scalar(self, a, b) -> bool:
        ia, ib = _inf_sign(a), _inf_sign(b)
        if ia or ib:
            return ia == ib
        ea = exact(a)
        if ea is not None:
            eb = exact(b)
            if eb is not None:
                return ea == eb
        verdict = numeric_verdict(a, b)
        if verdict is not None:
            return verdict
        return self._sympy(a, b)

    def _sympy(self, a, b) -> bool:
        if not self.symbolic:
            return False
        try:
            sa, sb = to_sympy(a), to_sympy(b)
        except (ValueError, KeyError):
            return False
        return sympy_worker.symbolic_equal(sa, sb, timeout_s=self.timeout_s) is True


def _is_decimal(t) -> bool:
    """A number with a finite decimal expansion that is not whole (1.414, 0.25): what an approximation
    can be checked against."""
    if t[0] == "neg":
        t = t[1]
    if t[0] != "num" or t[1].denominator == 1:
        return False
    d = t[1].denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


# -- matrix arithmetic -----------------------------------------------------------------------------
_ARITHMETIC = frozenset({"add", "neg", "mul", "div", "pow"})

def _has_matrix(t) -> bool:
    if t[0] == "matrix":
        return True
    if t[0] == "pow":
        return _has_matrix(t[1])
    return t[0] in _ARITHMETIC and any(_has_matrix(c) for c in t[1:])


def _reduce_matrices(t):
    """An expression over matrices and scalars (``2\\begin{pmatrix}1&0\\\\0&1\\end{pmatrix}``, ``A + B``,
    ``\\frac12 M``, a product ``M N``) as the one matrix it evaluates to, its entries as trees; ``t`` itself
    when it is no such expression or the shapes do not fit."""
    if t[0] not in _ARITHMETIC or not _has_matrix(t):
        return t
    try:
        return _matrix_value(t)
    except ValueError:
        return t


def _matrix_value(t):
    k = t[0]
    if k == "matrix":
        return t
    if not _has_matrix(t):
        return t                                   # a scalar
    if k == "neg":
        m = _matrix_value(t[1])
        return ("matrix", tuple(tuple(("neg", x) for x in row) for row in m[1]))
    if k == "pow":                                 # M^T, M^2: a transpose, a small whole power
        m = _matrix_value(t[1])
        if t[2] == ("sym", "T"):
            return ("matrix", tuple(zip(*m[1])))
        n = exact(t[2])
        if n is None or n.denominator != 1 or not 1 <= n <= 8:
            raise ValueError("a power other than a transpose or a small whole one")
        out = m
        for _ in range(int(n) - 1):
            out = _matrix_value(("mul", out, m))
        return out
    a, b = _matrix_value(t[1]), _matrix_value(t[2])
    ma, mb = a[0] == "matrix", b[0] == "matrix"
    if k == "add":
        if not (ma and mb) or len(a[1]) != len(b[1]) or len(a[1][0]) != len(b[1][0]):
            raise ValueError("matrix plus a scalar, or shapes that differ")
        return ("matrix", tuple(tuple(("add", x, y) for x, y in zip(ra, rb)) for ra, rb in zip(a[1], b[1])))
    if k == "div":
        if mb:
            raise ValueError("division by a matrix")
        return ("matrix", tuple(tuple(("div", x, b) for x in row) for row in a[1]))
    if ma and mb:                                  # a matrix product
        if len(a[1][0]) != len(b[1]):
            raise ValueError("shapes do not multiply")
        cols = list(zip(*b[1]))
        return ("matrix", tuple(tuple(_sum(("mul", x, y) for x, y in zip(row, col)) for col in cols)
                                for row in a[1]))
    m, c = (a, b) if ma else (b, a)
    return ("matrix", tuple(tuple(("mul", c, x) for x in row) for row in m[1]))


def _sum(terms):
    terms = list(terms)
    out = terms[0]
    for x in terms[1:]:
        out = ("add", out, x)
    return out


def _scaled(t):
    return ("div", t, ("num", Fraction(100)))


def _items(t):
    return t[1] if t[0] in ("list", "set") else (t,)


MAX_PM_VARIANTS = 16


def _has_pm(t) -> bool:
    if t[0] == "pm":
        return True
    return any(isinstance(c, tuple) and c and isinstance(c[0], str) and _has_pm(c) for c in t[1:])


def _pm_variants(t) -> list:
    """Every sign choice of the ± in a scalar tree: ``\\frac{1 \\pm \\sqrt5}{2}`` -> two trees."""
    if not _has_pm(t):
        return [t]
    if t[0] == "pm":
        return [("add", a, s(b)) for a in _pm_variants(t[1]) for b in _pm_variants(t[2])
                for s in (lambda x: x, lambda x: ("neg", x))][:MAX_PM_VARIANTS]
    out = [()]
    for c in t[1:]:
        options = _pm_variants(c) if isinstance(c, tuple) and c and isinstance(c[0], str) else [c]
        out = [prev + (o,) for prev in out for o in options][:MAX_PM_VARIANTS]
    return [(t[0],) + rest for rest in out]


def _expand_pm(t):
    """A ± anywhere in a scalar or in the items of a list/set -> all its values as items."""
    if t[0] in ("list", "set"):
        if not any(_has_pm(x) for x in t[1]):
            return t
        items = []
        for x in t[1]:
            items.extend(_pm_variants(x) if x[0] not in _STRUCTURES else (x,))
        return (t[0], tuple(items))
    if t[0] not in _STRUCTURES and _has_pm(t):
        variants = _pm_variants(t)
        return ("list", tuple(variants)) if len(variants) > 1 else variants[0]
    return t


_STRUCTURES = ("seq", "set", "list", "matrix", "union", "rel", "text", "base", "ratio")


def _orient(rel):
    """x > 3 -> 3 < x, so a relation and its mirror compare equal."""
    op = rel[1]
    if op in (">", ">="):
        return ("rel", "<" if op == ">" else "<=", rel[3], rel[2])
    return rel


def _has_structure(rel) -> bool:
    return any(isinstance(x, tuple) and x[0] in ("seq", "set", "list", "matrix", "union", "text", "ratio")
               for x in rel[2:])


def _inf_sign(t) -> int:
    if t == ("const", "oo"):
        return 1
    if t == ("neg", ("const", "oo")):
        return -1
    return 0


# a yes/no question's answer, however it is worded (TheoremQA's golds are True / False)
_YES_NO = {"yes": "true", "true": "true", "no": "false", "false": "false"}


def _text_of(t) -> str | None:
    if t[0] == "text":
        return _YES_NO.get(t[1], t[1])
    if t[0] == "sym":
        return t[1].lower()
    return None


def _base_equal(a, b) -> bool:
    """204_5 equals 204_{5}, and 204 written without its base; never the decimal value."""
    if a[0] == "base" and b[0] == "base":
        return a[1] == b[1] and exact(a[2]) == exact(b[2]) and (exact(a[2]) is not None or a[2] == b[2])
    base, other = (a, b) if a[0] == "base" else (b, a)
    v = exact(other)
    return v is not None and v.denominator == 1 and str(v.numerator) == base[1]
