"""Run BFCL calls in the code sandbox against the category's reference functions.

The reference functions are Python source the user points at (BFCL's file of executable functions,
or its directory of multi-turn classes); they may do anything, so they only ever run in the sandbox
(``compass.gym.sandbox``: no network, no environment, resource and time limits). The program sent
there is: an importer that serves the given sources as modules (so a class file's package imports
resolve), the rule module (``exec_match`` or ``turns``), and one JSON request. It prints one verdict
line behind a fresh marker; anything the functions print is ignored.
"""
from __future__ import annotations

import functools
import inspect
import json
import os
import re
import secrets
from pathlib import Path

from compass.gym.bfcl import exec_match, turns
from compass.gym.rows import RowError
from compass.gym.sandbox.pool import run_tests

_LOADER = r'''
import importlib.abc, importlib.util, json, sys
_SOURCES = json.loads(%(sources)r)
class _Served(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name in _SOURCES:
            return importlib.util.spec_from_loader(name, self, is_package=False)
        if any(k.startswith(name + ".") for k in _SOURCES):
            return importlib.util.spec_from_loader(name, self, is_package=True)
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        src = _SOURCES.get(module.__name__)
        if src is not None:
            exec(compile(src, "<" + module.__name__ + ">", "exec"), module.__dict__)
sys.meta_path.insert(0, _Served())
try:        # the sandbox refuses _posixsubprocess; a reference file that only imports subprocess still loads
    import subprocess
except PermissionError:
    import types
    _stub = types.ModuleType("subprocess")
    def _refuse(name):
        raise PermissionError("sandbox: subprocess." + name)
    _stub.__getattr__ = _refuse
    sys.modules["subprocess"] = _stub
'''

# the package BFCL's class files import each other by (its func_source_code folder)
BFCL_PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"

_CLASS = re.compile(r"^class\s+([A-Za-z_]\w*)\s*[(:]", re.M)


@functools.lru_cache(maxsize=32)
def _read(path: str, mtime: float) -> str:
    return Path(path).read_text(encoding="utf-8")


def source_of(path: str) -> str:
    """A reference file's text (cached while the file is unchanged); RowError(bad_spec) naming it."""
    p = Path(path).expanduser()
    try:
        return _read(str(p.resolve()), p.stat().st_mtime)
    except OSError as e:
        raise RowError(f"reference functions {str(p)!r} cannot be read: {e.strerror or e}", "bad_spec") from None


def package_sources(directory: str, package: str) -> dict[str, str]:
    """Every ``*.py`` of ``directory`` as a module of ``package`` (``pkg.stem``)."""
    d = Path(directory).expanduser()
    if not d.is_dir():
        raise RowError(f"reference classes directory {str(d)!r} does not exist", "bad_spec")
    return {f"{package}.{f.stem}" if package else f.stem: source_of(str(f)) for f in sorted(d.glob("*.py"))
            if f.stem != "__init__"}


def class_modules(sources: dict[str, str]) -> dict[str, str]:
    """Class name -> the module that defines it (the first, in module-name order)."""
    out: dict[str, str] = {}
    for mod, src in sources.items():
        for name in _CLASS.findall(src):
            out.setdefault(name, mod)
    return out


def run_program(sources: dict[str, str], rules, body: str, request: dict, timeout_s: float) -> dict:
    """Run ``body`` (which reads ``REQUEST`` and calls ``VERDICT(dict)``) after the loader and ``rules``'
    source; the verdict dict, or {"passed": False, "reason": <sandbox reason>} when none came back."""
    mark = "@@verdict-" + secrets.token_hex(8)
    program = "\n".join([
        _LOADER % {"sources": json.dumps(sources)},
        inspect.getsource(rules),
        f"REQUEST = json.loads({json.dumps(request)!r})",
        f"def VERDICT(v):\n    print({mark!r} + json.dumps(v), flush=True)",
    ])
    result = run_tests(program, [body], timeout_s)
    for line in reversed(result.output.splitlines()):
        if line.startswith(mark):
            return json.loads(line[len(mark):])
    reason = result.why[0] or result.status
    if result.status == "infra":
        reason = "sandbox_infra"
    return {"passed": False, "reason": reason or "crash", "detail": (result.why[1] or result.detail)[:300]}


_EXEC_BODY = r'''
import importlib
_fns = vars(importlib.import_module("_bfcl_functions"))
def _run(call):
    name, args, kwargs = call
    fn = _fns.get(name)
    if not callable(fn) or name.startswith("_"):
        return False, f"no function {name!r}"
    try:
        out = fn(*args, **kwargs)
    except Exception as e:
        return False, f"{type(e).__name__}: {e}"
    return True, out
def _run_gold(text):
    try:
        return True, eval(text, dict(_fns))
    except Exception as e:
        return False, f"{text}: {type(e).__name__}: {e}"
_gold = [_run_gold(c) for c in REQUEST["gold"]]
_bad = next((g for g in _gold if not g[0]), None)
if _bad is not None:
    VERDICT({"passed": False, "reason": "bad_gold", "detail": "a ground-truth call failed: " + str(_bad[1])[:200]})
else:
    _ok, _why = match_results([_run(c) for c in REQUEST["model"]], [g[1] for g in _gold], REQUEST["kinds"])
    VERDICT({"passed": _ok, "reason": _why, "detail": ""})
'''


def run_exec(functions_file: str, model: list, gold: list, kinds: list, timeout_s: float) -> dict:
    """The ``exec_match`` verdict of ``model`` calls against ``gold`` calls, both run on ``functions_file``."""
    sources = {"_bfcl_functions": source_of(functions_file)}
    return run_program(sources, exec_match, _EXEC_BODY, {"model": model, "gold": gold, "kinds": kinds}, timeout_s)


_TURNS_BODY = r'''
import importlib
_classes = {c: getattr(importlib.import_module(m), c) for c, m in REQUEST["classes"]}
VERDICT(check_turns(_classes, REQUEST["initial_config"], REQUEST["model"], REQUEST["gold"],
                    REQUEST["long_context"]))
'''


def run_turns(classes_dir: str, package: str, involved: list[str], initial_config: dict, model: list,
              gold: list, long_context: bool, timeout_s: float) -> dict:
    """The ``turns`` verdict of per-turn ``model`` calls against ``gold`` on the classes of ``classes_dir``."""
    sources, classes = _classes_request(classes_dir, package, involved)
    request = {"classes": classes, "initial_config": initial_config,
               "model": model, "gold": gold, "long_context": long_context}
    return run_program(sources, turns, _TURNS_BODY, request, timeout_s)


_REPLAY_BODY = r'''
import importlib
_classes = {c: getattr(importlib.import_module(m), c) for c, m in REQUEST["classes"]}
if REQUEST["describe"]:
    VERDICT({"tools": describe(_classes)})
else:
    VERDICT({"results": replay(_classes, REQUEST["initial_config"], REQUEST["model"], REQUEST["long_context"])})
'''


def _classes_request(classes_dir: str, package: str, involved: list[str]) -> tuple[dict, list]:
    sources = package_sources(classes_dir, package)
    where = class_modules(sources)
    unknown = [c for c in involved if c not in where]
    if unknown:
        raise RowError(f"class {unknown[0]!r} is defined in no file of {classes_dir!r}", "bad_spec")
    return sources, [[c, where[c]] for c in involved]


def replay_turns(classes_dir: str, package: str, involved: list[str], initial_config: dict, model: list,
                 long_context: bool, timeout_s: float) -> list[list[str]]:
    """Per turn, the results of the model's calls so far, run from the starting state in the sandbox;
    RowError(sandbox reason) when the sandbox gave none."""
    sources, classes = _classes_request(classes_dir, package, involved)
    out = run_program(sources, turns, _REPLAY_BODY, {"classes": classes, "initial_config": initial_config,
                                                     "model": model, "long_context": long_context,
                                                     "describe": False}, timeout_s)
    if "results" not in out:
        raise RowError(f"the classes could not run the calls: {out.get('detail', '')}", out.get("reason") or "crash")
    return out["results"]


@functools.lru_cache(maxsize=64)
def _described(classes_dir: str, package: str, involved: tuple[str, ...], timeout_s: float) -> str:
    sources, classes = _classes_request(classes_dir, package, list(involved))
    out = run_program(sources, turns, _REPLAY_BODY, {"classes": classes, "describe": True}, timeout_s)
    if "tools" not in out:
        raise RowError(f"the classes could not be described: {out.get('detail', '')}", out.get("reason") or "crash")
    return json.dumps(out["tools"])


def describe_classes(classes_dir: str, package: str, involved: list[str], timeout_s: float = 30.0) -> list[dict]:
    """The tools (``turns.describe``) of the involved classes, read in the sandbox once per class set."""
    return json.loads(_described(classes_dir, package, tuple(involved), timeout_s))


def resolve(path: str) -> str:
    """A spec's path: ``~`` expanded; a relative one against ``COMPASS_BFCL_DIR`` when set, else the cwd."""
    p = os.path.expanduser(path)
    base = os.environ.get("COMPASS_BFCL_DIR")
    return os.path.join(base, p) if base and not os.path.isabs(p) else p
