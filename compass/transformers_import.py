"""Make ``import transformers`` cheaper in every process compass starts.

Each stage, Ray rollout worker, trainer rank and benchmark run imports transformers to build a model; on a
2-core machine that import was ~7 s of CPU, and the test suite starts a few hundred such processes. Four parts of
it do nothing compass needs, or the same thing every time:

- ``sklearn.metrics`` (with SciPy), imported by the generation utilities whenever scikit-learn is installed
  (lm-eval installs it), for assisted decoding's adaptive threshold only: ~1.5-2 s.
- ``scipy.optimize``, imported by the object-detection losses (``transformers.loss``, loaded with every model) for
  their matching step: ~0.5 s.
- ``importlib.metadata.packages_distributions()``, read once at import to map module names to distributions:
  it opens the metadata of every installed distribution (~0.4 s with ~270 of them).
- ``define_import_structure``, which reads and scans each of the ~3,000 files under ``transformers/models``
  to build the lazy module table (~0.8 s; transformers caches it in memory only).

A meta-path hook acts on three transformers modules while they load: the first two see scikit-learn and SciPy
as absent (only those modules: every other caller of ``is_sklearn_available``/``is_scipy_available`` is
untouched, and scikit-learn and SciPy still import for anyone who asks); the last two are kept in a JSON file
under ``$COMPASS_CACHE/transformers-import`` (default ``~/.cache/compass-rl``), keyed by everything that decides
them (for the distributions: each ``sys.path`` folder and its modification time, which an install or uninstall
changes; for the import structure: the transformers version, the folder and its modification time), written
atomically, and recomputed when missing or unreadable. ``COMPASS_TRANSFORMERS_AS_IS=1`` leaves transformers as
it is. Measured in docs/architecture.md §6.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import sys
import tempfile
from pathlib import Path

from compass.import_hook import spec_from_other_finders

OPT_OUT = "COMPASS_TRANSFORMERS_AS_IS"
IMPORT_UTILS = "transformers.utils.import_utils"
# module -> the availability check it must see as False while it loads (it binds the name at import)
HIDDEN = {"transformers.generation.candidate_generator": "is_sklearn_available",
          "transformers.loss.loss_utils": "is_scipy_available"}


def cache_dir() -> Path:
    root = Path(os.environ.get("COMPASS_CACHE", Path.home() / ".cache" / "compass-rl"))
    return root / "transformers-import"


def _key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:24]


def _mtime(path) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _read(name: str):
    try:
        return json.loads((cache_dir() / name).read_text())
    except (OSError, ValueError):
        return None


def _write(name: str, value) -> None:
    """Atomically (a reader never sees half a file); a cache that cannot be written is only slower."""
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
        with os.fdopen(fd, "w") as f:
            json.dump(value, f)
        os.replace(tmp, folder / name)
    except OSError:
        pass


def cached_packages_distributions(compute=importlib.metadata.packages_distributions) -> dict[str, list[str]]:
    """``packages_distributions()``, read from disk when no ``sys.path`` folder changed since it was written."""
    name = "distributions-" + _key([(p, _mtime(p)) for p in sys.path]) + ".json"
    hit = _read(name)
    if isinstance(hit, dict):
        return hit
    value = compute()
    _write(name, value)
    return value


def _encode(structure: dict) -> list:
    return [[sorted(backends), {module: sorted(names) for module, names in table.items()}]
            for backends, table in structure.items()]


def _decode(raw: list) -> dict:
    return {frozenset(backends): {module: set(names) for module, names in table.items()} for backends, table in raw}


def disk_cached_import_structure(define):
    """Wrap transformers' ``define_import_structure(module_path, prefix=None)`` with a disk cache (and keep its
    in-memory one). The result is ``{frozenset(backends): {module: {names}}}``; JSON keeps it exactly."""
    @functools.lru_cache
    def cached(module_path, prefix=None):
        folder = Path(module_path) if Path(module_path).is_dir() else Path(module_path).parent
        version = getattr(sys.modules.get("transformers"), "__version__", None)
        name = "structure-" + _key(version, str(folder), str(module_path), prefix, _mtime(folder)) + ".json"
        hit = _read(name)
        if isinstance(hit, list):
            try:
                return _decode(hit)
            except (TypeError, ValueError):
                pass
        value = define(module_path, prefix)
        _write(name, _encode(value))
        return value
    cached.__wrapped__ = define
    return cached


class _Loader:
    """The real loader of one transformers module, with compass's change made around its execution."""

    def __init__(self, real, name: str):
        self._real, self._name = real, name

    def __getattr__(self, attr):            # get_source, is_package, …: the real loader's
        return getattr(self._real, attr)

    def create_module(self, spec):
        return self._real.create_module(spec)

    def exec_module(self, module):
        if self._name == IMPORT_UTILS:
            metadata = importlib.metadata
            original = metadata.packages_distributions
            metadata.packages_distributions = functools.partial(cached_packages_distributions, original)
            try:
                self._real.exec_module(module)
            finally:
                metadata.packages_distributions = original
            if callable(getattr(module, "define_import_structure", None)):
                module.define_import_structure = disk_cached_import_structure(module.define_import_structure)
            return
        utils = sys.modules.get("transformers.utils")   # always loaded before these modules
        check = HIDDEN[self._name]
        original = getattr(utils, check, None)
        if original is None:                # a transformers without that check: nothing to hide
            return self._real.exec_module(module)
        setattr(utils, check, lambda: False)
        try:
            self._real.exec_module(module)
        finally:
            setattr(utils, check, original)


class _Hook:
    """A meta-path finder that finds nothing itself: for three transformers modules it asks the finders after it
    and wraps the loader they return."""

    targets = frozenset({IMPORT_UTILS, *HIDDEN})

    def find_spec(self, name, path=None, target=None):
        if name not in self.targets or name in sys.modules:
            return None
        spec = spec_from_other_finders(self, name, path, target)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(spec.loader, name)
        return spec


def install() -> None:
    """Add the hook (idempotent). A no-op under the opt-out, or if transformers is already imported."""
    if os.environ.get(OPT_OUT) == "1" or "transformers" in sys.modules:
        return
    if not any(isinstance(f, _Hook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())
