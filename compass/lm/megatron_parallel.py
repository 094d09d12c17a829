"""Megatron-core's model parallelism for the Qwen3-MoE (or dense Qwen3) policy: the parallel sizes, the process groups, and
the weights cut into each rank's shard and put back together.

A rank's model (:func:`compass.lm.megatron_convert.build_gpt_model` after :func:`init_parallel`) holds

- with tensor parallelism (TP): its 1/TP of every column-parallel weight (``linear_qkv``, ``linear_fc1``,
  the vocabulary rows of ``word_embeddings`` and ``output_layer``) and row-parallel weight (``linear_proj``,
  ``linear_fc2``), cut where megatron marks them (``partition_dim``); norms and the router whole;
- with expert parallelism (EP): ``num_experts / EP`` experts of each MoE layer, numbered from 0 on every
  rank (its global expert = ``EP rank * local count + local index``); experts are also cut by the expert
  tensor-parallel size, which megatron sets to TP;
- with pipeline parallelism (PP): ``num_layers / PP`` consecutive layers, numbered from 0 on every stage; the
  embedding on the first stage, the final norm and output layer on the last.

The full weights are megatron's TP = PP = EP = 1 state dict (:func:`compass.lm.megatron_convert.hf_to_megatron`,
exact). :func:`load_full_state` cuts each rank's shard from it; :func:`gather_full_state` gathers every
rank's shards on rank 0 and rebuilds it. Both are plain reshapes, so a round trip is exact at any sizes.

Two cuts are not a plain ``chunk``: a gated ``linear_fc1`` is ``[gate; up]`` and each TP rank holds
``[gate_r; up_r]`` (megatron's GLU chunks the rank's output in two); ``linear_qkv``'s rows are grouped per KV
head (:func:`compass.lm.megatron_convert.fuse_qkv`) and a TP rank holds ``num_query_groups / TP`` whole groups,
which is a plain chunk of the rows.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from compass.lm.megatron_cpu_compat import apply_cpu_compat


@dataclass(frozen=True)
class ParallelSizes:
    """Megatron's parallel sizes; data parallelism is what the world size leaves: ``world / (tp * pp)``."""
    tp: int = 1
    pp: int = 1
    ep: int = 1

    def data_parallel(self, world: int) -> int:
        return world // (self.tp * self.pp)

    def check(self, world: int, hf_config) -> None:
        """A clear error for sizes that ``world`` ranks and the model cannot take (megatron's own are asserts)."""
        c = hf_config
        why = []
        if world % (self.tp * self.pp):
            why.append(f"the world of {world} ranks is not a multiple of tensor_parallel x pipeline_parallel = "
                       f"{self.tp * self.pp}")
        elif world % (self.tp * self.ep * self.pp):
            # experts are also cut over tensor_parallel ranks (megatron's expert tensor-parallel size)
            why.append(f"the world of {world} ranks is not a multiple of tensor_parallel x expert_parallel x "
                       f"pipeline_parallel = {self.tp * self.ep * self.pp}")
        experts = getattr(c, "num_experts", 0) or 0
        if self.ep > 1 and not experts:
            why.append(f"expert_parallel {self.ep} on a dense model (it has no experts)")
        if c.num_key_value_heads % self.tp:
            why.append(f"tensor_parallel {self.tp} does not divide the {c.num_key_value_heads} KV heads")
        if c.vocab_size % self.tp:
            why.append(f"tensor_parallel {self.tp} does not divide the vocabulary of {c.vocab_size}")
        if c.num_hidden_layers % self.pp:
            why.append(f"pipeline_parallel {self.pp} does not divide the {c.num_hidden_layers} layers")
        if experts and c.num_experts % self.ep:
            why.append(f"expert_parallel {self.ep} does not divide the {c.num_experts} experts")
        for key in ("intermediate_size", "moe_intermediate_size"):
            size = getattr(c, key, None)
            if size and size % self.tp:
                why.append(f"tensor_parallel {self.tp} does not divide {key} {size}")
        if why:
            raise ValueError("megatron parallel sizes: " + "; ".join(why))


def init_parallel(sizes: ParallelSizes, seed: int = 0) -> None:
    """Megatron's parallel state on the default ``torch.distributed`` group (joined already), and its RNG
    tracker. Idempotent for the same sizes; other sizes, or a state whose groups belong to a default group
    since destroyed (a process that left its group of one and joined a new one), replace the state."""
    apply_cpu_compat()
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    if not dist.is_initialized():
        raise RuntimeError("init_parallel: join a torch.distributed group first (compass.dist.process_group.join)")
    if ps.model_parallel_is_initialized():
        try:        # the ranks ask torch about megatron's groups (the sizes are cached): stale groups fail here
            ps.get_tensor_model_parallel_rank(), ps.get_pipeline_model_parallel_rank()
            now = (ps.get_tensor_model_parallel_world_size(), ps.get_pipeline_model_parallel_world_size(),
                   ps.get_expert_model_parallel_world_size())
        except (ValueError, RuntimeError):      # "Group ... is not registered": the groups of a destroyed world
            now = None
        if now == (sizes.tp, sizes.pp, sizes.ep):
            model_parallel_cuda_manual_seed(seed)
            return
        ps.destroy_model_parallel()
    ps.initialize_model_parallel(tensor_model_parallel_size=sizes.tp, pipeline_model_parallel_size=sizes.pp,
                                 expert_model_parallel_size=sizes.ep)
    model_parallel_cuda_manual_seed(seed)


# -- names: a rank's local parameter <-> the full model's ---------------------------------------------

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")
_EXPERT = re.compile(r"\.local_experts\.(\d+)\.")


def rank_offsets(tcfg) -> tuple[int, int]:
    """(first global layer of this pipeline stage, first global expert of this expert-parallel rank)."""
    from megatron.core import parallel_state as ps
    layers = tcfg.num_layers // ps.get_pipeline_model_parallel_world_size()
    experts = (tcfg.num_moe_experts or 0) // ps.get_expert_model_parallel_world_size()
    return ps.get_pipeline_model_parallel_rank() * layers, ps.get_expert_model_parallel_rank() * experts


def global_name(local: str, layer_offset: int, expert_offset: int) -> str:
    """A rank's parameter name -> the full model's (layer and expert numbers shifted by the rank's offsets)."""
    name = _LAYER.sub(lambda m: f"decoder.layers.{int(m.group(1)) + layer_offset}.", local, count=1)
    return _EXPERT.sub(lambda m: f".local_experts.{int(m.group(1)) + expert_offset}.", name, count=1)


# megatron's tensor-parallel cuts, by the parameter's last name parts (its ``partition_dim`` attribute is only
# set when megatron initializes the weights itself, which a converted model skips)
_COLUMN = ("word_embeddings.weight", "output_layer.weight", "linear_qkv.weight", "linear_fc1.weight")
_ROW = ("linear_proj.weight", "linear_fc2.weight")


def tp_part(name: str) -> tuple[int | None, int, int]:
    """(cut dimension or None, this rank's part, parts) of a parameter under tensor parallelism."""
    from megatron.core import parallel_state as ps
    dim = 0 if name.endswith(_COLUMN) else 1 if name.endswith(_ROW) else None
    if dim is None:
        return None, 0, 1
    if ".mlp.experts." in name:         # experts are cut by the expert tensor-parallel group
        return dim, ps.get_expert_tensor_parallel_rank(), ps.get_expert_tensor_parallel_world_size()
    return dim, ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size()


def gated_fc1(name: str, tcfg) -> bool:
    return bool(tcfg.gated_linear_unit) and name.endswith("linear_fc1.weight")


def cut(full: torch.Tensor, dim: int | None, part: int, parts: int, gated: bool) -> torch.Tensor:
    """Part ``part`` of ``parts`` of ``full`` along ``dim`` (a gated fc1: the part of its gate and of its up)."""
    if dim is None or parts == 1:
        return full
    if gated:
        return torch.cat([half.chunk(parts, dim)[part] for half in full.chunk(2, dim)], dim)
    return full.chunk(parts, dim)[part]


def join_parts(pieces: list[torch.Tensor], dim: int | None, gated: bool) -> torch.Tensor:
    """The inverse of :func:`cut`: ``pieces`` in part order -> the full tensor."""
    if dim is None or len(pieces) == 1:
        return pieces[0]
    if gated:
        halves = [p.chunk(2, dim) for p in pieces]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim)
    return torch.cat(pieces, dim)


def local_params(model) -> dict[str, torch.nn.Parameter]:
    """The rank's parameters under the names of the bare GPTModel (a DDP wrapper's ``module.`` dropped)."""
    return {n.removeprefix("module."): p for n, p in model.named_parameters()}


def is_tied_copy(model, name: str) -> bool:
    """``name`` is the last pipeline stage's copy of tied embeddings (megatron allocates it there, as
    ``output_layer.weight``, and keeps it equal to the first stage's embedding)."""
    inner = getattr(model, "module", model)
    return name == "output_layer.weight" and bool(getattr(inner, "share_embeddings_and_output_weights", False))


def source_name(model, name: str, tcfg) -> str:
    """The full model's name whose cut a rank's parameter ``name`` holds (a tied copy: the embedding's)."""
    if is_tied_copy(model, name):
        return "embedding.word_embeddings.weight"
    return global_name(name, *rank_offsets(tcfg))


def load_full_state(model, full: dict[str, torch.Tensor], tcfg) -> None:
    """Copy each rank's shard of the full megatron state dict ``full`` into ``model`` in place."""
    own = local_params(model)
    with torch.no_grad():
        for name, p in own.items():
            g = source_name(model, name, tcfg)
            if g not in full:
                raise KeyError(f"load_full_state: the full state has no {g} (this rank's {name})")
            dim, part, parts = tp_part(name)
            piece = cut(full[g], dim, part, parts, gated_fc1(name, tcfg))
            if piece.shape != p.shape:
                raise ValueError(f"load_full_state: {name} has shape {tuple(p.shape)}, its cut of {g} "
                                 f"{tuple(piece.shape)}")
            p.copy_(piece)


def _unique_holder(name: str) -> bool:
    """This rank is the first of the replicas that hold ``name``'s piece: data-parallel rank 0 for a dense
    piece, expert-data-parallel rank 0 for an expert's."""
    from megatron.core import parallel_state as ps
    if ".mlp.experts." in name:
        return ps.get_expert_data_parallel_rank() == 0
    return ps.get_data_parallel_rank() == 0


def local_pieces(model, tcfg, tensors: dict[str, torch.Tensor] | None = None) -> dict[str, tuple]:
    """This rank's pieces of the full state that no other rank sends (see :func:`_unique_holder`): global
    name -> (cut dim, part, parts, gated, tensor on the CPU). ``tensors`` (by local name) replaces the
    parameters' values, e.g. their gradients."""
    layer_off, expert_off = rank_offsets(tcfg)
    out = {}
    for name, p in local_params(model).items():
        if is_tied_copy(model, name) or not _unique_holder(name):   # the embedding's pieces stand for a tied copy
            continue
        dim, part, parts = tp_part(name)
        t = p if tensors is None else tensors[name]
        out[global_name(name, layer_off, expert_off)] = (dim, part, parts, gated_fc1(name, tcfg),
                                                         t.detach().to("cpu", copy=True))
    return out


_GLOO: dict = {}


def host_group():
    """A gloo group over the whole world, made once per process (every rank calls it at the same point): the
    gathers of whole states go through host memory, not through NCCL buffers on rank 0's GPU."""
    import torch.distributed as dist
    if "group" not in _GLOO:
        _GLOO["group"] = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else None
    return _GLOO["group"]


def gather_full_state(model, tcfg, tensors: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor] | None:
    """The full megatron state dict (every rank's pieces joined) on rank 0 of the world, None elsewhere.
    Every rank must call it. Each piece comes from one of the ranks that hold it, over a gloo group: rank 0's
    host memory holds the whole state once it is gathered."""
    import torch.distributed as dist
    mine = local_pieces(model, tcfg, tensors)
    world = dist.get_world_size()
    got = [None] * world if dist.get_rank() == 0 else None
    if world == 1:
        got = [mine]
    else:
        dist.gather_object(mine, got, dst=0, group=host_group())
    if dist.get_rank() != 0:
        return None
    parts: dict[str, dict[int, torch.Tensor]] = {}
    meta: dict[str, tuple] = {}
    for pieces in got:
        for g, (dim, part, n, gated, t) in pieces.items():
            parts.setdefault(g, {}).setdefault(part, t)
            meta[g] = (dim, n, gated)
    out = {}
    for g, by_part in parts.items():
        dim, n, gated = meta[g]
        if sorted(by_part) != list(range(n)):
            raise RuntimeError(f"gather_full_state: {g} has parts {sorted(by_part)} of {n}")
        out[g] = join_parts([by_part[i] for i in range(n)], dim, gated)
    return out


__all__ = ["ParallelSizes", "cut", "gated_fc1", "gather_full_state", "global_name", "init_parallel",
           "is_tied_copy", "join_parts", "load_full_state", "local_params", "local_pieces", "rank_offsets",
           "source_name", "tp_part"]
