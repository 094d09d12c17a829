"""The import config: where the rows come from and how they map onto a table kind.

Validated at the edge (``load_import_config``): unknown keys, a kind's required
column left unmapped, a bad regex or template, a default of the wrong type all
fail before a byte of the source is read, with one line naming the file and field.
The column mapping language is described in docs/import.md.
"""
from __future__ import annotations

import json
import os
import re
import string
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from artifacts_schema.tables import table_schema
from compass.config import ConfigError, StrictModel, format_validation_error, read_yaml, suggest_key
from compass.credentials import refuse_credentials

LABELS = ("A", "B", "TIE")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def template_fields(template: str) -> list[str]:
    """The placeholder names of a ``{path}`` / ``{path:spec}`` template; ValueError if it does not parse."""
    names = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    for name in names:
        if not name or name[0].isdigit() or "[" in name:
            raise ValueError(f"placeholder {{{name}}}: name a field (dotted path), not a position or an index")
    return names



def _keys_as_text(v):
    """YAML reads `0: A` with an int key: compare keys as text, as values from CSV are."""
    return {str(k): val for k, val in v.items()} if isinstance(v, dict) else v


def _valid_template(v: str | None) -> str | None:
    if v is not None:
        try:
            template_fields(v)
        except ValueError as e:
            raise ValueError(f"not a valid template: {e}") from None
    return v

class ColumnSpec(StrictModel):
    """One target column: a source (``from``, ``template``, ``const`` or ``object``), then
    optional steps applied in this order: regex, majority, map, join, cast."""
    from_: str | list[str] | None = Field(None, alias="from",
                                          description="a source path (dotted into nested fields, list items by "
                                                      "number: 'meta.tags.0'), or a list of paths (a list value); "
                                                      "'_name': a helper column defined above")
    template: str | None = Field(None, description="text with {path} placeholders ({index}: the row's index, "
                                                   "{_name}: a helper column)")
    const: Any = Field(None, description="a constant value")
    object: dict[str, ColumnSpec] | None = Field(
        None, description="a JSON object, one spec per key (written JSON-encoded)")
    regex: str | None = Field(None, description="re.search on the string: group 1 if the pattern has a group, "
                                                "else the whole match; no match quarantines the row (no_match)")
    majority: bool = Field(False, description="a list value: the item more than half of it holds (no_majority)")
    map: dict[str, Any] | None = Field(None, description="replace the value by map[value] (keys compared as "
                                                         "text); a value not in the map: unmapped_value")
    join: str | None = Field(None, description="a list value: join its items with this separator")
    item: str = Field("{item}", description="join: format of one item; {item}, {letter} (A, B, ...), {n} (1, 2, ...)")
    skip_empty: bool = Field(False, description="join: leave out null and empty items")
    cast: Literal["str", "int", "float", "json"] | None = Field(
        None, description="str: a number as text; int/float: a number or numeric text; json: any value JSON-encoded")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data):
        # The shared 'did you mean' cannot see through the columns mapping: suggest here.
        if isinstance(data, dict):
            known = ["from", *(k for k in cls.model_fields if k != "from_")]
            for key in data:
                if key not in known:
                    close = suggest_key(str(key), known)
                    raise ValueError(f"unknown key '{key}'" + (f" (did you mean '{close}'?)" if close else "")
                                     + f"; a column takes {', '.join(known)}")
        return data

    @field_validator("object", mode="before")
    @classmethod
    def _object_paths(cls, v):
        return _specs(v)

    @field_validator("map", mode="before")
    @classmethod
    def _map_keys_as_text(cls, v):
        return _keys_as_text(v)

    @field_validator("regex")
    @classmethod
    def _compiles(cls, v):
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"not a valid regular expression: {e}") from None
        return v

    @field_validator("template")
    @classmethod
    def _parses(cls, v):
        return _valid_template(v)

    @field_validator("item")
    @classmethod
    def _item_parses(cls, v):
        try:
            unknown = set(template_fields(v)) - {"item", "letter", "n"}
        except ValueError as e:
            raise ValueError(f"not a valid template: {e}") from None
        if unknown:
            raise ValueError(f"an item template knows {{item}}, {{letter}} and {{n}}, not {sorted(unknown)}")
        return v

    def from_paths(self) -> set[str]:
        """Every ``from`` path of it and its object's specs."""
        paths = {self.from_} if isinstance(self.from_, str) else set(self.from_ or [])
        for sub in (self.object or {}).values():
            paths |= sub.from_paths()
        return paths

    def helpers_used(self) -> set[str]:
        """The helper columns ('_name') its templates read."""
        used = {f for f in template_fields(self.template) if f.startswith("_")} if self.template else set()
        for sub in (self.object or {}).values():
            used |= sub.helpers_used()
        return used

    @model_validator(mode="after")
    def _one_source(self):
        given = [k for k in ("from", "template", "const", "object")
                 if (k == "from" and self.from_ is not None) or (k == "const" and "const" in self.model_fields_set)
                 or (k not in ("from", "const") and getattr(self, k) is not None)]
        if len(given) != 1:
            raise ValueError(f"a column needs exactly one of from, template, const, object (got {given or 'none'})")
        if self.object is not None and any([self.regex, self.majority, self.map, self.join]):
            raise ValueError("an object column takes no steps but cast")
        return self


ColumnSpec.model_rebuild()


class JoinConfig(StrictModel):
    """A second file whose records are joined to the source's by a key (BFCL keeps its answers apart)."""
    source: str = Field(description="a local path (relative to the config file) or fsspec URI, one format")
    format: Literal["auto", "parquet", "jsonl", "json", "csv"] = "auto"
    key: str = Field("id", description="the field both records hold, matched by equal value")
    into: str = Field("joined", description="the source row gets the matching record under this field "
                                            "(columns read it as 'joined.PATH')")


class ImportConfig(StrictModel):
    """An external data set, read and mapped onto one table kind (docs/import.md)."""
    source: str = Field(description="a local path, a file:// or s3:// URI (fsspec), a datasets save_to_disk "
                                    "folder or a datasets loader name (json, parquet, csv) with data_files; "
                                    "a relative path is relative to the config file")
    format: Literal["auto", "parquet", "jsonl", "json", "csv", "datasets"] = Field(
        "auto", description="auto: from the extension (.jsonl/.ndjson, .json, .parquet, .csv/.tsv; a folder "
                            "written by datasets' save_to_disk)")
    split: str | None = Field(None, description="datasets: the split to read (needed when there are several)")
    data_files: str | list[str] | None = Field(None, description="datasets loader: its data files")
    records: str | None = Field(None, description="json: dotted path to the list of records; PATH.* (or *) "
                                                  "takes the values of an object of records")
    delimiter: str | None = Field(None, description="csv: the field separator (default ',' or tab for .tsv)")
    storage_options: dict[str, Any] = Field(default_factory=dict, description="fsspec options for the source "
                                                                              "(e.g. endpoint_url for s3://)")
    kind: Literal["prompts", "sft_samples", "preference_pairs"]
    name: str | None = Field(None, description="artifact name (default: the config file's stem)")
    columns: dict[str, ColumnSpec] = Field(
        default_factory=dict, description="target column -> source path or column spec; names starting with '_' "
                                          "are helpers for templates, not written")
    defaults: dict[str, Any] = Field(default_factory=dict, description="constant values of target columns (a "
                                                                       "mapping or list is JSON-encoded)")
    labels: dict[str, str] = Field(default_factory=dict, description="preference_pairs: raw label -> A | B | TIE")
    id_template: str | None = Field(None, description="the id when the source has none, e.g. 'gsm8k-{index:05d}'")
    allow_empty: list[str] = Field(default_factory=list, description="text columns whose empty value is kept "
                                                                     "(e.g. an empty response in a preference pair)")
    limit: int | None = Field(None, ge=1, description="read at most this many rows")
    join: JoinConfig | None = Field(None, description="records of a second file joined by key; a row with no "
                                                      "match is quarantined (no_join_match)")
    max_field_chars: int = Field(100_000, ge=1, description="a longer string value quarantines the row (too_long)")

    @field_validator("storage_options")
    @classmethod
    def _no_credentials(cls, v: dict) -> dict:
        refuse_credentials(v, "storage_options.")  # the config is hashed and recorded with the import
        return v

    @field_validator("columns", mode="before")
    @classmethod
    def _column_paths(cls, v):
        return _specs(v)

    @field_validator("defaults")
    @classmethod
    def _defaults_stored(cls, v, info: ValidationInfo):
        kind = info.data.get("kind")
        if kind is None:  # the kind itself failed: reported there
            return v
        schema = table_schema(kind)
        return {col: _default_value(col, val, schema) for col, val in v.items()}

    @field_validator("labels", mode="before")
    @classmethod
    def _label_keys_as_text(cls, v):
        return _keys_as_text(v)

    @field_validator("labels")
    @classmethod
    def _labels_known(cls, v):
        bad = {k: val for k, val in v.items() if val not in LABELS}
        if bad:
            raise ValueError(f"labels must map to A, B or TIE; got {bad}")
        return v

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v):
        if v is not None and not NAME_RE.match(v):
            raise ValueError("an artifact name is letters, digits, '_', '.', '-'")
        return v

    @field_validator("id_template")
    @classmethod
    def _id_parses(cls, v):
        return _valid_template(v)

    @model_validator(mode="after")
    def _covers_kind(self):
        schema = table_schema(self.kind)
        both = sorted(set(self.columns) & set(self.defaults))
        if both:
            raise ValueError(f"defaults.{both[0]}: a column is either mapped (columns) or constant (defaults), "
                             f"not both")
        if self.id_template is not None and "id" in self.columns:
            raise ValueError("id_template: set either columns.id or id_template, not both")
        if self.labels and self.kind != "preference_pairs":
            raise ValueError("labels: only for kind preference_pairs")
        unknown = [c for c in self.allow_empty if c not in schema.names and c not in self.columns]
        if unknown:
            raise ValueError(f"allow_empty: {unknown[0]} is not a column of {self.kind} or of columns")
        for col in self.defaults:
            if col.startswith("_"):
                raise ValueError(f"defaults.{col}: helper columns ('_' names) are mapped, not defaulted")
        for field in schema:
            given = field.name in self.columns or field.name in self.defaults or \
                (field.name == "id" and self.id_template is not None)
            if not given and not field.nullable:
                hint = ", set id_template" if field.name == "id" else ""
                raise ValueError(f"columns: kind {self.kind} needs column '{field.name}': map it in columns"
                                 f"{hint} or set it in defaults")
        return self

    @model_validator(mode="after")
    def _helpers_defined_first(self):
        defined: set[str] = set()
        helpers = {c for c in self.columns if c.startswith("_")}
        for col, spec in self.columns.items():
            # a ``from`` path that names a helper column reads it (a source field may also start with '_')
            missing = sorted((spec.helpers_used() | (spec.from_paths() & helpers)) - defined)
            if missing:
                raise ValueError(f"columns.{col}: uses {missing[0]} before it is defined (a helper column "
                                 f"comes before the columns that use it)")
            if col.startswith("_"):
                defined.add(col)
        used = {f for f in template_fields(self.id_template) if f.startswith("_")} if self.id_template else set()
        if used - defined:
            raise ValueError(f"id_template: uses {sorted(used - defined)[0]}, which no helper column defines")
        return self


def _specs(v):
    """A bare string is shorthand for ``{from: path}``."""
    if isinstance(v, dict):
        return {k: {"from": s} if isinstance(s, str) else s for k, s in v.items()}
    return v


def _default_value(col: str, val: Any, schema) -> Any:
    """A default as the column stores it: mappings and lists JSON-encoded for text columns."""
    typ = str(schema.field(col).type) if col in schema.names else "string"
    if typ == "string":
        if isinstance(val, (dict, list)):
            val = json.dumps(val, ensure_ascii=False)
        if not isinstance(val, str):
            raise ValueError(f"{col}: expected text (or a mapping/list, JSON-encoded), "
                             f"got {type(val).__name__} {val!r}")
        if col == "verifier":
            why = verifier_problem(val)
            if why:
                raise ValueError(f"verifier: {why}")
    elif typ.startswith("int") and (isinstance(val, bool) or not isinstance(val, int)):
        raise ValueError(f"{col}: expected an integer, got {val!r}")
    elif typ == "double" and (isinstance(val, bool) or not isinstance(val, (int, float))):
        raise ValueError(f"{col}: expected a number, got {val!r}")
    return val


def verifier_problem(spec: str) -> str | None:
    """Why ``spec`` is not a verifier spec (a JSON object with a text 'type'), or None."""
    try:
        obj = json.loads(spec)
    except (TypeError, ValueError) as e:
        return f"not valid JSON ({e})"
    if not isinstance(obj, dict):
        return f"not a JSON object (a {type(obj).__name__})"
    if not isinstance(obj.get("type"), str) or not obj["type"]:
        return "has no text 'type'"
    return None


def _is_local(source: str) -> bool:
    return "://" not in source


def validate_import_config(data: dict, source: str = "<config>") -> ImportConfig:
    """Validate a config mapping; ConfigError with one line per problem, naming ``source`` and the field."""
    try:
        return ImportConfig.model_validate(data)
    except ValidationError as e:
        # Errors our validators raise say what is wrong themselves; the shared formatter (which also
        # quotes the whole offending input) is kept for pydantic's own errors.
        ours = [err for err in e.errors() if err["type"] == "value_error"]
        lines = [line for line in format_validation_error(e, ImportConfig, source).splitlines()
                 if "Value error, " not in line]
        for err in ours:
            where = ".".join(str(p) for p in err["loc"])
            msg = str(err["ctx"]["error"]) if "ctx" in err else err["msg"]
            lines.append(" ".join(f"config error in {source}: {where + ': ' if where else ''}{msg}".split()))
        raise ConfigError("\n".join(dict.fromkeys(lines))) from None


def load_import_config(path: str | Path) -> ImportConfig:
    """Read and validate an import config; relative source paths are taken from the file's folder."""
    path = Path(path)
    data = read_yaml(path)
    base = path.resolve().parent
    if isinstance(data.get("source"), str) and _is_local(data["source"]):
        candidate = base / data["source"]
        # For format datasets a bare loader name (json, parquet) stays a name unless such a file is there.
        bare = not any(sep in data["source"] for sep in "/\\")
        if data.get("format") != "datasets" or not bare or candidate.exists():
            data["source"] = os.path.normpath(candidate)
    join = data.get("join")
    if isinstance(join, dict) and isinstance(join.get("source"), str) and _is_local(join["source"]):
        data["join"] = {**join, "source": os.path.normpath(base / join["source"])}
    files = data.get("data_files")
    if isinstance(files, str):
        files = [files]
    if isinstance(files, list):
        data["data_files"] = [os.path.normpath(base / f) if isinstance(f, str) and _is_local(f) else f
                              for f in files]
    cfg = validate_import_config(data, str(path))
    if cfg.name is None:
        try:
            cfg.name = path.stem
        except ValueError:
            raise ConfigError(f"config error in {path}: name: the file name '{path.stem}' is not a valid "
                              f"artifact name; set name") from None
    return cfg
