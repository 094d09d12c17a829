"""The vLLM side of the ``vllm`` rollout backend: a script run by the second environment's Python.

``compass/rl/rollout/vllm_client.py`` starts ``.venv-vllm/bin/python compass/rl/rollout/vllm_worker.py`` and
talks to it over the pipes: every message is an 8-byte little-endian length then a pickle,
``{"cmd": name, **args}`` in, ``{"ok": True, "result": ...}`` or ``{"ok": False, "error":
traceback}`` out. The script imports only the standard library, numpy, torch, transformers
and vllm: the second environment holds no ``compass-rl`` package. Commands:

- ``init(model_dir, dtype, seed, max_model_len, ..., sleep, colocated)`` -> engine facts, with
  ``engine``: the settings read back from the engine's config. ``vllm.LLM`` in-process
  (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, executor ``uni``; ``mp`` for tensor parallel > 1),
  ``logprobs_mode="processed_logprobs"``: the returned log-prob of a token is
  ``log_softmax(logits / temperature)``, the distribution it was sampled from. Unset settings:
  bf16, CUDA graphs and sleep mode (when colocated) on a GPU; float32 and eager on the CPU.
- ``generate(prompts, n, max_new_tokens, temperature, seed)`` -> per prompt, ``n`` dicts
  ``ids``, ``logprobs``, ``finished``, ``routes`` (``[len(prompt)+len(ids), layers, top_k]``
  int16, ``-1`` where not run) or ``None``. One request per prompt with ``n`` samples.
- ``sync_weights(path)`` -> number of tensors loaded: a safetensors file in the checkpoint's
  names and layout, loaded in place with ``collective_rpc("reload_weights")``, MoE experts
  re-prepacked (see :func:`_forget_moe_kernels`); asleep, the weights wake first and the KV
  cache after the load.
- ``load_weights(message)`` -> the same, the tensors moved in memory by ``weight_transport.py`` (a
  module of this directory, standalone like this script): shared memory, CUDA IPC or a broadcast.
- ``wake`` -> wakes what still sleeps (``load_weights(wake_kv_cache=False)`` leaves the KV cache asleep
  until the trainer side has freed its copy of the weights).
- ``sleep`` -> whether it slept (vLLM's level 1: weights to host memory, KV cache dropped);
  ``stats`` -> sleep/wake seconds; ``engine_settings`` -> the engine's settings.
- ``shutdown`` -> ``None``, then the script exits.

Routes: on CUDA the engine records them itself (``enable_return_routed_experts=True`` ->
``CompletionOutput.routed_experts``). The CPU model runner cannot, so every MoE router gets a
capture callback (``router.set_capture_fn``, installed with ``llm.apply_model``) that keeps,
per engine step, each layer's ``topk_ids`` and the model runner's layout of the flattened batch
(which request and which position each row is); after ``generate`` they are filed under
(request id, position): see :class:`RouteCapture`. The engine runs in this process, so the
callbacks and the runner are plain Python objects here.
"""
from __future__ import annotations

import os
import pickle
import struct
import sys
import traceback
from functools import partial

NOT_RECORDED = -1
COMMANDS = ("init", "generate", "sync_weights", "load_weights", "wake", "sleep", "stats", "engine_settings", "shutdown")
_PROTO_IN = None     # the pipes, set by main()
_PROTO_OUT = None


def _own_stdout() -> None:
    """The protocol owns the real stdout: everything else written to fd 1 (vLLM's logger,
    prints, C++ warnings) goes to stderr. Done before vLLM is imported."""
    global _PROTO_IN, _PROTO_OUT
    _PROTO_OUT = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _PROTO_IN = sys.stdin.buffer


def _recv():
    head = _PROTO_IN.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack("<Q", head)
    buf = bytearray()
    while len(buf) < size:
        chunk = _PROTO_IN.read(size - len(buf))
        if not chunk:
            return None
        buf += chunk
    return pickle.loads(bytes(buf))


def _send(obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    _PROTO_OUT.write(struct.pack("<Q", len(data)) + data)
    _PROTO_OUT.flush()


class RouteCapture:
    """Experts chosen by each MoE router during generation, reassembled per request.

    The V1 model runner lays a step's tokens out request after request, in the order of its
    input batch (which the CPU attention backend reorders, decodes first): row ``t`` of the
    flattened batch belongs to slot ``runner.req_indices[t]`` -- request
    ``runner.input_batch.req_ids[slot]`` -- at position ``runner.positions[t]`` of that
    sequence. ``_prepare_inputs`` fills them before the forward whose routers call
    :meth:`capture`; rows past ``query_start_loc[num_reqs]`` are padding. Per step this keeps
    the layout and each layer's ``topk_ids`` (a few array copies, no per-token Python);
    :meth:`finish` files them under (request id, position). A position computed twice
    (a preempted request recomputed) keeps the later row, which produced the kept tokens.
    """

    def __init__(self, runner, n_layers: int, top_k: int):
        self.runner = runner
        self.n_layers = n_layers
        self.top_k = top_k
        self.active = False
        self.steps: list[tuple[list[str], "object", "object", list]] = []
        self.rows: dict[str, list[tuple["object", "object"]]] = {}   # req_id -> [(positions, [t, layers, k])]

    def capture(self, layer: int, topk_ids) -> None:
        if not self.active:
            return
        r = self.runner
        if layer == 0:
            num_reqs = r.input_batch.num_reqs
            n_tok = int(r.query_start_loc.cpu[num_reqs])
            self.steps.append((list(r.input_batch.req_ids[:num_reqs]), r.req_indices.np[:n_tok].copy(),
                               r.positions[:n_tok].cpu().numpy().copy(), [None] * self.n_layers))
        ids, req_idx, pos, per_layer = self.steps[-1]
        per_layer[layer] = topk_ids[:len(req_idx)].to("cpu").numpy().astype("int16")   # copies

    def finish(self) -> None:
        import numpy as np
        for ids, req_idx, pos, per_layer in self.steps:
            if any(x is None for x in per_layer):
                raise RuntimeError("route capture: a step did not reach every MoE layer")
            top = np.stack(per_layer, axis=1)                                  # [t, layers, k]
            for slot in np.unique(req_idx):
                rows = req_idx == slot
                self.rows.setdefault(ids[slot], []).append((pos[rows], top[rows]))
        self.steps.clear()

    def clear(self) -> None:
        self.steps.clear()
        self.rows.clear()

    def routes(self, request_id: str, length: int, index: int | None = None):
        """``[length, layers, k]`` for the request the caller knows as ``request_id`` (sample ``index`` of
        a request with ``n > 1``).

        The engine runs it under an internal id, ``f"{request_id}-{8 random hex}"``
        (``vllm.v1.engine.input_processor``), and sample ``i`` of an ``n > 1`` request as the child
        ``f"{i}_{internal id}"`` (``vllm.v1.engine.parallel_sampling``): match on those forms.
        """
        import numpy as np
        out = np.full((length, self.n_layers, self.top_k), NOT_RECORDED, dtype=np.int16)

        def ours(key: str) -> bool:
            if index is not None:
                head, sep, key = key.partition("_")
                if not sep or head != str(index):
                    return False
            return key == request_id or key.rsplit("-", 1)[0] == request_id

        internal = [k for k in self.rows if ours(k)]
        if len(internal) > 1:
            raise RuntimeError(f"route capture: request {request_id!r} ran under several ids {internal}")
        for pos, top in (self.rows[internal[0]] if internal else []):
            keep = (pos >= 0) & (pos < length)
            out[pos[keep]] = top[keep]
        return out


class Worker:
    def __init__(self):
        self.llm = None
        self.capture: RouteCapture | None = None
        self.engine_routes = False
        self.cuda = False
        self.sleep_mode = False
        self.asleep = False
        self.timings = {"sleep_s": 0.0, "wake_s": 0.0, "sleeps": 0}
        self.receiver = None
        self.tensor_parallel_size = 1

    # -- commands ------------------------------------------------------------------
    def init(self, model_dir: str, dtype: str = "auto", seed: int = 0, max_model_len: int | None = None,
             kv_cache_bytes: int = 256 << 20, routes: bool = True, gpu_memory_utilization: float = 0.5,
             enforce_eager: bool | None = None, prefix_caching: bool = False, tensor_parallel_size: int = 1,
             sleep: bool | None = None, colocated: bool = True, cpu_amx: bool = False,
             extra: dict | None = None) -> dict:
        """``None`` settings take their default for where the engine runs: on a GPU, bf16, CUDA graphs,
        sleep mode when colocated with the trainer; on the CPU, float32, eager, no sleep mode (vLLM has
        none there)."""
        import torch

        cuda = self.cuda = torch.cuda.is_available()
        if not cuda and not cpu_amx:
            # vLLM picks its AMX kernels (bf16 attention, MoE experts) when torch reports AMX
            # tiles; on hosts that report them without really running them (this VM) the first
            # bf16 forward dies of SIGILL. Without AMX it takes the AVX-512 "vec" kernels.
            torch.cpu._is_amx_tile_supported = lambda: False
        if sleep and not cuda:
            raise ValueError("rollout.backend.sleep: vLLM has no sleep mode on the CPU (only on CUDA, ROCm and "
                             "XPU); leave sleep unset or false here")
        if dtype == "auto":
            dtype = "bfloat16" if cuda else "float32"
        if enforce_eager is None:
            enforce_eager = not cuda            # CUDA graphs on a GPU; nothing to capture on the CPU
        if sleep is None:
            sleep = cuda and colocated          # the trainer gets the GPU back during its update
        from vllm import LLM

        kwargs = dict(model=model_dir, tokenizer=model_dir, dtype=dtype, seed=seed,
                      logprobs_mode="processed_logprobs", enable_prefix_caching=bool(prefix_caching),
                      enforce_eager=bool(enforce_eager), tensor_parallel_size=int(tensor_parallel_size),
                      # one process is enough for one GPU or the CPU; more GPUs need vLLM's workers
                      distributed_executor_backend="uni" if tensor_parallel_size == 1 else "mp",
                      skip_tokenizer_init=True)
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        kwargs["gpu_memory_utilization"] = gpu_memory_utilization     # the CPU build reads kv_cache_memory_bytes
        if cuda:
            kwargs["enable_sleep_mode"] = bool(sleep)
            self.engine_routes = routes
            if routes:
                kwargs["enable_return_routed_experts"] = True
        else:
            kwargs["kv_cache_memory_bytes"] = kv_cache_bytes
        kwargs.update(extra or {})
        self.llm = LLM(**kwargs)
        self.sleep_mode = bool(sleep)
        self.dtype = dtype
        self.tensor_parallel_size = int(tensor_parallel_size)
        hf = self.llm.llm_engine.model_config.hf_text_config
        self.n_layers = int(hf.num_hidden_layers)
        self.top_k = int(getattr(hf, "num_experts_per_tok", 0) or 0)
        self.is_moe = self.top_k > 0
        if routes and self.is_moe and not self.engine_routes:
            self._install_capture()
        # The first generate pays one-off costs (~8 s on 2 CPU cores): pay them here.
        self.generate([[0]], n=1, max_new_tokens=2, temperature=1.0, seed=0, return_routes=False)
        return {"cuda": cuda, "engine_routes": self.engine_routes, "capture_routes": self.capture is not None,
                "n_layers": self.n_layers, "top_k": self.top_k, "vllm": __import__("vllm").__version__,
                "dtype": dtype, "sleep": self.sleep_mode, "engine": self.engine_settings()}

    def engine_settings(self) -> dict:
        """The settings as the engine holds them (read back from its config, not from what was asked)."""
        vc = self.llm.llm_engine.vllm_config
        mc, cc, pc = vc.model_config, vc.cache_config, vc.parallel_config
        return {"dtype": str(mc.dtype).removeprefix("torch."), "max_model_len": int(mc.max_model_len),
                "enforce_eager": bool(mc.enforce_eager), "quantization": mc.quantization,
                "enable_prefix_caching": bool(cc.enable_prefix_caching),
                "gpu_memory_utilization": float(cc.gpu_memory_utilization),
                "tensor_parallel_size": int(pc.tensor_parallel_size),
                "enable_sleep_mode": bool(mc.enable_sleep_mode),
                "distributed_executor_backend": str(pc.distributed_executor_backend)}

    def sleep(self) -> bool:
        """Weights to host memory, KV cache dropped (vLLM's sleep level 1): the GPU for the trainer."""
        import time
        if not self.sleep_mode or self.asleep:
            return False
        t0 = time.perf_counter()
        self.llm.sleep(level=1)
        self.asleep = True
        self.timings["sleep_s"] += time.perf_counter() - t0
        self.timings["sleeps"] += 1
        return True

    def _wake(self, tags: list[str] | None = None) -> None:
        import time
        t0 = time.perf_counter()
        self.llm.wake_up(tags=tags)
        self.timings["wake_s"] += time.perf_counter() - t0

    def stats(self) -> dict:
        return dict(self.timings, asleep=self.asleep)

    def _runner(self):
        executor = self.llm.llm_engine.model_executor
        return executor.driver_worker.worker.model_runner

    def _install_capture(self) -> None:
        runner = self._runner()
        cap = RouteCapture(runner, self.n_layers, self.top_k)

        def bind(model):
            from vllm.model_executor.layers.fused_moe.router.base_router import BaseRouter
            from vllm.model_executor.layers.fused_moe.runner.moe_runner import MoERunner
            runners = [m for m in model.modules() if isinstance(m, MoERunner)]
            layer_ids = sorted({int(m.layer_id) for m in runners})
            for m in runners:
                if not isinstance(m.router, BaseRouter):
                    raise RuntimeError(f"route capture: unsupported MoE router {type(m.router).__name__}")
                # routes index MoE layers in order (a model with dense layers has fewer rows)
                m.router.set_capture_fn(partial(cap.capture, layer_ids.index(int(m.layer_id))))
            return len(runners)

        bound = self.llm.apply_model(bind)[0]
        if bound == 0:
            raise RuntimeError("route capture: the model has no MoE router")
        self.n_layers = cap.n_layers = bound
        self.capture = cap

    def generate(self, prompts: list[list[int]], n: int, max_new_tokens: int, temperature: float,
                 seed: int, stop_token_ids: list[int] | None = None,
                 return_routes: bool = True) -> list[list[dict]]:
        import numpy as np
        from vllm import SamplingParams, TokensPrompt

        # One request per (prompt, sample): every request id maps to exactly one completion.
        # Seeds: on CUDA each request gets its own generator (samples independent of how the
        # scheduler batches them). On CPU vLLM 0.32 cannot: when a chunked prefill's sample is
        # discarded it rewinds the request's generator (``gen.set_offset``), which a CPU
        # generator does not support ("CPU Generator does not use offset"). There the sampler
        # draws from torch's global RNG -- the engine runs in this process -- seeded here, so
        # the same call on the same engine gives the same samples.
        if self.asleep:                         # a rollout without a weight sync since the last sleep
            self._wake()
            self.asleep = False
        per_request_seed = self.cuda
        if not per_request_seed:
            import torch
            torch.manual_seed(seed)
        # One request per prompt with its n samples: the engine runs them as n child requests
        # (vllm.v1.engine.parallel_sampling) that share the prompt's prefill through the prefix cache
        # when it is on. Child i's seed is the request's seed + i, so sample j of prompt i has seed
        # ``seed * 1_000_003 + i * n + j``.
        reqs, params = [], []
        for i, p in enumerate(prompts):
            reqs.append(TokensPrompt(prompt_token_ids=list(p)))
            params.append(SamplingParams(n=n, max_tokens=max_new_tokens, temperature=temperature,
                                         top_p=1.0, top_k=0, min_p=0.0,
                                         seed=(seed * 1_000_003 + i * n) if per_request_seed else None,
                                         logprobs=0, detokenize=False, skip_special_tokens=False,
                                         stop_token_ids=list(stop_token_ids or [])))
        cap = self.capture if return_routes else None
        if cap is not None:
            cap.clear()
            cap.active = True
        try:
            outs = self.llm.generate(reqs, params, use_tqdm=False)
        finally:
            if cap is not None:
                cap.active = False
        if cap is not None:
            cap.finish()
        results: list[list[dict]] = [[] for _ in prompts]
        for i, out in enumerate(outs):
            if len(out.outputs) != n:
                raise RuntimeError(f"vllm returned {len(out.outputs)} samples for prompt {i}, asked for {n}")
            for c in sorted(out.outputs, key=lambda c: c.index):
                results[i].append(self._completion(out, c, len(prompts[i]), n, return_routes, cap))
        if cap is not None:
            cap.clear()
        return results

    def _completion(self, out, c, prompt_len: int, n: int, return_routes: bool, cap) -> dict:
        """One sample ``c`` of request ``out`` as the client reads it."""
        import numpy as np
        ids = list(c.token_ids)
        lp = np.array([d[t].logprob for d, t in zip(c.logprobs, ids)], dtype=np.float32)
        total = prompt_len + len(ids)
        routes = None
        if return_routes and self.is_moe:
            if self.engine_routes and c.routed_experts is not None:
                r = np.asarray(c.routed_experts).astype(np.int16)          # [<= total, layers, k]
                routes = np.full((total, *r.shape[1:]), NOT_RECORDED, dtype=np.int16)
                routes[:min(total, len(r))] = r[:total]
            elif cap is not None:
                routes = cap.routes(out.request_id, total, index=c.index if n > 1 else None)
        return {"ids": ids, "logprobs": lp, "finished": c.finish_reason == "stop",
                "finish_reason": c.finish_reason, "routes": routes}

    def sync_weights(self, path: str) -> int:
        from safetensors.torch import load_file
        return self._load(list(load_file(path).items()))

    def load_weights(self, message: dict, wake_kv_cache: bool = True) -> int:
        """Weights sent by ``weight_transport`` (this script's directory is on ``sys.path``): shared memory,
        CUDA IPC handles or a broadcast, whichever the message names."""
        if self.receiver is None:
            import weight_transport
            self.receiver = weight_transport.Receiver()
        weights = self.receiver.receive(message)
        try:
            return self._load(weights, wake_kv_cache=wake_kv_cache)
        except BaseException:
            # take what is still coming (a broadcast's remaining buckets), so the trainer's sender is not left
            # waiting, then start over with a fresh receiver next sync
            try:
                for _ in weights:
                    pass
            except Exception:                               # noqa: BLE001 - the load's error is the one to report
                pass
            self.receiver.close()
            self.receiver = None
            raise

    def wake(self) -> bool:
        """Wake whatever still sleeps (the KV cache after a ``load_weights(wake_kv_cache=False)``)."""
        if not self.asleep:
            return False
        self._wake()
        self.asleep = False
        return True

    def _load(self, named, wake_kv_cache: bool = True) -> int:
        """Load checkpoint-layout ``(name, tensor)`` pairs in place; asleep, wake the weights first and the KV
        cache after (the KV cache is not reallocated while the new weights are being copied in). ``named``
        may be an iterator: the engine then copies each tensor as it arrives (a bucket while the trainer
        still writes the next)."""
        if self.asleep:
            self._wake(["weights"])
        if not self.cuda:
            self.llm.apply_model(_forget_moe_kernels)
        count = [0]

        def counted():
            for item in named:
                count[0] += 1
                yield item
        # with tensor parallel > 1 the kwargs are pickled to vLLM's worker processes: a list, not a generator
        weights = counted() if self.tensor_parallel_size == 1 else list(counted())
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        if self.asleep and wake_kv_cache:
            self._wake(["kv_cache"])
            self.asleep = False
        self.llm.llm_engine.reset_prefix_cache()     # cached KV was computed with the old weights
        return count[0]

    def shutdown(self) -> None:
        if self.receiver is not None:
            self.receiver.close()
        self.llm = None


def _forget_moe_kernels(model) -> int:
    """Make the next ``reload_weights`` re-prepack the MoE expert weights.

    ``reload_weights`` loads the checkpoint tensors into fresh parameters, runs each layer's
    ``quant_method.process_weights_after_loading`` and copies the result into the old kernel
    tensors. For unquantized MoE that method treats a second call as a weight update
    (``moe_kernel is not None``) and skips the experts' own
    ``fused_experts.process_weights_after_loading`` -- on CPU the step that pads the
    intermediate dim to a multiple of 32 and prepacks both weights into the grouped-GEMM
    layout. The kernel then reads raw checkpoint values as if packed: wrong log-probs, or a
    shape error when the padding is not a no-op. With ``moe_kernel`` cleared, the reload
    rebuilds the kernel and re-runs the pad + prepack, like at start-up.
    """
    n = 0
    for module in model.modules():
        if hasattr(module, "w13_weight"):
            qm = getattr(module, "quant_method", None)
            if qm is not None and getattr(qm, "moe_kernel", None) is not None:
                qm.moe_kernel = None
                n += 1
    return n


def main() -> int:
    _own_stdout()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")   # engine core in this process
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    worker = Worker()
    while True:
        msg = _recv()
        if msg is None:
            return 0
        cmd = msg.pop("cmd")
        try:
            fn = getattr(worker, cmd) if cmd in COMMANDS else None
            if fn is None:
                raise ValueError(f"unknown command {cmd!r}")
            _send({"ok": True, "result": fn(**msg)})
        except BaseException:                                   # noqa: BLE001 - reported to the parent
            _send({"ok": False, "error": traceback.format_exc()})
        if cmd == "shutdown":
            return 0


if __name__ == "__main__":
    sys.exit(main())
