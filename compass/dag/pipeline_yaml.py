"""A pipeline YAML as a user writes it: laid onto a base, then validated.

A user's file says only what it changes: it is deep-merged (``compass.config.deep_merge``: mappings
key by key, lists and values replaced) onto the embedded default ``configs/tiny.yaml``, what
``make run`` runs. A top-level ``base:`` key picks another base: a path (relative to the file,
itself read by these rules), or ``none`` for the config models' own defaults (smaller still: the
unit tests' sizes). The embedded default is complete and has no base.

``validate(PipelineConfig, dict)`` is untouched by this: a dict built in code is the whole config.
"""
from __future__ import annotations

from pathlib import Path

from compass.config import ConfigError, deep_merge, read_yaml, validate

EMBEDDED_DEFAULT = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"
BASE_KEY = "base"
NO_BASE = "none"


def _is_default(path: Path) -> bool:
    try:
        return path.resolve() == EMBEDDED_DEFAULT
    except OSError:
        return False


def _read(path: Path, seen: tuple[Path, ...]) -> tuple[dict, list[str]]:
    """The merged mapping of ``path`` and the chain of bases under it (nearest first)."""
    data = read_yaml(path)
    if _is_default(path):
        data.pop(BASE_KEY, None)
        return data, []
    base = data.pop(BASE_KEY, None)
    if base is None or str(base).strip().lower() == "default":
        return deep_merge(read_yaml(EMBEDDED_DEFAULT), data), [f"the embedded default {EMBEDDED_DEFAULT}"]
    if not isinstance(base, str):
        raise ConfigError(f"config error in {path}: {BASE_KEY}: expected a YAML path, 'default' or "
                          f"'{NO_BASE}' (got {base!r})")
    if base.strip().lower() == NO_BASE:
        return data, ["no base file (the config models' defaults)"]
    base_path = (path.parent / base).resolve()
    if base_path in seen:
        raise ConfigError(f"config error in {path}: {BASE_KEY}: {base} leads back to itself")
    if not base_path.exists():
        raise ConfigError(f"config error in {path}: {BASE_KEY}: file not found: {base_path}")
    under, chain = _read(base_path, (*seen, base_path))
    return deep_merge(under, data), [str(base_path), *chain]


def load_pipeline_dict(path: str | Path | None) -> tuple[dict, str]:
    """(the merged mapping, one line saying which base it was built on); no path: the embedded default."""
    if path is None:
        return read_yaml(EMBEDDED_DEFAULT), f"config: the embedded default {EMBEDDED_DEFAULT}"
    p = Path(path)
    data, chain = _read(p, (p.resolve(),) if p.exists() else ())
    if not chain:
        return data, f"config: {path} (the embedded default)"
    return data, f"config: {path} on top of " + ", on top of ".join(chain)


def load_pipeline_config(path: str | Path | None):
    """(``PipelineConfig``, the base line) of a pipeline YAML; errors are ``ConfigError``s naming the file."""
    from compass.dag.config import PipelineConfig
    data, line = load_pipeline_dict(path)
    return validate(PipelineConfig, data, str(path or EMBEDDED_DEFAULT)), line
