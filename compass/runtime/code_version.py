"""Code versions: the hash of exactly the project code a stage runs.

A stage's code is its own package plus every project module it imports, followed transitively
(``import`` and ``from … import`` statements anywhere in a file, lazy ones included, and module
names that registries import by string, such as ``"compass.rl.trainer.megatron_trainer"`` in a registry's module table, and name prefixes such as ``"compass.gym.verifiers."``). Editing any of
those files changes the stage's version, so stale artifacts are never reused; editing a module the
stage never reaches changes nothing. The closure is computed from the source, not kept by hand.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import importlib.metadata
import re
from pathlib import Path

from compass.store.fingerprint import VERSION_LEN

ROOT = Path(__file__).resolve().parents[2]          # the repository: compass/, stages/, artifacts_schema/
PROJECT_PACKAGES = ("compass", "stages", "artifacts_schema")

# Modules that only orchestrate or report (CLI, logging, progress bars): editing them changes no
# output, so they are left out of every version (and their imports are not followed).
NOT_IN_CODE_VERSION = frozenset({"compass.runtime.stage_cli", "compass.runtime.invoke", "compass.logs",
                                 "compass.progress", "compass.store.options", "compass.credentials"})
# Third-party packages whose version can change what a stage writes.
VERSIONED_DEPENDENCIES = ("torch", "transformers", "tokenizers", "safetensors", "mergekit", "pyarrow")

_MODULE_NAME = re.compile(r"^(?:compass|stages|artifacts_schema)(?:\.\w+)*\.?$")


def module_file(name: str) -> Path | None:
    """The source file of project module ``name`` (a package's ``__init__.py``), or None."""
    base = ROOT.joinpath(*name.split("."))
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


@functools.lru_cache(maxsize=None)
def _imports_of(name: str) -> tuple[str, ...]:
    """Project module names one module refers to: its imports and module-name strings."""
    f = module_file(name)
    package = name if f is not None and f.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(f.read_bytes(), filename=str(f))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)      # `from pkg import module`
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_NAME.match(node.value):
            found.add(node.value)                                    # importlib by name, or a name prefix
    out: set[str] = set()
    for mod in found:
        if mod.split(".")[0] not in PROJECT_PACKAGES:
            continue
        if mod.endswith(".") or module_file(mod) is None:
            out.update(_with_prefix(mod))                            # "compass.gym.verifiers." -> every verifier module
        else:
            out.add(mod)
    return tuple(sorted(m for m in out if m != name))


def _with_prefix(prefix: str) -> set[str]:
    """Project modules whose dotted name starts with ``prefix`` (within the prefix's package)."""
    pkg, _, stem = prefix.rpartition(".")
    pkg_dir = ROOT.joinpath(*pkg.split(".")) if pkg else None
    if pkg_dir is None or not pkg_dir.is_dir():
        return set()
    return {f"{pkg}.{f.stem}" for f in pkg_dir.glob(f"{stem}*.py") if f.stem != "__init__"}


def package_modules(package: str) -> set[str]:
    """Every module of a project package, subpackages included."""
    pkg_dir = ROOT.joinpath(*package.split("."))
    if not (pkg_dir / "__init__.py").is_file():
        raise ValueError(f"code_version: no package {package}")
    out = set()
    for f in pkg_dir.rglob("*.py"):
        rel = f.relative_to(ROOT).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out.add(".".join(parts))
    return out


def module_closure(*packages: str) -> list[str]:
    """The project modules ``packages`` (dotted names) run: their own modules and, transitively,
    every project module they import, less NOT_IN_CODE_VERSION. Sorted."""
    todo = [m for p in packages for m in package_modules(p)]
    seen: set[str] = set()
    while todo:
        mod = todo.pop()
        if mod in seen or mod in NOT_IN_CODE_VERSION or module_file(mod) is None:
            continue
        seen.add(mod)
        todo.extend(_ancestors(mod))                                 # importing a.b.c runs a and a.b first
        todo.extend(_imports_of(mod))
    return sorted(seen)


@functools.lru_cache(maxsize=None)
def code_version(*packages: str) -> str:
    """Hash of the sources of :func:`module_closure` of ``packages``, of the table contract
    (``artifacts_schema``) and of the versions of VERSIONED_DEPENDENCIES."""
    h = hashlib.sha256()
    for mod in sorted(set(module_closure(*packages)) | package_modules("artifacts_schema")):
        f = module_file(mod)
        h.update(str(f.relative_to(ROOT)).encode())
        h.update(f.read_bytes())
    for dist in VERSIONED_DEPENDENCIES:
        h.update(f"{dist}=={_dist_version(dist)}".encode())
    return h.hexdigest()[:VERSION_LEN]


def _dist_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"
