"""Map one source row onto the target table kind, or say why it does not fit.

``RowMapper.map`` fills every column (mapped columns in declaration order,
then the id template, defaults, and nulls for unmapped nullable columns), then
checks the result against the kind's contract: types, no null or blank
required text, no string longer than ``max_field_chars``, valid UTF-8, a
verifier spec that is a JSON object with a ``type``, a preference label
of A, B or TIE. The first problem found is the row's rejection.
"""
from __future__ import annotations

import json

import pyarrow as pa

from artifacts_schema.tables import table_schema
from compass.ingest.config import LABELS, ImportConfig, verifier_problem
from compass.ingest.reader import Rejection
from compass.ingest.transforms import Reject, RowContext, evaluate, render, short, type_name

INT32_MAX = 2**31 - 1


def _family(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    return "string"


def _utf8_problem(s: str) -> bool:
    """True when ``s`` holds a lone surrogate (e.g. a JSON '\\ud800' escape): not writable as UTF-8."""
    if s.isascii():
        return False
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class RowMapper:
    """Apply one ImportConfig's mapping, row by row."""

    def __init__(self, cfg: ImportConfig):
        self.cfg = cfg
        self.schema = table_schema(cfg.kind)
        names = set(self.schema.names)
        extras = [c for c in [*cfg.columns, *cfg.defaults] if not c.startswith("_") and c not in names]
        self.extras = list(dict.fromkeys(extras))
        # Extra columns are kept as text: their type cannot be declared, and one type per column is
        # what lets every batch share one Parquet schema.
        self.out_schema = pa.schema(list(self.schema) + [pa.field(c, pa.string()) for c in self.extras])
        # What a null came from, for the quarantine's detail: the source field when there is one.
        self.origin = {c: f"source field '{s.from_}'" if isinstance(s.from_, str) else f"'{c}'"
                       for c, s in cfg.columns.items()}

    def map(self, index: int, row: dict) -> dict | Rejection:
        """The target row, or (field, reason, detail)."""
        ctx = RowContext(row, index)
        out: dict = {}
        col = None
        try:
            for col, spec in self.cfg.columns.items():
                value = evaluate(spec, ctx)
                if col.startswith("_"):
                    ctx.helpers[col] = value
                else:
                    out[col] = value
            if self.cfg.id_template is not None:
                col = "id"
                out["id"] = render(self.cfg.id_template, ctx)
        except Reject as r:
            return col, r.reason, r.detail
        out.update(self.cfg.defaults)
        for f in self.schema:
            out.setdefault(f.name, None)
        try:
            self._check(out)
        except Reject as r:
            return r.field, r.reason, r.detail
        return out

    def _check(self, out: dict) -> None:
        """Validate (and normalise in place) a filled row against the kind's contract."""
        if self.cfg.kind == "preference_pairs":
            out["label"] = self._label(out["label"])
        for f in self.schema:
            v = out[f.name]
            if v is None:
                if not f.nullable:
                    raise Reject("missing_field", f"{self.origin.get(f.name, repr(f.name))} is null", f.name)
                continue
            fam = _family(f.type)
            if fam == "string":
                self._text(f.name, v, required=True)
            elif fam == "int":
                if isinstance(v, bool) or not isinstance(v, int):
                    raise Reject("wrong_type", f"expected an integer, got {type_name(v)} {short(v)}", f.name)
                if not -INT32_MAX - 1 <= v <= INT32_MAX:
                    raise Reject("wrong_type", f"{v} does not fit a 32-bit integer", f.name)
            elif isinstance(v, bool) or not isinstance(v, (int, float)):
                raise Reject("wrong_type", f"expected a number, got {type_name(v)} {short(v)}", f.name)
            else:
                out[f.name] = float(v)
        for name in self.extras:
            v = out.get(name)
            if v is None:
                continue
            if not isinstance(v, str):  # extras are stored as text (see __init__)
                v = out[name] = json.dumps(v, ensure_ascii=False, default=str) \
                    if isinstance(v, (dict, list, bool)) else str(v)
            self._text(name, v, required=False)

    def _text(self, name: str, v, required: bool) -> None:
        if not isinstance(v, str):
            raise Reject("wrong_type", f"expected a string, got {type_name(v)} {short(v)}", name)
        if _utf8_problem(v):
            raise Reject("invalid_utf8", "the text holds a lone surrogate (an invalid \\uD8xx escape)", name)
        if required and not v.strip() and name not in self.cfg.allow_empty:
            raise Reject("empty_field", "empty or only whitespace", name)
        if len(v) > self.cfg.max_field_chars:
            raise Reject("too_long", f"{len(v)} characters, more than max_field_chars {self.cfg.max_field_chars}",
                         name)
        if name == "verifier":
            why = verifier_problem(v)
            if why:
                raise Reject("bad_verifier", f"verifier spec {why}: {short(v)}", name)

    def _label(self, v):
        """A preference label through ``labels``; A, B and TIE pass unchanged."""
        if v is None:
            raise Reject("missing_field", "'label' is null", "label")
        mapped = self.cfg.labels.get(str(v), v)
        if mapped not in LABELS:
            known = f" (labels maps {', '.join(self.cfg.labels)})" if self.cfg.labels else ""
            raise Reject("bad_label", f"label {short(v)} is not A, B or TIE{known}", "label")
        return mapped
