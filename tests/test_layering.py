"""Stages know nothing of Prefect: importing every stage (specs and bodies) never imports it."""
from __future__ import annotations

import subprocess
import sys

from stages.registry import STAGES


def test_stages_import_no_prefect():
    mods = [f"stages.{s}.stage" for s in STAGES] + ["stages.common.invoke", "stages.common.stage_cli",
                                                    "stages.dag.run_plan"]
    code = ("import sys, importlib\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            "leaks = sorted(m for m in sys.modules if m == 'prefect' or m.startswith('prefect.'))\n"
            "print(len(leaks), leaks[:5])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("0 "), out
