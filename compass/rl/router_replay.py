"""Router Replay for Hugging Face MoE models (paper §2.4.4): record the experts every MoE
layer routes each token to during rollout, and force the same experts when the trainer
recomputes log-probs and gradients.

Works on any module with the router contract of transformers 5's MoE models
(``Qwen3MoeTopKRouter``, ``MixtralTopKRouter``, ...)::

    router(hidden_states [tokens, hidden]) -> (router_logits [tokens, E],
                                               router_scores [tokens, k],   # gate weights
                                               router_indices [tokens, k])  # chosen experts

The sparse MoE block hands ``(indices, scores)`` straight to the experts module, whatever
experts implementation is configured (``eager``, ``grouped_mm``, ``batched_mm``): so
overriding the router's output is enough to choose the experts.

- :func:`record_routes` — context manager; around ``model.generate`` (KV cache: a prefill
  call over ``[N, P]`` then one ``[N, 1]`` call per decode step) or a plain forward, then
  ``recorder.routes(seq_len)`` -> ``[N, seq_len, n_layers, top_k]`` int16 aligned with the
  sequences: row ``t`` is the route computed for input token ``t``; rows never fed (the
  last generated token) are ``-1``.
- :func:`replay_routes` — context manager; every router uses the given experts
  (``[B, L, n_layers, top_k]``, aligned with the forward's ``input_ids``; a row with a
  ``-1`` routes freely). Gate weights come from the *current* router:
  ``softmax(logits)`` gathered at the replayed experts (renormalised when the router
  normalises its top-k), so gradients reach the router through them.
- :func:`routing_agreement` / :func:`route_mismatch_rate` — how often two route tensors agree.
- :func:`generate_with_routes`, :func:`completion_routes`, :func:`stack_routes` — glue for
  rollout backends and trainers (generate's left-padded rows -> per-completion routes ->
  a right-padded trainer batch).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np
import torch
import torch.nn as nn

NOT_RECORDED = -1


# -- finding the routers ------------------------------------------------------------

def _is_router(module: nn.Module) -> bool:
    """A transformers MoE top-k router: by class, else by the attributes of that contract."""
    try:
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter
        if isinstance(module, Qwen3MoeTopKRouter):
            return True
    except ImportError:                                        # pragma: no cover - other transformers versions
        pass
    name = type(module).__name__
    w = getattr(module, "weight", None)
    return (name.endswith("TopKRouter") and isinstance(getattr(module, "top_k", None), int)
            and isinstance(w, torch.Tensor) and w.dim() == 2)


def find_routers(model: nn.Module) -> list[nn.Module]:
    """The MoE routers of ``model`` in layer order (module registration order)."""
    routers = [m for m in model.modules() if _is_router(m)]
    if not routers:
        raise ValueError(f"{type(model).__name__} has no MoE router (a module like Qwen3MoeTopKRouter)")
    ks = {m.top_k for m in routers}
    if len(ks) != 1:
        raise ValueError(f"MoE routers disagree on top_k: {sorted(ks)}")
    return routers


def _split_output(output) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if not (isinstance(output, tuple) and len(output) == 3):
        raise TypeError("MoE router returned something other than (router_logits, router_scores, router_indices)")
    return output


def _batch_shape(args, kwargs) -> tuple[int, int] | None:
    """``(B, L)`` of a causal-LM forward's inputs, if it can be read."""
    ids = kwargs.get("input_ids", args[0] if args else None)
    if isinstance(ids, torch.Tensor) and ids.dim() == 2:
        return int(ids.shape[0]), int(ids.shape[1])
    emb = kwargs.get("inputs_embeds")
    if isinstance(emb, torch.Tensor) and emb.dim() == 3:
        return int(emb.shape[0]), int(emb.shape[1])
    return None


# -- recording ----------------------------------------------------------------------

class RouteRecorder:
    """What :func:`record_routes` collected: the top-k experts of every router call."""

    def __init__(self, routers: list[nn.Module]):
        self.n_layers = len(routers)
        self.top_k = int(routers[0].top_k)
        self._calls: list[list[torch.Tensor]] = [[] for _ in routers]   # per layer: [tokens, k] per call
        self._shapes: list[tuple[int, int] | None] = []                 # (B, L) per model call

    def clear(self) -> None:
        for calls in self._calls:
            calls.clear()
        self._shapes.clear()

    @property
    def n_calls(self) -> int:
        return len(self._calls[0])

    def routes(self, seq_len: int | None = None, rows: int | None = None) -> torch.Tensor:
        """``[B, T, n_layers, top_k]`` int16 on CPU: the calls laid end to end along time.

        ``T`` is the number of tokens fed (prefill length + decode steps), padded with
        ``-1`` rows (or cut) to ``seq_len`` when given — pass generate's output length.
        ``rows`` gives ``B`` when the model's call shapes were not seen (a submodule was
        called directly); otherwise it is read from each call's ``input_ids``.
        """
        n = self.n_calls
        if any(len(c) != n for c in self._calls):
            raise RuntimeError(f"routers were called unequal numbers of times: {[len(c) for c in self._calls]}")
        if n == 0:
            if rows is None or seq_len is None:
                raise RuntimeError("no router call was recorded")
            return torch.full((rows, seq_len, self.n_layers, self.top_k), NOT_RECORDED, dtype=torch.int16)
        shapes = self._shapes if len(self._shapes) == n and all(self._shapes) else None
        per_call = []
        for c in range(n):
            tokens = self._calls[0][c].shape[0]
            if shapes is not None:
                b, length = shapes[c]
            elif rows is not None and tokens % rows == 0:
                b, length = rows, tokens // rows
            else:
                raise RuntimeError("cannot tell the batch shape of a recorded call: pass rows=")
            if b * length != tokens:
                raise RuntimeError(f"call {c}: {tokens} routed tokens for inputs of shape [{b}, {length}]")
            per_call.append(torch.stack([self._calls[j][c].reshape(b, length, self.top_k)
                                         for j in range(self.n_layers)], dim=2))
        if len({x.shape[0] for x in per_call}) != 1:
            raise RuntimeError(f"recorded calls have different batch sizes: {[x.shape[0] for x in per_call]}")
        out = torch.cat(per_call, dim=1).to(device="cpu", dtype=torch.int16)
        if seq_len is not None:
            if out.shape[1] >= seq_len:
                out = out[:, :seq_len]
            else:
                pad = torch.full((out.shape[0], seq_len - out.shape[1], self.n_layers, self.top_k),
                                 NOT_RECORDED, dtype=torch.int16)
                out = torch.cat([out, pad], dim=1)
        return out.contiguous()


@contextmanager
def record_routes(model: nn.Module) -> Iterator[RouteRecorder]:
    """Record the top-k experts of every MoE router call made inside the block.

    ::

        with record_routes(model) as rec:
            out = model.generate(**enc, max_new_tokens=48, num_return_sequences=n, ...)
        routes = rec.routes(seq_len=out.shape[1])     # [B*n, T_out, n_layers, top_k] int16

    Position ``t`` holds the route computed for input token ``t`` (left pads included:
    they are computed too); rows after a sequence finished are routes of its pad tokens,
    and the last generated token's row is ``-1`` (never fed). Indices are kept on the
    model's device until :meth:`RouteRecorder.routes` (one copy, no sync per step).
    """
    routers = find_routers(model)
    rec = RouteRecorder(routers)
    handles = []

    def make_hook(layer: int):
        def hook(module, args, output):
            indices = _split_output(output)[2]
            rec._calls[layer].append(indices.detach().reshape(-1, rec.top_k).to(torch.int16))
        return hook

    def pre_hook(module, args, kwargs):
        rec._shapes.append(_batch_shape(args, kwargs))

    try:
        # on the decoder body: full-model calls reach it too, and so do callers that skip the LM head
        # (policy_forward.token_logprobs with ``only``)
        body = getattr(model, "model", None)
        shaped = body if isinstance(body, nn.Module) else model
        handles.append(shaped.register_forward_pre_hook(pre_hook, with_kwargs=True))
        for j, r in enumerate(routers):
            handles.append(r.register_forward_hook(make_hook(j)))
        yield rec
    finally:
        for h in handles:
            h.remove()


def generate_with_routes(model: nn.Module, **generate_kwargs):
    """``model.generate(**kwargs)`` with routes recorded: ``(output, routes)``.

    ``routes`` is ``[rows, T_out, n_layers, top_k]`` int16 aligned with the output sequences
    (``output.sequences`` when ``return_dict_in_generate``, else ``output``).
    """
    with record_routes(model) as rec:
        out = model.generate(**generate_kwargs)
    seqs = out.sequences if hasattr(out, "sequences") else out
    return out, rec.routes(seq_len=seqs.shape[1], rows=seqs.shape[0])


# -- replaying ----------------------------------------------------------------------

def _normalises_topk(router: nn.Module, logits: torch.Tensor, scores: torch.Tensor,
                     indices: torch.Tensor) -> bool:
    """Whether ``router`` renormalises its top-k softmax probabilities (read from the
    ``norm_topk_prob`` attribute, else inferred once from its own output)."""
    flag = getattr(router, "norm_topk_prob", None)
    if isinstance(flag, bool):
        return flag
    with torch.no_grad():
        p = torch.softmax(logits.float(), dim=-1).gather(-1, indices.long())
        s = scores.float()
        if torch.allclose(s, p / p.sum(-1, keepdim=True), atol=1e-3, rtol=1e-2):
            return True
        if torch.allclose(s, p, atol=1e-3, rtol=1e-2):
            return False
    raise NotImplementedError(f"{type(router).__name__}: gate weights are not a softmax top-k; "
                              "Router Replay does not know how to recompute them")


@contextmanager
def replay_routes(model: nn.Module, routes: torch.Tensor | np.ndarray) -> Iterator[None]:
    """Every MoE router uses the experts in ``routes`` for forwards run inside the block.

    ``routes``: ``[B, L, n_layers, top_k]`` (any integer dtype), aligned with the forward's
    ``input_ids`` ``[B, L]``; a position whose row has a ``-1`` in a layer uses that layer's
    own top-k there. The gate weights are ``softmax(router_logits)`` of the *current*
    router gathered at the replayed experts (renormalised like ``norm_topk_prob``), so the
    router keeps a gradient. Stateless per call: several forwards (log-prob recompute, then
    forward + backward, gradient checkpointing) may run inside one block, each over inputs
    of shape ``[B, L]``. Forward hooks run in the order they were added: entered inside this
    block, :func:`record_routes` records the replayed experts.
    """
    routers = find_routers(model)
    routes = torch.as_tensor(routes)
    k = int(routers[0].top_k)
    if routes.dim() != 4 or routes.shape[2] != len(routers) or routes.shape[3] != k:
        raise ValueError(f"routes must be [B, L, {len(routers)}, {k}] (layers, top_k of this model); "
                         f"got {list(routes.shape)}")
    routes = routes.long()
    n_tokens = routes.shape[0] * routes.shape[1]
    flat: dict[int, torch.Tensor] = {}          # layer -> [tokens, k] long on the router's device
    norm: dict[int, bool] = {}

    def make_hook(layer: int):
        def hook(module, args, output):
            logits, scores, own = _split_output(output)
            logits2d = logits.reshape(-1, logits.shape[-1])
            if logits2d.shape[0] != n_tokens:
                raise ValueError(f"replay_routes: router {layer} saw {logits2d.shape[0]} tokens, routes hold "
                                 f"{list(routes.shape[:2])} = {n_tokens}")
            if layer not in flat:
                flat[layer] = routes[:, :, layer, :].reshape(n_tokens, k).to(own.device)
                norm[layer] = _normalises_topk(module, logits2d, scores.reshape(-1, k), own.reshape(-1, k))
            forced = flat[layer]
            free = (forced < 0).any(-1, keepdim=True)
            idx = torch.where(free, own.reshape(-1, k).long(), forced)
            probs = torch.softmax(logits2d, dim=-1, dtype=torch.float32)
            weights = probs.gather(-1, idx)
            if norm[layer]:
                weights = weights / weights.sum(dim=-1, keepdim=True)
            return logits, weights.to(scores.dtype).reshape(scores.shape), idx.to(own.dtype).reshape(own.shape)
        return hook

    handles = [r.register_forward_hook(make_hook(j)) for j, r in enumerate(routers)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


# -- comparing routes -----------------------------------------------------------------

def _as_long(x) -> torch.Tensor:
    return torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x).long().cpu()


def _set_equal(a, b, valid_mask=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(agree, counted)`` bool ``[..., n_layers]``: top-k sets equal, and rows where neither is -1."""
    a, b = _as_long(a), _as_long(b)
    if a.shape != b.shape:
        raise ValueError(f"route shapes differ: {list(a.shape)} vs {list(b.shape)}")
    agree = (a.sort(-1).values == b.sort(-1).values).all(-1)
    counted = (a >= 0).all(-1) & (b >= 0).all(-1)
    if valid_mask is not None:
        m = torch.as_tensor(np.asarray(valid_mask) if not isinstance(valid_mask, torch.Tensor) else valid_mask)
        m = m.bool().cpu()
        if m.dim() == counted.dim() - 1:
            m = m.unsqueeze(-1)
        counted = counted & m
    return agree, counted


def routing_agreement(a, b, valid_mask=None) -> float:
    """Share of ``(position, layer)`` where the top-k expert *sets* of ``a`` and ``b`` agree.

    ``a``, ``b``: ``[..., n_layers, top_k]``; rows with a ``-1`` in either are ignored, and so
    are positions where ``valid_mask`` (``[...]`` or ``[..., n_layers]``) is False.
    NaN when nothing is counted.
    """
    agree, counted = _set_equal(a, b, valid_mask)
    n = int(counted.sum())
    return float((agree & counted).sum()) / n if n else float("nan")


def route_mismatch_rate(a, b, valid_mask=None) -> float:
    """Share of positions where at least one layer's top-k set differs (positions with any
    counted layer; same masking as :func:`routing_agreement`)."""
    agree, counted = _set_equal(a, b, valid_mask)
    pos = counted.any(-1)
    n = int(pos.sum())
    return float(((~agree & counted).any(-1) & pos).sum()) / n if n else float("nan")


# -- glue between generate's rows and the trainer's batch ------------------------------

def completion_routes(routes_row, n_left_pad: int, prompt_len: int, completion_len: int) -> np.ndarray:
    """One generate row's routes -> the ``Completion.routes`` layout.

    ``routes_row`` ``[T_out, n_layers, top_k]`` for a row whose prompt occupies
    ``[n_left_pad, prompt_len)`` of the padded prompt block (``prompt_len`` = the padded
    width) and whose completion (eos included) has ``completion_len`` tokens:
    returns ``[real_prompt_len + completion_len, n_layers, top_k]`` int16.
    """
    r = np.asarray(routes_row)
    return np.ascontiguousarray(r[n_left_pad:prompt_len + completion_len]).astype(np.int16)


def stack_routes(per_sequence: Sequence, length: int) -> torch.Tensor:
    """Right-pad per-sequence routes ``[len_i, n_layers, top_k]`` to ``[B, length, n_layers, top_k]``
    long with ``-1`` (the layout of :func:`compass.rl.trainer.batch.build_batch`). ``None`` -> all ``-1``."""
    shape = next((np.asarray(r).shape[1:] for r in per_sequence if r is not None), None)
    if shape is None:
        raise ValueError("stack_routes: every sequence has routes=None")
    out = torch.full((len(per_sequence), length, *shape), NOT_RECORDED, dtype=torch.long)
    for i, r in enumerate(per_sequence):
        if r is None:
            continue
        t = torch.as_tensor(np.asarray(r)).long()[:length]
        out[i, :t.shape[0]] = t
    return out
