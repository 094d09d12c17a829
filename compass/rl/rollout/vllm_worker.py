"""The vLLM side of the ``vllm`` rollout backend: a script run by the second environment's Python.

``compass/rl/rollout/vllm_client.py`` starts ``.venv-vllm/bin/python compass/rl/rollout/vllm_worker.py`` and
talks to it over the pipes: every message is an 8-byte little-endian length then a pickle,
``{"cmd": name, **args}`` in, ``{"ok": True, "result": ...}`` or ``{"ok": False, "error":
traceback}`` out. The script imports only the standard library, numpy, torch, transformers
and vllm: the second environment holds no ``compass-rl`` package. Commands:

- ``init(model_dir, dtype, seed, max_model_len, kv_cache_bytes, routes)`` -> engine facts.
  ``vllm.LLM`` in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, executor ``uni``),
  eager, no prefix caching (a cached prefix is never run, so its routes would be lost),
  ``logprobs_mode="processed_logprobs"``: the returned log-prob of a token is
  ``log_softmax(logits / temperature)``, the distribution it was sampled from.
- ``generate(prompts, n, max_new_tokens, temperature, seed)`` -> per prompt, ``n`` dicts
  ``ids``, ``logprobs``, ``finished``, ``routes`` (``[len(prompt)+len(ids), layers, top_k]``
  int16, ``-1`` where not run) or ``None``.
- ``sync_weights(path)`` -> number of tensors loaded: a safetensors file in the checkpoint's
  names and layout, loaded in place with ``collective_rpc("reload_weights")``, MoE experts
  re-prepacked (see :func:`_forget_moe_kernels`).
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

    def routes(self, request_id: str, length: int):
        """``[length, layers, k]`` for the request the caller knows as ``request_id``.

        The engine runs it under an internal id, ``f"{request_id}-{8 random hex}"``
        (``vllm.v1.engine.input_processor``): match on the part before the last dash.
        """
        import numpy as np
        out = np.full((length, self.n_layers, self.top_k), NOT_RECORDED, dtype=np.int16)
        internal = [k for k in self.rows if k == request_id or k.rsplit("-", 1)[0] == request_id]
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

    # -- commands ------------------------------------------------------------------
    def init(self, model_dir: str, dtype: str = "float32", seed: int = 0, max_model_len: int | None = None,
             kv_cache_bytes: int = 256 << 20, routes: bool = True, gpu_memory_utilization: float = 0.5,
             enforce_eager: bool = True, cpu_amx: bool = False, extra: dict | None = None) -> dict:
        import torch

        cuda = self.cuda = torch.cuda.is_available()
        if not cuda and not cpu_amx:
            # vLLM picks its AMX kernels (bf16 attention, MoE experts) when torch reports AMX
            # tiles; on hosts that report them without really running them (this VM) the first
            # bf16 forward dies of SIGILL. Without AMX it takes the AVX-512 "vec" kernels.
            torch.cpu._is_amx_tile_supported = lambda: False
        from vllm import LLM

        kwargs = dict(model=model_dir, tokenizer=model_dir, dtype=dtype, seed=seed,
                      logprobs_mode="processed_logprobs", enable_prefix_caching=False,
                      enforce_eager=enforce_eager, distributed_executor_backend="uni",
                      skip_tokenizer_init=True)
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        if cuda:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
            self.engine_routes = routes
            if routes:
                kwargs["enable_return_routed_experts"] = True
        else:
            kwargs["kv_cache_memory_bytes"] = kv_cache_bytes
        kwargs.update(extra or {})
        self.llm = LLM(**kwargs)
        hf = self.llm.llm_engine.model_config.hf_text_config
        self.n_layers = int(hf.num_hidden_layers)
        self.top_k = int(getattr(hf, "num_experts_per_tok", 0) or 0)
        self.is_moe = self.top_k > 0
        if routes and self.is_moe and not self.engine_routes:
            self._install_capture()
        # The first generate pays one-off costs (~8 s on 2 CPU cores): pay them here.
        self.generate([[0]], n=1, max_new_tokens=2, temperature=1.0, seed=0, return_routes=False)
        return {"cuda": cuda, "engine_routes": self.engine_routes, "capture_routes": self.capture is not None,
                "n_layers": self.n_layers, "top_k": self.top_k, "vllm": __import__("vllm").__version__}

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
        per_request_seed = self.cuda
        if not per_request_seed:
            import torch
            torch.manual_seed(seed)
        reqs, params = [], []
        for i, p in enumerate(prompts):
            for j in range(n):
                reqs.append(TokensPrompt(prompt_token_ids=list(p)))
                params.append(SamplingParams(n=1, max_tokens=max_new_tokens, temperature=temperature,
                                             top_p=1.0, top_k=0, min_p=0.0,
                                             seed=(seed * 1_000_003 + i * n + j) if per_request_seed else None,
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
        for k, out in enumerate(outs):
            i = k // n
            c = out.outputs[0]
            ids = list(c.token_ids)
            lp = np.array([d[t].logprob for d, t in zip(c.logprobs, ids)], dtype=np.float32)
            total = len(prompts[i]) + len(ids)
            routes = None
            if return_routes and self.is_moe:
                if self.engine_routes and c.routed_experts is not None:
                    r = np.asarray(c.routed_experts).astype(np.int16)          # [<= total, layers, k]
                    routes = np.full((total, *r.shape[1:]), NOT_RECORDED, dtype=np.int16)
                    routes[:min(total, len(r))] = r[:total]
                elif cap is not None:
                    routes = cap.routes(out.request_id, total)
            results[i].append({"ids": ids, "logprobs": lp, "finished": c.finish_reason == "stop",
                               "finish_reason": c.finish_reason, "routes": routes})
        if cap is not None:
            cap.clear()
        return results

    def sync_weights(self, path: str) -> int:
        from safetensors.torch import load_file
        tensors = load_file(path)
        if not self.cuda:
            self.llm.apply_model(_forget_moe_kernels)
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(tensors.items()),
                                                         "is_checkpoint_format": True})
        self.llm.llm_engine.reset_prefix_cache()
        return len(tensors)

    def shutdown(self) -> None:
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
            fn = getattr(worker, cmd) if cmd in ("init", "generate", "sync_weights", "shutdown") else None
            if fn is None:
                raise ValueError(f"unknown command {cmd!r}")
            _send({"ok": True, "result": fn(**msg)})
        except BaseException:                                   # noqa: BLE001 - reported to the parent
            _send({"ok": False, "error": traceback.format_exc()})
        if cmd == "shutdown":
            return 0


if __name__ == "__main__":
    sys.exit(main())
