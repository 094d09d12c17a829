"""What runs inside one sandboxed task: lock the process down, then run the program and its tests.

This module is imported by the fork-server worker (``worker.py``) before it forks,
so a task pays for none of it; it uses the standard library only. After the fork the task
child calls :func:`run_task`, which never returns (it ends with ``os._exit``).

Order matters. Everything that needs root happens first (rlimits, scratch ownership),
then the uid drop (after which the kernel refuses to raise a hard limit, signal the
root worker or read its ``/proc/<pid>/environ``, or write root-owned files), then the
audit hook (which cannot be removed once added), and only then user code.

Verdicts go to a private pipe, one line per test, tagged with a per-task nonce; the
program's stdout and stderr are a different pipe, so printing verdicts earns nothing.
The program runs in this same interpreter, so a program that deliberately introspects
the harness (frames, closures) could still call the reporter: the nonce stops output
forgery, not in-process tampering (the same holds for any exec-based checker).
"""
from __future__ import annotations

import builtins
import os
import random
import re
import resource
import sys

# Modules user code may not import even when they are already loaded in the worker:
# ctypes reaches raw syscalls (unshare, setuid, mount), _posixsubprocess spawns programs
# without the "subprocess.Popen" audit event.
FORBIDDEN_MODULES = ("ctypes", "_ctypes", "_posixsubprocess", "cffi", "_cffi_backend")

# Audit events refused outright: starting other programs, any socket, raising limits,
# and heap walks (gc) that make finding the harness's objects a one-liner.
DENIED_EVENTS = frozenset({
    "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.forkpty", "os.startfile", "pty.spawn",
    "subprocess.Popen", "socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
    "socket.getaddrinfo", "socket.gethostbyname", "resource.setrlimit", "resource.prlimit",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.remote_exec",
})
# Events whose path argument(s) must stay inside the scratch dir: (event, indices of path args).
PATH_WRITE_EVENTS = {
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.link": (1,),
    "os.symlink": (1,), "os.chmod": (0,), "os.chown": (0,), "os.truncate": (0,), "os.utime": (0,),
    "os.chflags": (0,), "os.lchflags": (0,), "os.mkfifo": (0,), "os.mknod": (0,), "shutil.rmtree": (0,),
    "shutil.move": (0, 1), "os.removexattr": (0,), "os.setxattr": (0,),
}
# Forks per process lineage: each fork spends one unit in both parent and child, so a task
# can never hold more than 2**FORK_BUDGET processes even where RLIMIT_NPROC does not count
# (no uid drop: root ignores it). One program forking a helper or two still works.
FORK_BUDGET = 4
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# Other processes' secrets and memory: refused to read even where the kernel would allow it.
_PROC_PRIVATE = re.compile(r"^/proc/(\d+|thread-self|self)/(task/\d+/)?(environ|mem|cmdline|maps|auxv|stack|syscall)$")


def apply_limits(limits: dict) -> None:
    """Hard and soft rlimits from ``limits`` (names like ``RLIMIT_AS``); applied as root, before the drop."""
    for name, value in limits.items():
        soft, hard = value if isinstance(value, (list, tuple)) else (value, value)
        resource.setrlimit(getattr(resource, name), (soft, hard))


def drop_privileges(uid: int) -> None:
    """Become ``uid`` (a per-slot id no one else uses): RLIMIT_NPROC now counts, root's files are read-only."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def make_guard(scratch: str):
    """The audit hook: writes only under ``scratch`` (or /dev/null), no programs, sockets, foreign signals."""
    scratch = os.path.realpath(scratch)
    me, busy, forks = os.getpid, [], [0]

    def resolve(p) -> str:
        p = os.fsdecode(os.fspath(p))
        return os.path.realpath(os.path.join(os.getcwd(), p))

    def writable(p) -> bool:
        if isinstance(p, int):          # an fd the process already holds
            return True
        real = resolve(p)
        return _inside(real, scratch) or real == os.devnull

    def deny(event: str, what: str = ""):
        raise PermissionError(f"sandbox: {event} {what}".rstrip())

    def hook(event: str, args: tuple) -> None:
        if busy:                        # events raised by the hook's own path resolution
            return
        if event in DENIED_EVENTS or event.startswith("ctypes."):
            deny(event)
        if event == "import" and args and args[0].split(".")[0] in FORBIDDEN_MODULES:
            deny(event, args[0])
        if event == "os.fork":
            if forks[0] >= FORK_BUDGET:
                deny(event, "budget spent")
            forks[0] += 1
            return
        busy.append(1)
        try:
            if event == "open":
                path, mode, flags = (tuple(args) + (None, None, 0))[:3]
                if isinstance(path, int) or path is None:
                    return
                wants_write = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                              bool((flags or 0) & _WRITE_FLAGS)
                if wants_write and not writable(path):
                    deny("write outside scratch:", str(path))
                m = _PROC_PRIVATE.match(resolve(path))
                if m and m.group(1) != str(me()):
                    deny("read of another process's", m.group(3))
            elif event in PATH_WRITE_EVENTS:
                for i in PATH_WRITE_EVENTS[event]:
                    if i < len(args) and args[i] is not None and not writable(args[i]):
                        deny(event, str(args[i]))
                if event in ("os.remove", "os.rmdir", "os.mkdir", "os.rename", "os.symlink", "os.link") and \
                        any(isinstance(a, int) and a >= 0 for a in args[2:]):
                    deny(event, "with dir_fd")  # paths relative to an fd cannot be checked here
            elif event == "os.kill":
                pid = args[0]
                if pid not in (0, me(), -os.getpgrp()):
                    deny(event, f"pid {pid}")
            elif event == "os.killpg":
                if args[0] != os.getpgrp():
                    deny(event, f"group {args[0]}")
        finally:
            busy.clear()
    return hook


def lock_down(scratch: str, uid: int | None, limits: dict) -> None:
    """Everything between fork and user code: cwd, env, limits, uid, modules, audit hook."""
    os.chdir(scratch)
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8"})
    os.umask(0o077)
    apply_limits(limits)
    random.seed()                       # forked from one worker, every task would share its random state
    if "tempfile" in sys.modules:       # the worker's cached temp dir is not this task's
        sys.modules["tempfile"].tempdir = scratch
    if uid is not None:
        drop_privileges(uid)
    for name in list(sys.modules):
        if name.split(".")[0] in FORBIDDEN_MODULES:
            del sys.modules[name]
    # Calls that raise no audit event but reach other processes; the kernel already refuses
    # them to the task uid, this only raises the bar where tasks run as root (no uid drop).
    for mod, attr in (("posix", "pidfd_open"), ("os", "pidfd_open"), ("_signal", "pidfd_send_signal"),
                      ("signal", "pidfd_send_signal"), ("posix", "setpriority"), ("os", "setpriority")):
        if mod in sys.modules and hasattr(sys.modules[mod], attr):
            delattr(sys.modules[mod], attr)
    _refuse_dir_fd_open()
    sys.dont_write_bytecode = True
    sys.addaudithook(make_guard(scratch))


def _refuse_dir_fd_open() -> None:
    """The "open" audit event omits ``dir_fd``, so ``os.open(rel, O_WRONLY, dir_fd=fd)`` would
    be checked against the cwd instead; refuse ``dir_fd`` in ``os.open`` itself. (A program
    can dig the original out of this closure; where tasks run as the task uid the kernel
    refuses such writes anyway.)"""
    real_open = os.open

    def open_(path, flags, mode=0o777, *, dir_fd=None):
        if dir_fd is not None:
            raise PermissionError("sandbox: os.open with dir_fd")
        return real_open(path, flags, mode)
    os.open = open_
    if "posix" in sys.modules:
        sys.modules["posix"].open = open_


def run_task(job: dict, nonce: str, verdict_fd: int, scratch: str, uid: int | None) -> None:
    """Run ``job['program']`` then each test in its namespace, report on ``verdict_fd``; never returns.

    Lines: ``<nonce> ready`` once locked down (no "ready" means the sandbox itself failed:
    an infrastructure error), ``<nonce> <i> <0|1>`` per test, ``<nonce> why <code> <message>`` once for
    the first failure, ``<nonce> done <ok|error|memory>`` (error: the program itself raised before any
    test ran).
    """
    harness_pid = os.getpid()

    def report(line: str) -> None:
        if os.getpid() == harness_pid:  # a forked copy of the program must not report twice
            os.write(verdict_fd, f"{nonce} {line}\n".encode())

    code = 0
    try:
        lock_down(scratch, uid, job["limits"])
        report("ready")
        code = _run(job, report)
    except BaseException:               # noqa: BLE001 - whatever happens, never return into the worker
        code = 3
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:       # noqa: BLE001
                pass
        os._exit(code)


def failure_reason(exc: BaseException, where: str) -> tuple[str, str]:
    """(reason code, message) for an exception the program (``where="program"``) or a test raised.

    Codes are ``compass.gym.reasons``': a refused sandbox event names it (``sandbox_refused:os.system``),
    so a program that tried to start a shell is told apart from one that computed a wrong value."""
    text = f"{type(exc).__name__}: {exc}"[:300]
    if isinstance(exc, PermissionError) and str(exc).startswith("sandbox: "):
        event = str(exc).split()[1] if len(str(exc).split()) > 1 else "?"
        return f"sandbox_refused:{event}", f"{where}: {text}"
    if isinstance(exc, SyntaxError):
        # a test that does not compile is the dataset's fault, not the program's
        code = "syntax_error" if where == "program" else "bad_spec"
        return code, f"{where}: line {exc.lineno}: {exc.msg}"
    if where == "program":
        return f"runtime_error:{type(exc).__name__}", f"program: {text}"
    return "test_failed", f"{where}: {text}"


def _why(report, exc: BaseException, where: str) -> None:
    reason, message = failure_reason(exc, where)
    # one line: spaces survive (the worker reads the rest of the line), newlines must not
    report(f"why {reason} {message.replace(chr(10), ' ').replace(chr(13), ' ')}")


def _run(job: dict, report) -> int:
    tests, early_stop = job["tests"], job.get("early_stop", False)
    flag, told = "ok", False
    ns = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(job["program"], "<program>", "exec"), ns)
        loaded = True
    except MemoryError:
        loaded, flag = False, "memory"
    except BaseException as e:          # noqa: BLE001 - SystemExit, KeyboardInterrupt: the program failed
        loaded, flag = False, "error"
        _why(report, e, "program")
        told = True
    for i, test in enumerate(tests):
        ok = False
        if loaded:
            try:
                exec(compile(test, f"<test {i}>", "exec"), ns)
                ok = True
            except MemoryError:
                flag = "memory"
            except BaseException as e:  # noqa: BLE001
                if not told:            # the first failure says why; the rest are counted
                    _why(report, e, f"test {i}")
                    told = True
        report(f"{i} {int(ok)}")
        if early_stop and not ok:
            break
    for stream in (sys.stdout, sys.stderr):  # the output must be in the pipe before "done"
        try:
            stream.flush()
        except BaseException:           # noqa: BLE001
            pass
    report(f"done {flag}")
    return 0
