"""One-variable inequalities as sets of reals, so ``|z| > 2`` equals ``(-\\infty,-2) \\cup (2,\\infty)``
and ``-x > -1`` equals ``x < 1`` (pure functions on parse trees, exact ``Fraction`` endpoints).

Read: a linear inequality in one variable (``3x - 1 \\le 5``, ``2 < x``), ``|u| < c`` / ``|u| \\ge c``
with ``u`` linear and ``c`` constant, chains (``1 < x \\le 3``) and ``and`` (intersection), lists
(``x < -2, x > 2``, from "or": union). Anything else (two variables, x^2, irrational endpoints) is None:
not read here, left to the other comparisons.

A set is a sorted tuple of disjoint pieces ``(lo, lo_closed, hi, hi_closed)``; ``None`` for lo/hi is
-inf/+inf. Merging touching pieces makes the form canonical, so equal sets compare equal as tuples.
"""
from __future__ import annotations

from fractions import Fraction

_ORDER = ("<", "<=", ">", ">=")
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}
# points where a candidate linear function is checked: a polynomial of degree <= 4 or a rational function
# would have to agree with a line at all five to pass
_PROBES = (Fraction(0), Fraction(1), Fraction(-3), Fraction(7, 3), Fraction(11, 2))


def solution_set(t, free_symbols, exact) -> tuple | None:
    """The set of reals ``t`` describes, or None when ``t`` is not an inequality in one variable we read.

    ``free_symbols(tree) -> set`` and ``exact(tree) -> Fraction | None`` come from ``compare`` (passed in to
    keep this module free of the comparison's imports)."""
    if not is_inequality_form(t):
        return None
    names = free_symbols(t)
    if len(names) != 1:
        return None
    try:
        return _set_of(t, next(iter(names)), exact)
    except _Unreadable:
        return None


def var_of(t, free_symbols) -> str | None:
    names = free_symbols(t)
    return next(iter(names)) if len(names) == 1 else None


def is_inequality_form(t) -> bool:
    if t[0] == "rel":
        if t[1] in _ORDER:
            return True
        return t[1] == "and" and is_inequality_form(t[2]) and is_inequality_form(t[3])
    if t[0] == "list":
        return all(is_inequality_form(x) for x in t[1])
    return False


def is_interval_form(t) -> bool:
    """An interval ``(a, b]`` or a union of intervals (what a solution set is written as)."""
    if t[0] == "seq":
        return len(t[3]) == 2 and t[1] in "([" and t[2] in ")]"
    return t[0] == "union" and all(is_interval_form(x) for x in t[1])


def as_tree(pieces: tuple):
    """A non-empty set as an interval tree (a union when it has several pieces); None when empty."""
    trees = [("seq", "[" if lc else "(", "]" if hc else ")", (_end(lo, -1), _end(hi, 1))) for lo, lc, hi, hc in pieces]
    if not trees:
        return None
    return trees[0] if len(trees) == 1 else ("union", tuple(trees))


class _Unreadable(Exception):
    pass


def _end(v, sign: int):
    if v is None:
        return ("const", "oo") if sign > 0 else ("neg", ("const", "oo"))
    return ("num", v) if v >= 0 else ("neg", ("num", -v))


def _set_of(t, var: str, exact) -> tuple:
    if t[0] == "list":
        out = ()
        for item in t[1]:
            out = _union(out, _set_of(item, var, exact))
        return out
    if t[1] == "and":
        return _intersect(_set_of(t[2], var, exact), _set_of(t[3], var, exact))
    op, lhs, rhs = t[1], t[2], t[3]
    if lhs[0] == "abs" or rhs[0] == "abs":
        if lhs[0] != "abs":
            op, lhs, rhs = _FLIP[op], rhs, lhs
        return _abs_set(op, lhs[1], rhs, var, exact)
    slope, icept = _linear(("add", lhs, ("neg", rhs)), var, exact)      # lhs - rhs = slope*x + icept
    return _linear_set(slope, icept, op)


def _linear(t, var: str, exact) -> tuple[Fraction, Fraction]:
    """(a, b) with t == a*var + b at every probe, else _Unreadable."""
    vals = []
    for p in _PROBES:
        v = exact(_subst(t, var, p))
        if v is None:
            raise _Unreadable
        vals.append(v)
    b = vals[0]
    a = vals[1] - b
    if any(v != a * p + b for v, p in zip(vals, _PROBES)):
        raise _Unreadable
    return a, b


def _linear_set(a: Fraction, b: Fraction, op: str) -> tuple:
    """{x : a*x + b OP 0}."""
    if a == 0:
        holds = {"<": b < 0, "<=": b <= 0, ">": b > 0, ">=": b >= 0}[op]
        return ((None, False, None, False),) if holds else ()
    root = -b / a
    if a < 0:
        op = _FLIP[op]
    closed = op in ("<=", ">=")
    return ((None, False, root, closed),) if op in ("<", "<=") else ((root, closed, None, False),)


def _abs_set(op: str, inner, bound, var: str, exact) -> tuple:
    """{x : |inner| OP bound} with inner linear and bound constant."""
    c = exact(bound)
    if c is None:
        raise _Unreadable
    a, b = _linear(inner, var, exact)
    if op in ("<", "<="):      # -c < inner < c
        return _intersect(_linear_set(a, b + c, ">" if op == "<" else ">="),
                          _linear_set(a, b - c, op))
    return _union(_linear_set(a, b + c, "<" if op == ">" else "<="),       # inner < -c or inner > c
                  _linear_set(a, b - c, op))


def _subst(t, var: str, value: Fraction):
    if t[0] == "sym":
        return ("num", value) if t[1] == var else t
    return (t[0],) + tuple(_subst(c, var, value) if isinstance(c, tuple) and c and isinstance(c[0], str) else c
                           for c in t[1:])


# -- sets of pieces -------------------------------------------------------------------------------
def _lo_key(p):
    lo, lc = p[0], p[1]
    return (0, Fraction(0), 0) if lo is None else (1, lo, 0 if lc else 1)


def _intersect(xs: tuple, ys: tuple) -> tuple:
    out = []
    for x in xs:
        for y in ys:
            lo, lc = _max_lo(x, y)
            hi, hc = _min_hi(x, y)
            if _nonempty(lo, lc, hi, hc):
                out.append((lo, lc, hi, hc))
    return _merge(out)


def _union(xs: tuple, ys: tuple) -> tuple:
    return _merge(list(xs) + list(ys))


def _max_lo(x, y):
    if x[0] is None:
        return y[0], y[1]
    if y[0] is None or x[0] > y[0]:
        return x[0], x[1]
    if y[0] > x[0]:
        return y[0], y[1]
    return x[0], x[1] and y[1]


def _min_hi(x, y):
    if x[2] is None:
        return y[2], y[3]
    if y[2] is None or x[2] < y[2]:
        return x[2], x[3]
    if y[2] < x[2]:
        return y[2], y[3]
    return x[2], x[3] and y[3]


def _nonempty(lo, lc, hi, hc) -> bool:
    if lo is None or hi is None:
        return True
    return lo < hi or (lo == hi and lc and hc)


def _merge(pieces: list) -> tuple:
    """Sorted, with overlapping or touching pieces joined: the canonical form of a set."""
    pieces = sorted(pieces, key=_lo_key)
    out: list = []
    for p in pieces:
        if out and _touches(out[-1], p):
            lo, lc, hi, hc = out[-1]
            if hi is not None and (p[2] is None or p[2] > hi):
                hi, hc = p[2], p[3]
            elif hi is not None and p[2] == hi:
                hc = hc or p[3]
            out[-1] = (lo, lc, hi, hc)
        else:
            out.append(p)
    return tuple(out)


def _touches(a, b) -> bool:
    """Whether b (starting at or after a's start) overlaps or adjoins a with no gap."""
    if a[2] is None or b[0] is None:
        return True
    return b[0] < a[2] or (b[0] == a[2] and (a[3] or b[1]))
