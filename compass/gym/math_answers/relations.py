"""Answers that name what they state, read as the values they state (pure functions on parse trees).

- A label is what an answer names rather than computes: a variable ``x``, a product of letters ``AB``
  (a segment), a subscripted name ``S_a``, a function value ``f(2)``, a tuple of labels ``(p,q)``, a
  ratio of labels ``S_a:S_b`` or ``\\frac{S_a}{S_b}``.
- ``label = value`` states ``value``; a group of distinct labels (``AB=4, CD=5``, ``(p,q)=(3,2)``)
  states its values in the order written, so it equals the bare ``4, 5`` and ``(3,2)`` but not ``5, 4``.
  Indexed copies of one unknown (``x_1 = 5, x_2 = -2``) are its solutions, in no particular order.
- A chain ``x = 5+5+1 = 7 = 11`` states its last member: the value a worked line ends on counts, not
  the steps (which may be wrong along the way). So does a computation ``2+3 = 5`` with no variable.
- A chain through an approximation (``x = \\sqrt{2} \\approx 1.414``) states the value before the first
  ``\\approx``: the exact value is the answer, the decimal a gloss on it (``split_approximation``).
- An answer that names what it computes by an expression in several variables or an absolute value
  (``a+b = 7``, ``|x| = 4``) states the constant side (``expression_value``); only a response is read so,
  never a gold (``x + y = 5`` as a gold is a line). ``2x = 4`` still states no value.
"""
from __future__ import annotations


# letters that name functions: "f(2) = 5" states f(2), not f times 2
FUNCTION_LETTERS = frozenset("fghFGHPQ")


def is_label(t) -> bool:
    k = t[0]
    if k == "sym":
        return True
    if k == "mul":
        if t[1][0] == "sym" and t[1][1] in FUNCTION_LETTERS and t[2][0] in ("num", "neg", "sym", "const"):
            return True
        return is_label(t[1]) and is_label(t[2])
    if k == "div":                       # \frac{S_a}{S_b}: a ratio of named things
        return is_label(t[1]) and is_label(t[2])
    if k == "seq":
        return t[1] == "(" and t[2] == ")" and len(t[3]) >= 2 and all(is_label(x) for x in t[3])
    if k == "ratio":
        return all(is_label(x) for x in t[1])
    return False


def chain_steps(t) -> list:
    """The steps of a relation chain (``a = b = c`` -> [a = b, b = c]); a single relation is one step."""
    if t[0] == "rel" and t[1] == "and":
        return chain_steps(t[2]) + chain_steps(t[3])
    return [t]


def collapse_chain(t):
    """``x = e1 = e2 = v`` -> ``x = v`` (an all-equal chain states its last member); anything else unchanged."""
    if t[0] != "rel" or t[1] != "and":
        return t
    steps = chain_steps(t)
    if not all(s[0] == "rel" and s[1] == "=" for s in steps):
        return t
    return ("rel", "=", steps[0][2], steps[-1][3])


def stated_value(rel, has_variables):
    """What an equation ``rel`` states as an answer: the value of its label (either side), or the final value
    of a computation without variables (``2+3 = 5`` -> 5); None when it is an equation proper (``y = 2x+3``
    states y's value 2x+3; ``x + y = 5`` states no single value)."""
    if rel[0] != "rel" or rel[1] != "=":
        return None
    lhs, rhs = rel[2], rel[3]
    if is_label(lhs):
        return rhs
    if is_label(rhs):
        return lhs
    if not has_variables(lhs) and not has_variables(rhs):
        return rhs
    return None


def labelled_values(t) -> tuple[tuple, tuple] | None:
    """(labels, values) of an answer naming two or more distinct things: ``(p,q) = (3,2)`` or
    ``AB = 4, CD = 5``; None otherwise (one label, repeated labels as in ``x = 1, x = 2``, bare values)."""
    if t[0] == "rel" and t[1] == "=" and t[2][0] == "seq" and is_label(t[2]):
        rhs = t[3]
        if rhs[0] == "seq" and len(rhs[3]) == len(t[2][3]):
            return tuple(t[2][3]), tuple(rhs[3])
        return None
    if t[0] != "list" or len(t[1]) < 2:
        return None
    labels, values = [], []
    for item in t[1]:
        if item[0] != "rel" or item[1] != "=" or not is_label(item[2]):
            return None
        labels.append(item[2])
        values.append(item[3])
    if len(set(labels)) != len(labels) or _indexed_copies(labels):
        return None
    return tuple(labels), tuple(values)


def _indexed_copies(labels: list) -> bool:
    """``x_1, x_2``: the indexed solutions of one unknown (roots listed in any order), not distinct things."""
    bases = {lab[1].split("_", 1)[0] for lab in labels if lab[0] == "sym" and "_" in lab[1]}
    return len(labels) > 1 and len(bases) == 1 and all(lab[0] == "sym" and "_" in lab[1] for lab in labels)


def drop_leading_label(items: tuple) -> tuple:
    """``x = 0, 2, 5`` and ``(p,q) = (5,2), (7,2)`` name the label once for the whole list: the values
    are ``0, 2, 5`` and ``(5,2), (7,2)``."""
    first = items[0] if items else None
    if (first is not None and first[0] == "rel" and first[1] == "=" and is_label(first[2])
            and len(items) > 1 and all(x[0] != "rel" for x in items[1:])):
        return (first[3],) + tuple(items[1:])
    return items


def split_approximation(t) -> tuple | None:
    """(exact, approximate) statements of a chain of ``=`` and ``\\approx`` (``~=``) steps with at least one
    ``\\approx``: ``\\sqrt{2} \\approx 1.414`` -> (sqrt 2, 1.414); ``x = 22/7 \\approx 3.14`` -> (x = 22/7, x = 3.14).
    ``exact`` is None when nothing comes before the first ``\\approx`` but a label (``x \\approx 1.41``).
    None when ``t`` is no such chain."""
    if t[0] != "rel" or t[1] not in ("and", "~="):
        return None
    steps = chain_steps(t)
    ops = [s[1] if s[0] == "rel" else None for s in steps]
    if "~=" not in ops or not all(op in ("=", "~=") for op in ops):
        return None
    members = [steps[0][2]] + [s[3] for s in steps]
    cut = ops.index("~=")                     # members[cut] is the value before the first \approx
    first = members[0]

    def stating(v):
        return v if v is first else ("rel", "=", first, v)
    exact = None if cut == 0 and is_label(first) else stating(members[cut])
    return exact, stating(members[-1])


def expression_value(rel, has_variables):
    """The constant side of an equation whose other side names a quantity by an expression in two or more
    variables (``a+b = 7``, ``7 = m+n``, AIME's "find m+n") or by an absolute value (``|x| = 4``): the value
    the response states for it; None otherwise. ``2x = 4`` and ``x^2 = 9`` are equations still to solve
    for their one unknown, not statements of 4 or 9."""
    if rel[0] != "rel" or rel[1] != "=":
        return None
    for named, value in ((rel[2], rel[3]), (rel[3], rel[2])):
        if has_variables(value):
            continue
        if named[0] == "abs" and is_label(named[1]) or len(has_variables(named)) >= 2:
            return value
    return None
