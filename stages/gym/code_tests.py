"""``code`` verifier: run a response's Python program against assert-style unit tests.

Spec: ``{"type": "code", "tests": ["assert f(1) == 2", ...], "timeout_s": 5}``;
the reference (the canonical solution) is not needed. Score = the fraction
of tests that pass (dense feedback, as in the paper §2.5).

The program is the last fenced Python block of the final answer (a bare
```` ``` ```` fence when there is no ```` ```python ```` one), else the whole
final answer. It runs once, in a fresh ``python -I -S`` child in its own
process group, with a scratch working directory, a minimal environment (no
inherited variables, so no secrets), resource limits and a wall-clock
limit of ``timeout_s`` for the whole run; each test executes in the
program's namespace and its verdict is streamed back, so the tests that
passed before a hang still count. On timeout the whole process group is
killed. This is the simple, correct runner; the hardened sandbox (no
network, seccomp, concurrency control, retries) is a later issue.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile

from stages.gym.provisional import final_answer
from stages.gym.registry import register_verifier

DEFAULT_TIMEOUT_S = 5.0
MAX_OUTPUT_BYTES = 1 << 20

_PY_FENCE = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\n(.*?)```", re.S | re.I)
_ANY_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.S)

# Runs in the child: reads {"program", "tests", "nonce"} on stdin, silences the
# program's own output (fd 1 and 2 go to /dev/null) and reports one line per test
# on a private copy of stdout, tagged with a nonce the program never sees in its
# namespace, so printing fake verdicts earns nothing.
_HARNESS = r"""
import json, os, resource, sys
job = json.loads(sys.stdin.read())
nonce, tests, limits = job.pop("nonce"), job.pop("tests"), job.pop("limits")
out = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1)
os.dup2(null, 2)
for name, value in limits.items():
    try:
        resource.setrlimit(getattr(resource, name), (value, value))
    except (ValueError, OSError, AttributeError):
        pass
def report(i, ok):
    out.write("%s %d %d\n" % (nonce, i, 1 if ok else 0))
    out.flush()
ns = {"__name__": "__main__"}
try:
    exec(compile(job.pop("program"), "<program>", "exec"), ns)
    loaded = True
except BaseException:
    loaded = False
for i, test in enumerate(tests):
    if not loaded:
        report(i, False)
        continue
    try:
        exec(compile(test, "<test>", "exec"), ns)
        ok = True
    except BaseException:
        ok = False
    report(i, ok)
out.close()
import signal
# done: end forked leftovers now, so the pipe closes; reap them (an orphan would be a zombie
# where no init reaps), then kill whatever ignored SIGTERM, this process included
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.killpg(0, signal.SIGTERM)
import time
deadline = time.monotonic() + 0.2
try:
    while time.monotonic() < deadline:
        if os.waitpid(-1, os.WNOHANG) == (0, 0):
            time.sleep(0.002)
except ChildProcessError:  # no children left
    pass
os.killpg(0, signal.SIGKILL)
"""


def extract_program(response: str) -> str:
    """The code to run: the last ```python fence of the final answer, else its last
    bare fence, else the whole final answer ("" when there is no final answer)."""
    answer = final_answer(response)
    for fence in (_PY_FENCE, _ANY_FENCE):
        blocks = fence.findall(answer)
        if blocks:
            return blocks[-1]
    return answer


def _limits(timeout_s: float) -> dict[str, int]:
    return {"RLIMIT_CPU": int(timeout_s) + 1, "RLIMIT_AS": 1 << 30, "RLIMIT_FSIZE": 1 << 20,
            "RLIMIT_CORE": 0}


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_tests(program: str, tests: list[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> list[bool]:
    """Per-test verdicts of ``program`` (a test that never reported, e.g. after a hang, failed)."""
    if not tests:
        return []
    if not program.strip():
        return [False] * len(tests)
    nonce = secrets.token_hex(16)
    job = json.dumps({"program": program, "tests": list(tests), "nonce": nonce, "limits": _limits(timeout_s)})
    with tempfile.TemporaryDirectory(prefix="compass-code-") as scratch:
        env = {"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8"}
        with subprocess.Popen([sys.executable, "-I", "-S", "-c", _HARNESS], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=scratch, env=env,
                              start_new_session=True) as proc:  # closes the pipes and reaps the child
            try:  # the harness ends by killing its own process group, forked leftovers included
                out, _ = proc.communicate(job.encode(), timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)  # before the child is reaped, so its group id cannot be someone else's
                try:  # what was reported before the kill is kept by communicate
                    out, _ = proc.communicate(timeout=2)
                except subprocess.TimeoutExpired:  # a grandchild that left the group holds the pipe
                    out = b""
    passed = [False] * len(tests)
    for line in out[:MAX_OUTPUT_BYTES].decode("utf-8", "replace").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == nonce and parts[1].isdigit() and int(parts[1]) < len(tests):
            passed[int(parts[1])] = parts[2] == "1"
    return passed


@register_verifier("code", needs_reference=False)
def _code(spec: dict, response: str, reference: str) -> float:
    tests = spec.get("tests") or []
    if not isinstance(tests, list) or not tests:
        return 0.0
    timeout = float(spec.get("timeout_s", DEFAULT_TIMEOUT_S))
    verdicts = run_tests(extract_program(response), [str(t) for t in tests], timeout)
    return sum(verdicts) / len(tests)
