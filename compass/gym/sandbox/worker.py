"""The fork-server worker: a warm interpreter that forks one locked-down child per task.

Started by ``compass.gym.sandbox.pool`` as ``python -I worker.py CONFIG_JSON`` with an
empty environment, usually as pid 1 of fresh pid, mount and network namespaces (see
``launch.py``). Standard library only. Protocol on stdin/stdout, one JSON object
per line: first the worker says ``{"hello": ..., "isolation": {...}}``, then for each job
line it answers one result line. A fresh interpreter costs ~20-40 ms per program; a fork
of this one, with the harness and common modules already imported, costs well under 1 ms.

The worker is the trusted side: it enforces the wall-clock timeout and the output cap,
reads verdicts only from the task's private pipe (lines carrying the task's nonce), and
after every task kills every process the task left behind and removes its scratch dir.
"""
from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import child as sandbox_child  # noqa: E402  (next to this file; not a package import under -I)

sys.path.pop(0)

# Imported once here so that tasks find them in sys.modules instead of reading and
# compiling them each time (most MBPP-style programs use a few of these).
PRELOAD = ("math", "re", "collections", "heapq", "itertools", "functools", "bisect", "string", "operator",
           "copy", "array", "decimal", "fractions", "statistics", "random", "datetime", "json", "cmath",
           "typing", "textwrap", "unicodedata", "dataclasses", "enum")
VERDICT_FD = 3


def _preload() -> None:
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass


def _probe_uid(uid: int) -> bool:
    """Can an unprivileged ``uid`` still import the standard library (not the case under a 0700 /root)?"""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            sandbox_child.drop_privileges(uid)
            with open(os.path.join(os.path.dirname(os.__file__), "_pydecimal.py"), "rb"):
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _net_isolated() -> bool:
    try:
        with open("/proc/net/dev") as f:
            names = [line.split(":")[0].strip() for line in f.readlines()[2:]]
    except OSError:
        return False
    return all(n == "lo" for n in names)


class Worker:
    def __init__(self, cfg: dict):
        self.pid1 = os.getpid() == 1
        self.private_tmp = bool(cfg.get("private_tmp")) and os.path.ismount("/tmp")
        uid = cfg.get("uid")
        self.uid = uid if uid is not None and os.geteuid() == 0 and _probe_uid(uid) else None
        self.scratch_root = "/tmp" if self.private_tmp else tempfile.gettempdir()
        self.seq = 0
        self.token = "COMPASS_SANDBOX_WORKER=" + os.environ.get("COMPASS_SANDBOX_WORKER", "") \
            if os.environ.get("COMPASS_SANDBOX_WORKER") else ""

    def isolation(self) -> dict:
        return {"pid_ns": self.pid1, "net_ns": _net_isolated(), "private_tmp": self.private_tmp,
                "uid_drop": self.uid is not None, "audit_hook": True}

    # -- one task ----------------------------------------------------------------------
    def run(self, job: dict) -> dict:
        self.seq += 1
        self.sweep()                                 # leftovers of an earlier task, if any survived
        t0 = time.monotonic()
        scratch = tempfile.mkdtemp(prefix=f"task{self.seq}-", dir=self.scratch_root)
        try:
            if self.uid is not None:
                os.chown(scratch, self.uid, self.uid)
            return {"id": job.get("id"), **self._supervise(job, scratch, t0)}
        finally:
            self.sweep()
            shutil.rmtree(scratch, ignore_errors=True)   # never follows the program's symlinks

    def _spawn(self, job: dict, scratch: str, nonce: str) -> tuple[int, int, int]:
        vr, vw = os.pipe()
        orr, ow = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:                                  # the task child: never returns into this loop
            try:
                os.setsid()                           # its own group: one killpg ends it and its forks
                os.close(vr)
                os.close(orr)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(ow, 1)                        # the program's output never reaches our stdout
                os.dup2(ow, 2)
                if vw != VERDICT_FD:
                    os.dup2(vw, VERDICT_FD)
                os.closerange(VERDICT_FD + 1, 1024)   # nor our protocol pipes
                sandbox_child.run_task(job, nonce, VERDICT_FD, scratch, self.uid)
            finally:
                os._exit(4)
        os.close(vw)
        os.close(ow)
        return pid, vr, orr

    def _supervise(self, job: dict, scratch: str, t0: float) -> dict:
        n, max_out = len(job["tests"]), int(job.get("max_output_bytes", 1 << 20))
        nonce = os.urandom(16).hex()
        try:
            pid, vr, orr = self._spawn(job, scratch, nonce)
        except OSError as e:                          # fork failed: an infrastructure error
            return {"status": "infra", "verdicts": [False] * n, "ready": False, "detail": f"spawn: {e}",
                    "output": "", "output_bytes": 0, "wall_s": time.monotonic() - t0}
        pidfd = os.pidfd_open(pid)
        sel = selectors.DefaultSelector()
        for fd in (vr, orr, pidfd):
            sel.register(fd, selectors.EVENT_READ)
        verdicts: list[bool] = [False] * n
        ready, done, exited, status, why = False, None, False, None, None
        out, out_total, vbuf = bytearray(), 0, b""
        deadline = t0 + float(job["timeout_s"])
        tag = nonce.encode() + b" "
        try:
            while status is None and done is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    status = "timeout"
                    break
                events = sel.select(0 if exited else left)
                if not events and exited:             # the child is gone and the pipes are drained
                    break
                for key, _ in events:
                    if key.fd == pidfd:
                        exited = True
                        sel.unregister(pidfd)
                        continue
                    data = os.read(key.fd, 1 << 16)
                    if not data:
                        sel.unregister(key.fd)
                        continue
                    if key.fd == orr:
                        out_total += len(data)
                        out += data[: max(0, max_out - len(out))]
                        if out_total > max_out:
                            status = "output_limit"
                        continue
                    vbuf += data
                    *lines, vbuf = vbuf.split(b"\n")
                    vbuf = vbuf[-4096:]               # an unterminated forgery cannot grow without bound
                    for line in lines:
                        if not line.startswith(tag):
                            continue
                        body = line[len(tag):]
                        if body.startswith(b"why ") and why is None:
                            code, _, message = body[4:].decode("utf-8", "replace").partition(" ")
                            why = (code[:80], message[:400])
                            continue
                        word = body.split()
                        if word == [b"ready"]:
                            ready = True
                        elif len(word) == 2 and word[0] == b"done":
                            done = word[1].decode()
                        elif len(word) == 2 and word[0].isdigit() and int(word[0]) < n:
                            verdicts[int(word[0])] = word[1] == b"1"
            if done is not None:                      # output written before "done" is already queued
                out_total = self._drain(orr, out, out_total, max_out)
        finally:
            sel.close()
            for fd in (vr, orr, pidfd):
                os.close(fd)
        code = self.kill_task(pid)
        detail = ""
        if status is None:
            if done is not None:
                status = done if done in ("memory", "error") else "ok"
            elif not ready:
                status, detail = "infra", f"sandbox setup failed (exit {code})"
            elif code == -signal.SIGXCPU or code == -signal.SIGKILL:
                status, detail = "cpu_limit", f"exit {code}"
            else:
                status, detail = "crash", f"exit {code}"
        reason, message = why if why is not None else ("", "")
        return {"status": status, "verdicts": verdicts, "ready": ready, "detail": detail,
                "reason": reason, "message": message,
                "output": out.decode("utf-8", "replace"), "output_bytes": out_total,
                "wall_s": time.monotonic() - t0}

    @staticmethod
    def _drain(fd: int, out: bytearray, total: int, max_out: int) -> int:
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            for _ in range(64):                       # bounded: a forked leftover may still be writing
                if not sel.select(0):
                    break
                data = os.read(fd, 1 << 16)
                if not data:
                    break
                total += len(data)
                out += data[: max(0, max_out - len(out))]
        return total

    # -- cleanup ------------------------------------------------------------------------
    def kill_task(self, pid: int) -> int | None:
        """End the task's group, reap the child (its exit code, kept if it had already exited), sweep."""
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        code = self._reap(pid)
        self.sweep()
        return code

    def sweep(self) -> None:
        """Kill every process a task left, including ones that left its group (setsid)."""
        for _ in range(50):
            if self.pid1:
                try:
                    os.kill(-1, signal.SIGKILL)      # pid 1 of a pid namespace: everyone in it but us
                except ProcessLookupError:           # nobody left
                    pass
            elif self.uid is not None:
                self._kill_uid()
            else:
                self._kill_marked()
            self._reap_orphans()
            if not self._others_left():
                return
            time.sleep(0.001)

    def _kill_uid(self) -> None:
        """A helper running as the task uid: kill(-1) reaches exactly that uid's processes."""
        pid = os.fork()
        if pid == 0:
            try:
                os.setresuid(self.uid, self.uid, self.uid)
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
            finally:
                os._exit(0)
        os.waitpid(pid, 0)

    def _kill_marked(self) -> None:
        """Without a pid namespace or a task uid: every process forked from this worker still
        carries the worker's launch environment in /proc/<pid>/environ (tasks cannot exec, and
        clearing os.environ does not rewrite that block), so the launch token finds them all,
        including those that left the task's group with setsid."""
        if not self.token:
            return
        me, token, killed = str(os.getpid()), self.token.encode(), []
        for d in os.listdir("/proc"):
            if not d.isdigit() or d == me:
                continue
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if token in f.read():
                        os.kill(int(d), signal.SIGKILL)
                        killed.append(d)
            except OSError:
                pass
        for _ in range(200):                          # they are not our children: wait until they are gone
            if not any(self._running(d) for d in killed):
                return
            time.sleep(0.001)

    @staticmethod
    def _running(pid: str) -> bool:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
        except OSError:
            return False

    def _others_left(self) -> bool:
        if self.pid1:                                 # /proc is this namespace's own
            return any(d.isdigit() and d != "1" for d in os.listdir("/proc"))
        return False

    @staticmethod
    def _reap_orphans() -> None:
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0):
                    return
            except ChildProcessError:
                return

    @staticmethod
    def _reap(pid: int) -> int | None:
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:                     # already reaped by a sweep
            return None
        return os.waitstatus_to_exitcode(status)


def main() -> int:
    cfg = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    _preload()
    worker = Worker(cfg)
    out = sys.stdout
    out.write(json.dumps({"hello": 1, "isolation": worker.isolation()}) + "\n")
    out.flush()
    for line in sys.stdin.buffer:                     # EOF: the pool closed us
        try:
            job = json.loads(line)
            reply = worker.run(job)
        except Exception as e:                        # noqa: BLE001 - report, let the pool retry
            reply = {"id": None, "status": "infra", "detail": f"worker: {type(e).__name__}: {e}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
