"""The deploy/ files the tests read, and the facts they are checked against (pins, the project version)."""
from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = ROOT / "deploy" / "docker"
KUBERAY_DIR = ROOT / "deploy" / "kuberay"
CLUSTER_CONFIG_DIR = ROOT / "configs" / "cluster"
PAPER_CONFIG = CLUSTER_CONFIG_DIR / "paper.yaml"
PAPER_2NODE_CONFIG = CLUSTER_CONFIG_DIR / "paper-2node.yaml"     # paper.yaml's reasoning RL on two 8-GPU nodes
CHECKOUT_IN_IMAGE = "/opt/compass"        # WORKDIR and COMPASS_CHECKOUT of every image
IMAGE = re.compile(r"^compass-rl-(?P<family>[a-z]+):(?P<tag>[^\s:@]+)$")


def dockerfiles() -> list[Path]:
    return sorted(DOCKER_DIR.glob("*.Dockerfile"))


def manifests() -> list[Path]:
    return sorted(KUBERAY_DIR.glob("*.yaml"))


def project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def pins(path: Path) -> dict[str, str]:
    """``name==version`` lines of a requirements file -> {name: version} (lower-case names)."""
    out = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;#]+)", line.strip())
        if m:
            out[m.group(1).split("[")[0].lower()] = m.group(2)
    return out


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    out, buf = [], ""
    for line in dockerfile.read_text().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        full = (buf + line).strip()
        buf = ""
        op, _, args = full.partition(" ")
        out.append((op.upper(), args.strip()))
    return out


def load_all(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def cluster_spec(doc: dict) -> dict:
    """The RayCluster spec of a RayCluster or of a RayJob's own cluster."""
    return doc["spec"] if doc["kind"] == "RayCluster" else doc["spec"]["rayClusterSpec"]


def groups(spec: dict) -> list[tuple[str, dict]]:
    """(group name, group spec) for the head ("head") and every worker group."""
    return [("head", spec["headGroupSpec"])] + [(g["groupName"], g) for g in spec.get("workerGroupSpecs", [])]


def containers(spec: dict) -> list[dict]:
    return [c for _, g in groups(spec) for c in g["template"]["spec"]["containers"]]


def entrypoint_argv(doc: dict) -> list[str]:
    return shlex.split(doc["spec"]["entrypoint"])


def entrypoint_config(doc: dict) -> Path:
    """The repository file a RayJob's ``--config`` names (the image holds the checkout at CHECKOUT_IN_IMAGE)."""
    argv = entrypoint_argv(doc)
    path = argv[argv.index("--config") + 1]
    assert path.startswith(CHECKOUT_IN_IMAGE + "/"), path
    return ROOT / path[len(CHECKOUT_IN_IMAGE) + 1:]
