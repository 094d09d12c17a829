"""Code sandbox benchmark: verdicts and programs/s against a naive runner on MBPP, plus a hostile suite.

The naive runner is the obvious implementation: for each program, write it to a file
with its tests appended (each wrapped in try/except printing a marked per-test verdict)
and ``subprocess.run([sys.executable, file])`` it, one program after the other, under
the same timeout. The sandbox (``compass.gym.sandbox``) runs the same programs in its
pool (default: one worker per core). Programs, from MBPP (``<repo>/../shared/data/mbpp``):

- ``canonical``: each task's reference solution (``test_setup_code`` + ``code``);
- ``perturbed``: the solution with the tested function wrapped so that every other
  call returns a nudged value (+1, flipped bool, shortened sequence ...): mixed verdicts;
- ``swapped``: the next task's solution (almost always fails every test).

Tests are ``test_list`` + ``challenge_test_list``. Per-test verdicts must be identical,
and the sandbox's programs/s is measured against the naive runner's on the same set in
the same run. The hostile suite then runs programs that each try one attack; a case is
contained when its verdict is fail, the host-side check holds (no file written or
deleted, no connection received), no process of a task uid is left, this process's
memory did not grow, and the next ordinary task scores 1.0.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

DEFAULT_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mbpp"


@dataclass(frozen=True)
class Program:
    task_id: int
    kind: str                       # canonical | perturbed | swapped
    source: str
    tests: tuple[str, ...]


# -- MBPP programs ------------------------------------------------------------------------
def load_mbpp(data_dir: Path) -> list[dict]:
    path = Path(data_dir) / "mbpp.jsonl"
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


_CALLED = re.compile(r"assert\s+(?:not\s+)?\(?\s*(?:math\.isclose\()?\s*([A-Za-z_]\w*)\s*\(")

# Appended to a solution: every other call of the tested function returns a nudged value.
_PERTURB = '''

def _bench_nudge(v):
    if isinstance(v, bool):
        return not v
    if isinstance(v, (int, float)):
        return v + 1
    if isinstance(v, str):
        return v + "?"
    if isinstance(v, (list, tuple)):
        return type(v)(list(v)[:-1]) if len(v) else [0]
    return None

_bench_orig, _bench_calls = {name}, [0]

def {name}(*args, **kwargs):
    _bench_calls[0] += 1
    out = _bench_orig(*args, **kwargs)
    return _bench_nudge(out) if _bench_calls[0] % 2 else out
'''


def mbpp_programs(rows: list[dict]) -> list[Program]:
    """Canonical, perturbed and swapped programs for each MBPP task (in that order per task)."""
    out = []
    for k, r in enumerate(rows):
        setup = r.get("test_setup_code") or ""
        tests = tuple(r["test_list"]) + tuple(r.get("challenge_test_list") or ())
        solution = f"{setup}\n{r['code']}\n"
        out.append(Program(r["task_id"], "canonical", solution, tests))
        m = _CALLED.search(r["test_list"][0])
        if m:
            out.append(Program(r["task_id"], "perturbed", solution + _PERTURB.format(name=m.group(1)), tests))
        other = rows[(k + 1) % len(rows)]
        out.append(Program(r["task_id"], "swapped", f"{setup}\n{other['code']}\n", tests))
    return out


# -- the naive peer -------------------------------------------------------------------------
def naive_file(source: str, tests: tuple[str, ...], marker: str) -> str:
    """The program with each test appended, each reporting ``marker i 0|1`` on stdout."""
    parts = [source, "\n\n"]
    for i, test in enumerate(tests):
        parts.append(f"try:\n{textwrap.indent(test, '    ')}\n"
                     f"except BaseException:\n    print({marker!r}, {i}, 0, flush=True)\n"
                     f"else:\n    print({marker!r}, {i}, 1, flush=True)\n")
    return "".join(parts)


def naive_run(source: str, tests: tuple[str, ...], timeout_s: float, workdir: str) -> list[bool]:
    """One fresh interpreter per program, run to completion or the timeout."""
    marker = "VERDICT-" + os.urandom(8).hex()
    path = os.path.join(workdir, "prog.py")
    with open(path, "w") as f:
        f.write(naive_file(source, tests, marker))
    try:
        proc = subprocess.run([sys.executable, path], cwd=workdir, capture_output=True, timeout=timeout_s,
                              env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        out = proc.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout or b""
    verdicts = [False] * len(tests)
    for line in out.decode("utf-8", "replace").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == marker and parts[1].isdigit() and int(parts[1]) < len(tests):
            verdicts[int(parts[1])] = parts[2] == "1"
    return verdicts


def run_naive(programs: list[Program], timeout_s: float) -> tuple[list[list[bool]], float]:
    with tempfile.TemporaryDirectory(prefix="compass-naive-") as work:
        t0 = time.perf_counter()
        verdicts = [naive_run(p.source, p.tests, timeout_s, work) for p in programs]
        return verdicts, time.perf_counter() - t0


def run_sandbox(pool, programs: list[Program], timeout_s: float) -> tuple[list, float]:
    from compass.gym.sandbox.pool import Job
    t0 = time.perf_counter()
    results = pool.map([Job(p.source, p.tests, timeout_s) for p in programs])
    return results, time.perf_counter() - t0


# -- the hostile suite ------------------------------------------------------------------------
@dataclass
class Hostile:
    name: str
    program: str
    tests: tuple[str, ...]
    host_check: Callable[[], bool] = lambda: True    # True: nothing happened on the host
    note: str = ""


@dataclass
class HostileEnv:
    """Host-side bait: a listening socket, a file to delete, a path to write, a secret in the env."""
    secret: str = field(default_factory=lambda: "s3cret-" + os.urandom(6).hex())
    tmp: tempfile.TemporaryDirectory = field(default_factory=lambda: tempfile.TemporaryDirectory(
        prefix="compass-hostile-", dir="/run" if os.access("/run", os.W_OK) else None))

    def __post_init__(self):
        os.environ["COMPASS_SANDBOX_SECRET"] = self.secret
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.server.setblocking(False)
        self.port = self.server.getsockname()[1]
        self.victim = os.path.join(self.tmp.name, "victim.txt")
        with open(self.victim, "w") as f:
            f.write("keep me")
        self.escape = os.path.join(self.tmp.name, "escaped.txt")
        self.escape_tmp = os.path.join(tempfile.gettempdir(), f"compass-escaped-{os.getpid()}.txt")

    def connected(self) -> bool:
        try:
            self.server.accept()[0].close()
            return True
        except BlockingIOError:
            return False

    def close(self):
        os.environ.pop("COMPASS_SANDBOX_SECRET", None)
        self.server.close()
        self.tmp.cleanup()


def hostile_cases(env: HostileEnv) -> list[Hostile]:
    """Each program attacks once; its test passes only if the attack worked."""
    me = os.getpid()
    return [
        Hostile("fork_bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
                ("assert True",)),
        Hostile("memory_bomb", "hog = []\nwhile True:\n    hog.append(bytearray(64 << 20))", ("assert hog",)),
        Hostile("cpu_loop", "while True:\n    pass", ("assert True",)),
        Hostile("sleep_loop", "import time\nwhile True:\n    time.sleep(0.05)", ("assert True",)),
        Hostile("write_outside", f"for p in ({env.escape!r}, {env.escape_tmp!r}):\n    open(p, 'w').write('x')",
                ("assert True",), lambda: not os.path.exists(env.escape) and not os.path.exists(env.escape_tmp)),
        Hostile("network", f"import socket\ns = socket.create_connection(('127.0.0.1', {env.port}), timeout=1)\n"
                "s.sendall(b'hello')", ("assert True",), lambda: not env.connected()),
        Hostile("read_env", "import os, glob\nfound = [k for k, v in os.environ.items() if 's3cret-' in v]\n"
                "for p in glob.glob('/proc/*/environ'):\n    try:\n"
                "        found += ['x'] if b's3cret-' in open(p, 'rb').read() else []\n"
                "    except OSError:\n        pass\n"
                f"try:\n    found += ['x'] if b's3cret-' in open('/proc/{me}/environ', 'rb').read() else []\n"
                "except OSError:\n    pass",
                ("assert found",)),
        Hostile("kill_parent", f"import os, signal\nfor pid in (os.getppid(), {me}):\n    try:\n"
                "        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\nraise SystemExit(1)",
                ("assert True",)),
        Hostile("killpg_parent", f"import os, signal\nfor pid in (os.getppid(), {me}):\n    try:\n"
                "        os.killpg(os.getpgid(pid), signal.SIGKILL)\n    except OSError:\n        pass\n"
                "raise SystemExit(1)", ("assert True",)),
        Hostile("output_flood", "import sys\nline = 'x' * 65535 + '\\n'\nfor _ in range(1 << 15):\n"
                "    sys.stdout.write(line)", ("assert True",)),
        Hostile("delete_outside", f"import os\nos.remove({env.victim!r})", ("assert True",),
                lambda: os.path.exists(env.victim)),
        Hostile("setsid_daemon", "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
                "raise SystemExit(1)", ("assert True",)),
        Hostile("ctypes_escape", "import ctypes\nctypes.CDLL(None).kill(1, 9)", ("assert True",)),
    ]


def task_processes(pool) -> list[int]:
    """Task processes still alive between tasks (there must be none): processes running as a
    task uid, descendants of a worker, and processes carrying a worker's launch token (forked
    from it, even after setsid re-parented them away)."""
    import psutil
    keep = set()                                        # the launchers and the workers themselves
    for pid in pool.worker_pids():
        keep.add(pid)
        try:
            launcher = psutil.Process(pid)
            if launcher.name() == "unshare":
                keep.update(c.pid for c in launcher.children())
        except psutil.NoSuchProcess:
            pass
    uids = set(pool.task_uids())
    tokens = [f"COMPASS_SANDBOX_WORKER={t}".encode() for t in pool.worker_tokens()]
    found = set()
    for p in psutil.process_iter(["uids", "cmdline"]):
        try:
            if p.info["uids"] and p.info["uids"].real in uids:
                found.add(p.pid)
            elif any("sandbox/worker.py" in a for a in p.info["cmdline"] or ()):
                with open(f"/proc/{p.pid}/environ", "rb") as f:
                    if any(t in f.read() for t in tokens):
                        found.add(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
            pass
    for pid in keep:
        try:
            found.update(d.pid for d in psutil.Process(pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    return sorted(found - keep)


def rss_mb() -> float:
    import psutil
    return psutil.Process().memory_info().rss / 2**20


LEFTOVER_GRACE_S = 3.0


def run_hostile(pool, timeout_s: float = 2.0) -> list[dict]:
    """Each hostile case, then an ordinary task; one row per case."""
    env = HostileEnv()
    rows = []
    try:
        for case in hostile_cases(env):
            rss0 = rss_mb()
            t0 = time.perf_counter()
            res = pool.run(case.program, case.tests, timeout_s)
            wall = time.perf_counter() - t0
            time.sleep(0.05)                                   # let a missed connection reach the backlog
            host_ok = case.host_check()
            leftovers = task_processes(pool)
            # a fork bomb's processes are killed at once, but on a loaded machine the kernel can take a moment
            # to tear them all down: a leftover is one still there after LEFTOVER_GRACE_S
            deadline = time.monotonic() + LEFTOVER_GRACE_S
            while leftovers and time.monotonic() < deadline:
                time.sleep(0.1)
                leftovers = task_processes(pool)
            after = pool.run("def f(x):\n    return x + 1", ["assert f(1) == 2", "assert f(2) == 3"], 5)
            grew = rss_mb() - rss0
            contained = (res.passed == 0 and host_ok and not leftovers and after.score == 1.0 and grew < 64)
            rows.append({"case": case.name, "status": res.status, "verdict": "fail" if res.passed == 0 else "PASS",
                         "host_ok": host_ok, "leftovers": len(leftovers), "next_ok": after.score == 1.0,
                         "rss_growth_mb": round(grew, 1), "contained": contained, "wall_s": round(wall, 2)})
    finally:
        env.close()
    return rows


# -- main ----------------------------------------------------------------------------------
def compare(programs: list[Program], naive: list[list[bool]], sandbox: list) -> dict:
    per_kind: dict[str, dict] = {}
    mismatches = []
    for p, nv, sr in zip(programs, naive, sandbox):
        k = per_kind.setdefault(p.kind, {"programs": 0, "tests": 0, "naive_passed": 0, "sandbox_passed": 0,
                                         "agree": 0})
        k["programs"] += 1
        k["tests"] += len(nv)
        k["naive_passed"] += sum(nv)
        k["sandbox_passed"] += sr.passed
        k["agree"] += nv == sr.verdicts
        if nv != sr.verdicts:
            mismatches.append((p.task_id, p.kind, nv, sr.verdicts, sr.status))
    return {"per_kind": per_kind, "mismatches": mismatches}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench gym-code")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="MBPP folder with mbpp.jsonl")
    ap.add_argument("--limit", type=int, default=None, help="use only the first N tasks")
    ap.add_argument("--timeout", type=float, default=10.0, help="per-program wall clock, both runners")
    ap.add_argument("--concurrency", type=int, default=None, help="sandbox workers (default: usable cores)")
    ap.add_argument("--hostile-timeout", type=float, default=2.0)
    args = ap.parse_args(argv)
    if not (args.data / "mbpp.jsonl").is_file():
        print(f"error: MBPP not found: {args.data / 'mbpp.jsonl'} (pass --data DIR)", file=sys.stderr)
        return 2
    from compass.gym.sandbox.pool import SandboxPool
    rows = load_mbpp(args.data)[: args.limit]
    programs = mbpp_programs(rows)
    with SandboxPool(args.concurrency) as pool:
        isolation = pool.isolation()                         # start-up is not part of the timing
        for i in range(pool.concurrency):                    # warm every worker
            pool.run("x = 1", ["assert x == 1"], 5)
        naive, naive_wall = run_naive(programs, args.timeout)
        results, sandbox_wall = run_sandbox(pool, programs, args.timeout)
        hostile = run_hostile(pool, args.hostile_timeout)
        infra = pool.infra_retries
    cmp = compare(programs, naive, results)
    n = len(programs)
    naive_rate, sandbox_rate = n / naive_wall, n / sandbox_wall
    identical = not cmp["mismatches"]
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r.status] = statuses.get(r.status, 0) + 1

    print(f"MBPP {len(rows)} tasks -> {n} programs, {sum(len(p.tests) for p in programs)} tests; timeout "
          f"{args.timeout:g}s; sandbox concurrency {pool.concurrency}; isolation "
          + ", ".join(k for k, v in isolation.items() if v))
    print(f"{'programs':<11} {'n':>5} {'tests':>6} {'naive pass':>11} {'sandbox pass':>13} {'agree':>7}")
    for kind, k in cmp["per_kind"].items():
        print(f"{kind:<11} {k['programs']:>5} {k['tests']:>6} {k['naive_passed']:>11} {k['sandbox_passed']:>13} "
              f"{k['agree']:>7}")
    print(f"{'runner':<11} {'wall s':>8} {'programs/s':>11}")
    print(f"{'naive':<11} {naive_wall:>8.1f} {naive_rate:>11.1f}")
    print(f"{'sandbox':<11} {sandbox_wall:>8.1f} {sandbox_rate:>11.1f}   (x{sandbox_rate / naive_rate:.1f}; statuses "
          + ", ".join(f"{s} {c}" for s, c in sorted(statuses.items())) + ")")
    for task_id, kind, nv, sv, status in cmp["mismatches"][:20]:
        print(f"MISMATCH task {task_id} {kind}: naive {nv} sandbox {sv} ({status})")
    print(f"{'hostile case':<15} {'verdict':>7} {'status':>13} {'host ok':>8} {'leftover':>9} {'next ok':>8} "
          f"{'contained':>10} {'time s':>7}")
    for h in hostile:
        print(f"{h['case']:<15} {h['verdict']:>7} {h['status']:>13} {str(h['host_ok']):>8} {h['leftovers']:>9} "
              f"{str(h['next_ok']):>8} {'yes' if h['contained'] else 'NO':>10} {h['wall_s']:>7.2f}")
    contained = sum(h["contained"] for h in hostile)
    print(json.dumps({"bench": "gym-code", "tasks": len(rows), "programs": n,
                      "naive_programs_per_s": round(naive_rate, 2), "sandbox_programs_per_s": round(sandbox_rate, 2),
                      "speedup_vs_naive": round(sandbox_rate / naive_rate, 2), "verdicts_identical": identical,
                      "verdict_mismatches": len(cmp["mismatches"]),
                      "tests": sum(len(p.tests) for p in programs),
                      "hostile_contained": f"{contained}/{len(hostile)}", "concurrency": pool.concurrency,
                      "infra_retries": infra, "isolation": isolation}))
    return 0 if identical and contained == len(hostile) else 1
