"""Config loading: YAML validated by pydantic at the edge.

Every model forbids unknown keys; an error names the file, the dotted path of
the bad key and, for a misspelling, the key that was probably meant.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for every config model: unknown keys are errors, values are validated on assignment."""
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


class ConfigError(ValueError):
    """A config that does not validate; str() is one line per problem."""


def _known_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """The field names allowed at ``loc`` (for 'did you mean')."""
    cur: type | None = model
    for part in loc[:-1]:
        if not (isinstance(cur, type) and issubclass(cur, BaseModel)):
            return []
        field = cur.model_fields.get(part)
        if field is None:
            return []
        cur = field.annotation
    if isinstance(cur, type) and issubclass(cur, BaseModel):
        return list(cur.model_fields)
    return []


def format_validation_error(err: ValidationError, model: type[BaseModel], source: str) -> str:
    lines = []
    for e in err.errors():
        loc = tuple(e["loc"])
        path = ".".join(str(p) for p in loc) or "(top level)"
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
            close = difflib.get_close_matches(str(loc[-1]), _known_keys(model, loc), n=1)
            if close:
                msg += f" (did you mean '{close[0]}'?)"
        elif e["type"] == "missing":
            msg = "required key is missing"
        else:
            msg = f"{e['msg']} (got {e.get('input')!r})"
        lines.append(f"config error in {source}: {path}: {msg}")
    return "\n".join(lines)


def validate(model: type[M], data: dict, source: str = "<config>") -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, model, source)) from None


def load_yaml(model: type[M], path: str | Path) -> M:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config error: file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"config error in {path}: not valid YAML: {e}".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise ConfigError(f"config error in {path}: top level must be a mapping, got {type(data).__name__}")
    return validate(model, data, str(path))
