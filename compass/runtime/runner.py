"""The stage contract: fingerprint, skip-if-stored, run, commit.

A stage package defines ``SPEC`` (its slots and config model) and a body
``(config, inputs, outputs) -> None`` that reads input artifacts and fills
output writers. ``execute`` does the rest, identically for every stage, and
knows nothing of Prefect.
"""
from __future__ import annotations

import errno
import importlib
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from pydantic import BaseModel

from compass.runtime.code_version import code_version
from compass.store.fingerprint import VERSION_LEN, digest, run_version
from compass.runtime.stage_state import clear_state, run_lock, state_dir_for
from compass.store.store import Artifact, ArtifactError, ArtifactStore, ArtifactWriter

log = logging.getLogger("compass.runner")

Body = Callable[[BaseModel, dict[str, Artifact], dict[str, ArtifactWriter]], None]


class InfraError(RuntimeError):
    """A failure of the machinery (storage, network, workers), not of the input:
    worth retrying. Orchestrators retry only these (see ``is_infra_error``)."""


# botocore errors that no retry cures: missing or wrong credentials, bad parameters.
_BOTO_CONFIG_ERRORS = {"NoCredentialsError", "PartialCredentialsError", "NoRegionError", "ParamValidationError",
                       "UnknownServiceError", "InvalidConfigError", "ProfileNotFound", "UnknownSignatureVersionError"}


_NETWORK_MODULES = {"botocore", "aiobotocore", "aiohttp", "urllib3"}
_TRANSIENT_ERRNOS = {errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EPIPE,
                     errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.EAGAIN, errno.EIO}


def is_infra_error(exc: BaseException) -> bool:
    """True for errors that a retry may cure; never for bad input or config."""
    if isinstance(exc, InfraError):
        return True
    if isinstance(exc, ArtifactError) and exc.__cause__ is not None:
        return is_infra_error(exc.__cause__)  # the store names the artifact; the cause says what failed
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    module = type(exc).__module__.split(".")[0]
    if module in {"botocore", "aiobotocore"}:
        if type(exc).__name__ in _BOTO_CONFIG_ERRORS:
            return False
        response = getattr(exc, "response", None)
        if isinstance(response, dict):  # a ClientError: the server answered
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
            code = str(response.get("Error", {}).get("Code", ""))
            return status >= 500 or status in (408, 429) or code in {"SlowDown", "Throttling", "RequestTimeout"}
        return True  # endpoint unreachable, read timeout, ...
    if isinstance(exc, OSError):
        cause = exc.__cause__ or exc.__context__
        if cause is not None and cause is not exc and type(cause).__module__.split(".")[0] in _NETWORK_MODULES:
            return is_infra_error(cause)  # s3fs wraps the server's answer: judge the answer
        # Only errors of the link are worth a retry. A bad checkpoint (transformers raises a bare
        # OSError), a full or read-only disk, a missing file: a retry fails the same way.
        return exc.errno in _TRANSIENT_ERRNOS
    if module == "aiohttp":
        status = getattr(exc, "status", None)
        return not isinstance(status, int) or status >= 500 or status in (408, 429)
    return module == "urllib3"


_DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_NEARLY_FULL_BYTES = 1 << 20


def _disk_full(exc: BaseException, writers) -> str | None:
    """What to say when ``exc`` came from a full disk under a writer, else None. Not every writer says
    ENOSPC (``torch.save`` raises a bare RuntimeError), so a failure with (almost) no space left where
    an output was being written counts too."""
    e: BaseException | None = exc
    for _ in range(4):
        if e is None:
            break
        if isinstance(e, OSError) and e.errno in _DISK_FULL_ERRNOS:
            return os.strerror(e.errno)
        e = e.__cause__
    if not isinstance(exc, (OSError, RuntimeError, ArtifactError)):
        return None
    for w in writers:
        d = Path(w.dir)
        while not d.exists() and d != d.parent:
            d = d.parent
        st = os.statvfs(d)
        if st.f_bavail * st.f_frsize < _NEARLY_FULL_BYTES:
            return f"{st.f_bavail * st.f_frsize} bytes free under {d}; {type(exc).__name__}: " \
                   f"{str(exc).splitlines()[0] if str(exc) else ''}"
    return None


@dataclass(frozen=True)
class StageSpec:
    name: str
    config: type[BaseModel]
    inputs: dict[str, str]             # slot -> artifact kind
    outputs: dict[str, str]            # slot -> artifact kind
    body: Body | str                   # the function, or "module:function" imported only when it runs
    optional_inputs: frozenset[str] = frozenset()   # slots (of ``inputs``) a run may leave out
    # slots that may also be filled any number of times more as ``slot:label`` (same kind), e.g. the
    # evaluation's ``suites:gsm8k``: every labelled one is optional
    variadic_inputs: frozenset[str] = frozenset()
    package: str = ""                  # the package whose import closure is the code version ("stages.<name>")

    def __post_init__(self):
        if not self.package:
            object.__setattr__(self, "package", f"stages.{self.name}")

    def base_slot(self, slot: str) -> str:
        """The declared slot ``slot`` fills: itself, or ``suites`` for ``suites:gsm8k`` when variadic."""
        base, sep, label = slot.partition(":")
        return base if sep and label and base in self.variadic_inputs else slot

    def resolve_body(self) -> Body:
        if callable(self.body):
            return self.body
        module, _, func = self.body.partition(":")
        return getattr(importlib.import_module(module), func)


@dataclass
class StageResult:
    run_name: str
    stage: str
    version: str
    status: str                        # "ran" | "reused"
    wall_s: float
    outputs: dict[str, str] = field(default_factory=dict)   # slot -> artifact URI

    def to_dict(self) -> dict:
        return asdict(self)


class StageInputError(ValueError):
    pass


def _check_inputs(spec: StageSpec, inputs: dict[str, Artifact]) -> None:
    missing = sorted(set(spec.inputs) - set(inputs) - spec.optional_inputs)
    extra = sorted(s for s in inputs if spec.base_slot(s) not in spec.inputs)
    if missing or extra:
        more = f"; any number more as {', '.join(f'{v}:LABEL' for v in sorted(spec.variadic_inputs))}" \
            if spec.variadic_inputs else ""
        raise StageInputError(f"stage {spec.name}: missing input slot(s) {missing}, unknown slot(s) {extra}; "
                              f"expected {sorted(spec.inputs)}{more}")
    for slot, art in inputs.items():
        kind = spec.inputs[spec.base_slot(slot)]
        if art.kind != kind:
            raise StageInputError(f"stage {spec.name}: input '{slot}' must be a {kind} artifact, "
                                  f"got {art.kind} ({art.uri})")


def plan_version(spec: StageSpec, config: BaseModel, inputs: dict[str, Artifact],
                 names: dict[str, str]) -> str:
    return run_version(spec.name, config.model_dump(mode="json"),
                       {s: (a.kind, a.name, a.version) for s, a in sorted(inputs.items())},
                       names, code_version(spec.package))


def execute(spec: StageSpec, config: BaseModel, inputs: dict[str, Artifact], store: ArtifactStore, *,
            run_name: str | None = None, output_names: dict[str, str] | None = None) -> StageResult:
    """Run ``spec`` unless every output of this exact run is already stored.

    ``output_names`` maps output slots to artifact names (default: the slot).
    On any failure the uncommitted outputs are removed: nothing half-written
    becomes visible.
    """
    if not isinstance(config, spec.config):
        raise TypeError(f"stage {spec.name}: config must be {spec.config.__name__}, got {type(config).__name__}")
    _check_inputs(spec, inputs)
    run_name = run_name or spec.name
    names = {slot: (output_names or {}).get(slot, slot) for slot in spec.outputs}
    version = plan_version(spec, config, inputs, names)
    t0 = time.perf_counter()
    reused = _reuse(spec, store, names, version, run_name, t0)
    if reused is not None:
        return reused
    def waiting():
        log.info("%s: another process on this machine is running version %s; waiting for it", run_name, version)
    with run_lock(f"{spec.name}-{version}", on_wait=waiting):
        # the run we waited for has committed these outputs (unless it failed: then this one runs)
        return _reuse(spec, store, names, version, run_name, t0) or \
            _run(spec, config, inputs, store, names, version, run_name, t0)


def _reuse(spec: StageSpec, store: ArtifactStore, names: dict[str, str], version: str, run_name: str,
           t0: float) -> StageResult | None:
    """The stored outputs of this version, made LATEST, if every one is committed."""
    if not all(store.exists(spec.outputs[s], names[s], version) for s in spec.outputs):
        return None
    arts = {s: store.get(spec.outputs[s], names[s], version) for s in spec.outputs}
    for a in arts.values():
        store.set_latest(a.kind, a.name, a.version)
    log.info("%s: reusing stored version %s", run_name, version)
    return StageResult(run_name, spec.name, version, "reused", time.perf_counter() - t0,
                       {s: a.uri for s, a in arts.items()})


def _run(spec: StageSpec, config: BaseModel, inputs: dict[str, Artifact], store: ArtifactStore,
         names: dict[str, str], version: str, run_name: str, t0: float) -> StageResult:
    log.info("%s: running stage %s -> version %s", run_name, spec.name, version)
    common = dict(producer=run_name, stage=spec.name,
                  config_fingerprint=digest(config.model_dump(mode="json"))[:VERSION_LEN],
                  code_version=code_version(spec.package),
                  inputs=[a.ref(slot) for slot, a in sorted(inputs.items())])
    writers = {s: store.begin(spec.outputs[s], names[s], version, **common) for s in spec.outputs}
    try:
        spec.resolve_body()(config, inputs, writers)
        for slot, w in writers.items():
            if w.committed is None and not w.has_files():
                raise ArtifactError(f"stage {spec.name}: output '{slot}' ({w.kind} {w.name}) is empty: "
                                    f"the stage wrote no files for it")
        arts = {s: w.commit() for s, w in writers.items()}
    except BaseException as e:
        full = _disk_full(e, writers.values())
        for w in writers.values():
            if w.committed is None:
                w.abort()
        if full is not None:
            raise ArtifactError(f"stage run {run_name}: no space left on the device while writing "
                                f"{', '.join(w.uri for w in writers.values())} ({full}); nothing committed") from e
        raise
    for w in writers.values():
        clear_state(state_dir_for(w))     # the committed outputs hold everything the state had
    for a in arts.values():
        store.set_latest(a.kind, a.name, a.version)
    wall = time.perf_counter() - t0
    log.info("%s: committed version %s in %.1fs", run_name, version, wall)
    return StageResult(run_name, spec.name, version, "ran", wall, {s: a.uri for s, a in arts.items()})
