"""The layers, enforced on the source (every import statement, lazy ones inside functions too):

- ``stages/`` holds exactly the DAG's stage packages; a stage never imports another stage
  (stages talk only through artifacts), nor ``flows``;
- the library (``compass`` less its ``cli`` and ``bench`` front ends) never imports a stage,
  ``flows`` or the front ends;
- only ``flows/`` imports Prefect; importing every stage and the stage runtime loads no Prefect.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from compass.dag.stages import STAGES

ROOT = Path(__file__).resolve().parents[1]
FRONT_ENDS = ("compass.cli", "compass.bench")        # may import anything: they run stages and flows


def _module_name(root: Path, f: Path) -> str:
    rel = f.relative_to(root).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def _imports(root: Path, f: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``f``; relative imports resolved."""
    name = _module_name(root, f)
    package = name if f.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"), filename=str(f))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.append((node.lineno, base))
            out += [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return out


def _within(mod: str, *prefixes: str) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def violations(root: Path, stages: tuple[str, ...]) -> list[str]:
    """Every layering violation under ``root`` (a checkout's top level), as ``file:line: what``."""
    found = []
    stage_dirs = sorted(p.name for p in (root / "stages").iterdir() if p.is_dir() and any(p.glob("*.py")))
    if set(stage_dirs) != set(stages):
        found.append(f"stages/: holds {stage_dirs}, the DAG's stages are {sorted(stages)}")
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root)
        if rel.parts[0] not in ("compass", "stages", "flows"):
            continue
        me = _module_name(root, f)
        for line, mod in _imports(root, f):
            where = f"{rel}:{line}"
            if rel.parts[0] != "flows" and _within(mod, "prefect", "prefect_ray"):
                found.append(f"{where}: imports Prefect (only flows/ may)")
            if rel.parts[0] == "stages" and len(rel.parts) > 2:
                mine = rel.parts[1]
                other = mod.split(".")[1] if _within(mod, "stages") and mod.count(".") >= 1 else None
                if other in stages and other != mine:
                    found.append(f"{where}: stage {mine} imports stage {other} (stages talk through artifacts)")
                if _within(mod, "flows", *FRONT_ENDS):
                    found.append(f"{where}: stage {mine} imports {'.'.join(mod.split('.')[:2])}")
            if rel.parts[0] == "compass" and not _within(me, *FRONT_ENDS):
                if _within(mod, "stages", "flows", *FRONT_ENDS):
                    found.append(f"{where}: library module {me} imports {'.'.join(mod.split('.')[:2])}")
    return sorted(set(found))


def test_the_tree_keeps_its_layers():
    assert violations(ROOT, STAGES) == []


@pytest.mark.parametrize("path, source, expected", [
    ("stages/sft/stage.py", "def f():\n    from stages.evaluation.stage import x\n", "stage sft imports stage evaluation"),
    ("stages/sft/stage.py", "from stages import merge\n", "stage sft imports stage merge"),
    ("stages/merge/stage.py", "from ..sft import train\n", "stage merge imports stage sft"),
    ("compass/gym/judge.py", "import stages.genrm.verdict\n", "library module compass.gym.judge imports stages"),
    ("compass/rl/engine.py", "from flows.pipeline import run\n", "library module compass.rl.engine imports flows"),
    ("compass/lm/chat.py", "import prefect\n", "imports Prefect (only flows/ may)"),
    ("stages/evaluation/stage.py", "from prefect import task\n", "imports Prefect (only flows/ may)"),
    ("stages/notes/stage.py", "", "the DAG's stages are"),
])
def test_a_planted_violation_is_found(tmp_path, path, source, expected):
    stages = ("sft", "merge", "evaluation")
    for pkg in ("compass", "compass/gym", "compass/rl", "compass/lm", "flows", "stages",
                *(f"stages/{s}" for s in stages)):
        (tmp_path / pkg).mkdir(parents=True, exist_ok=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "stages/sft/stage.py").write_text("from compass.lm import chat\n")    # allowed: stage -> library
    (tmp_path / "flows/pipeline.py").write_text("import prefect\nfrom stages.sft import stage\n")  # allowed
    assert violations(tmp_path, stages) == []
    (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / path).write_text(source)
    found = violations(tmp_path, stages)
    assert len(found) == 1 and expected in found[0], found


def test_stages_import_no_prefect():
    mods = [f"stages.{s}.stage" for s in STAGES] + ["compass.runtime.invoke", "compass.runtime.stage_cli",
                                                    "compass.dag.run_plan"]
    code = ("import sys, importlib\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            "leaks = sorted(m for m in sys.modules if m == 'prefect' or m.startswith('prefect.'))\n"
            "print(len(leaks), leaks[:5])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout
    assert out.startswith("0 "), out


def test_stages_package_lists_the_dag_in_order():
    import stages
    from compass.dag.pipeline import PIPELINE
    assert tuple(stages.__all__) == tuple(dict.fromkeys(n.stage for n in PIPELINE))
