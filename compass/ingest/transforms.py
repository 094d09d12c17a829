"""Evaluate one column spec against one source row (the language of docs/import.md).

A value that does not fit raises ``Reject(reason, detail)``; the row mapper
adds the target column and the importer quarantines the row.
"""
from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass, field
from functools import lru_cache

from compass.ingest.config import ColumnSpec

_FMT = string.Formatter()


class Reject(Exception):
    """The row cannot fill a column: ``reason`` (a quarantine reason) and a one-line ``detail``."""

    def __init__(self, reason: str, detail: str, field: str | None = None):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail, self.field = reason, detail, field


def type_name(v) -> str:
    """A value's type in JSON words (what a data author sees in the file)."""
    if v is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list",
            dict: "object"}.get(type(v), type(v).__name__)


def short(v, n: int = 60) -> str:
    r = repr(v)
    return r if len(r) <= n else r[: n - 3] + "..."


@dataclass
class RowContext:
    row: dict
    index: int
    helpers: dict = field(default_factory=dict)   # '_name' columns computed so far


def lookup(row: dict, path: str):
    """The value at a dotted ``path`` ('a.b', 'tags.0'); a key that itself holds dots wins."""
    if path in row:
        return row[path]
    cur = row
    parts = path.split(".")
    for i, part in enumerate(parts):
        here = ".".join(parts[:i]) or "the row"
        if isinstance(cur, dict):
            if part not in cur:
                raise Reject("missing_field", f"source field '{path}' is missing")
            cur = cur[part]
        elif isinstance(cur, list) and re.fullmatch(r"-?\d+", part):
            k = int(part)
            if not -len(cur) <= k < len(cur):
                raise Reject("missing_field", f"source field '{path}' is missing ('{here}' has {len(cur)} items)")
            cur = cur[k]
        else:
            raise Reject("wrong_type", f"source field '{here}' is a {type_name(cur)}, cannot take '{part}' "
                                       f"(in '{path}')")
    return cur


def render(template: str, ctx: RowContext) -> str:
    """Fill ``{path}`` / ``{path:spec}`` placeholders: ``index`` is the row's index, ``_name`` a helper."""
    out = []
    for literal, name, spec, conv in _FMT.parse(template):
        out.append(literal)
        if name is None:
            continue
        if name == "index":
            v = ctx.index
        elif name.startswith("_"):
            v = ctx.helpers[name]  # config validation guarantees it was defined earlier
        else:
            v = lookup(ctx.row, name)
        if v is None:
            raise Reject("missing_field", f"source field '{name}' is null")
        if isinstance(v, (dict, list)):
            raise Reject("wrong_type", f"'{name}' is a {type_name(v)}; a template takes text or a number "
                                       f"(join a list into a helper column first)")
        if conv:
            v = {"r": repr, "s": str, "a": ascii}[conv](v)
        try:
            out.append(format(v, spec))
        except (ValueError, TypeError) as e:
            raise Reject("wrong_type", f"'{name}' = {short(v)} cannot be formatted as '{spec}' ({e})") from None
    return "".join(out)


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(pattern)


def _from(path: str, ctx: RowContext):
    """A source path's value; the name of a helper column computed above is that helper's value."""
    return ctx.helpers[path] if path in ctx.helpers else lookup(ctx.row, path)


def _source(spec: ColumnSpec, ctx: RowContext):
    if spec.from_ is not None:
        if isinstance(spec.from_, list):
            return [_from(p, ctx) for p in spec.from_]
        return _from(spec.from_, ctx)
    if spec.template is not None:
        return render(spec.template, ctx)
    if spec.object is not None:
        return {k: evaluate(s, ctx, top=False) for k, s in spec.object.items()}
    return spec.const


def _what(spec: ColumnSpec) -> str:
    return f"source field '{spec.from_}'" if isinstance(spec.from_, str) else "the value"


def _needs(v, typ: type, spec: ColumnSpec, step: str):
    if v is None:
        raise Reject("missing_field", f"{_what(spec)} is null")
    if not isinstance(v, typ):
        want = "a string" if typ is str else "a list"
        raise Reject("wrong_type", f"{step}: {_what(spec)} is a {type_name(v)} {short(v)}, expected {want}")


def _regex(spec: ColumnSpec, v):
    _needs(v, str, spec, "regex")
    m = _compiled(spec.regex).search(v)
    got = None if m is None else m.group(1) if m.re.groups else m.group(0)
    if got is None:
        raise Reject("no_match", f"{_what(spec)} does not match /{spec.regex}/: {short(v)}")
    return got


def _majority(spec: ColumnSpec, v):
    _needs(v, list, spec, "majority")
    counts: dict[str, list] = {}
    for x in v:
        counts.setdefault(json.dumps(x, sort_keys=True, default=str), []).append(x)
    best = max(counts.values(), key=len, default=[])
    if 2 * len(best) <= len(v):
        raise Reject("no_majority", f"no value is held by more than half of {short(v)}")
    return best[0]


def _map(spec: ColumnSpec, v):
    key = str(v)
    if key not in spec.map:
        keys = ", ".join(list(spec.map)[:8])
        raise Reject("unmapped_value", f"{_what(spec)} = {short(v)} is not in map (keys: {keys})")
    return spec.map[key]


def _join(spec: ColumnSpec, v):
    _needs(v, list, spec, "join")
    parts = []
    for i, x in enumerate(v):
        if spec.skip_empty and (x is None or x == ""):
            continue
        if x is None or isinstance(x, (dict, list)):
            raise Reject("wrong_type", f"join: item {i} of {_what(spec)} is a {type_name(x)}, expected text "
                                       f"or a number")
        k = len(parts)
        letter = chr(ord("A") + k) if k < 26 else str(k + 1)
        try:
            parts.append(spec.item.format(item=x, letter=letter, n=k + 1))
        except (ValueError, TypeError) as e:
            raise Reject("wrong_type", f"join: item {i} = {short(x)} cannot be formatted ({e})") from None
    return spec.join.join(parts)


def _cast(spec: ColumnSpec, v):
    if spec.cast == "json":
        return json.dumps(v, ensure_ascii=False, default=str)
    if v is None:
        raise Reject("missing_field", f"{_what(spec)} is null")
    if spec.cast == "str":
        if isinstance(v, (dict, list)):
            raise Reject("wrong_type", f"cast str: {_what(spec)} is a {type_name(v)} (use cast: json)")
        return json.dumps(v) if isinstance(v, bool) else str(v)
    try:
        if isinstance(v, bool) or isinstance(v, (dict, list)):
            raise ValueError
        if spec.cast == "float":
            return float(v.strip() if isinstance(v, str) else v)
        if isinstance(v, float):
            if not v.is_integer():
                raise ValueError
            return int(v)
        return int(v.strip() if isinstance(v, str) else v)
    except (ValueError, TypeError, OverflowError):
        raise Reject("wrong_type", f"cast {spec.cast}: {_what(spec)} = {short(v)} is not "
                                   f"{'an integer' if spec.cast == 'int' else 'a number'}") from None


def evaluate(spec: ColumnSpec, ctx: RowContext, top: bool = True):
    """The column's value for this row: its source, then its steps in their fixed order."""
    v = _source(spec, ctx)
    if spec.regex is not None:
        v = _regex(spec, v)
    if spec.majority:
        v = _majority(spec, v)
    if spec.map is not None:
        v = _map(spec, v)
    if spec.join is not None:
        v = _join(spec, v)
    if spec.cast is not None:
        v = _cast(spec, v)
    elif top and spec.object is not None:
        v = json.dumps(v, ensure_ascii=False, default=str)  # an object is stored JSON-encoded
    return v
