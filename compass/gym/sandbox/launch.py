"""How a sandbox worker process is started: inside fresh namespaces when the host allows it.

Preferred: util-linux ``unshare --mount --net --pid --fork --mount-proc --kill-child``
runs a small shell script as root in the new namespaces, which

- mounts private tmpfs over ``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run/lock``: scratch dirs live
  there, and whatever a task writes to a world-writable place never reaches the host;
- re-exposes the interpreter's files when they sit under a directory other users
  cannot enter (pyenv under a 0700 ``/root``): the needed subtree is bind-mounted into a
  fresh 0755 tmpfs over that directory, so the task uid can import the standard library
  (and the rest of that directory, e.g. ``/root/.ssh``, is hidden);

then execs the worker, which becomes pid 1: the network namespace has only a down
loopback, ``/proc`` shows only the sandbox, and when the worker dies the kernel kills
every process in it. Where ``unshare`` is missing or refused, the worker runs as a plain
child and the audit hook and rlimits are the only walls (``isolation`` says which).
"""
from __future__ import annotations

import os
import shlex
import shutil
import stat
import sys
from pathlib import Path

WORKER = Path(__file__).with_name("worker.py")
# Every world-writable place on a usual host; the task uid could write nowhere else.
TMPFS = (("/tmp", "256m"), ("/var/tmp", "16m"), ("/dev/shm", "16m"), ("/run/lock", "1m"))
STAGING = "/dev/shm"


def _blocked_ancestor(path: Path) -> tuple[Path, str] | None:
    """The topmost ancestor of ``path`` that others cannot traverse, and the child name under it."""
    parts = path.resolve().parts
    for i in range(1, len(parts) - 1):
        d = Path(*parts[: i + 1])
        try:
            mode = d.stat().st_mode
        except OSError:
            return None
        if not mode & stat.S_IXOTH:
            return d, parts[i + 1]
    return None


def _needed() -> list[Path]:
    """What the worker must still see inside the namespaces: the interpreter's prefixes and this package."""
    paths = {Path(os.path.realpath(p)) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                                                 os.path.dirname(os.__file__))}
    paths.add(WORKER.parent.resolve())
    return sorted(paths)


def _under_tmpfs(path: Path) -> str | None:
    """The private-tmpfs mount point ``path`` lies under (it would vanish behind the tmpfs), if any."""
    for mnt, _ in TMPFS:
        if path == Path(mnt) or Path(mnt) in path.parents:
            return mnt
    return None


def _keep_script(paths: list[Path], staging: str) -> tuple[list[str], list[str]]:
    """Shell lines that carry ``paths`` (e.g. a venv or checkout under /tmp) across the tmpfs mounts:
    bind each onto ``staging`` before the mounts, move it back to its own path (whose new parents
    are 0755) after them."""
    keep = [p for p in paths if _under_tmpfs(p) and not any(q != p and q in p.parents for q in paths)]
    before, after = [], []
    for k, path in enumerate(keep):
        stage, q = f"{staging}/.keep{k}", shlex.quote(str(path))
        before += [f"mkdir {stage}", f"mount --bind {q} {stage}"]
        after += [f"mkdir -p {q}", f"mount --move {stage} {q}", f"rmdir {stage}"]
    return before, after


def _expose_script() -> list[str]:
    """Shell lines that make the interpreter's prefixes reachable by an unprivileged uid."""
    needs: dict[Path, set[str]] = {}
    for p in _needed():
        if _under_tmpfs(p):
            continue                     # re-created by _keep_script with traversable parents
        hit = _blocked_ancestor(p)
        if hit:
            needs.setdefault(hit[0], set()).add(hit[1])
    lines, k = [], 0
    for top, names in needs.items():
        staged = []
        for name in sorted(names):
            stage = f"/tmp/.stage{k}"
            k += 1
            lines += [f"mkdir {stage}", f"mount --bind {shlex.quote(str(top / name))} {stage}"]
            staged.append((stage, top / name))
        lines.append(f"mount -t tmpfs -o size=1m,mode=755 tmpfs {shlex.quote(str(top))}")
        for stage, target in staged:
            q = shlex.quote(str(target))
            lines += [f"mkdir -p {q}", f"mount --move {stage} {q}", f"rmdir {stage}"]
    return lines


def namespace_argv(python: str, config: str) -> list[str] | None:
    """argv starting the worker in new namespaces, or None where ``unshare`` is unavailable."""
    unshare = shutil.which("unshare", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if unshare is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    script = ["set -e"]
    # /dev/shm first: it is the staging area for what must survive the other tmpfs mounts
    mounts = sorted(TMPFS, key=lambda m: m[0] != STAGING)
    before, after = _keep_script(_needed(), STAGING)
    if before and not os.path.isdir(STAGING):
        return None
    for mnt, size in mounts:
        script.append(f"if [ -d {mnt} ]; then mount -t tmpfs -o size={size},mode=1777 tmpfs {mnt}; fi")
        if mnt == STAGING:
            script += before
    script += after
    script += _expose_script()
    script.append("exec " + " ".join(shlex.quote(a) for a in (python, "-I", str(WORKER), config)))
    return [unshare, "--mount", "--net", "--pid", "--fork", "--mount-proc", "--propagation", "private",
            "--kill-child", "--", "/bin/sh", "-c", "\n".join(script)]


def plain_argv(python: str, config: str) -> list[str]:
    return [python, "-I", str(WORKER), config]
