"""FSDP2 sharding shared by the trainers that shard a Hugging Face model over data-parallel ranks (the RL
``fsdp`` trainer, the SFT loop's ranks): which modules become FSDP units, and the reduction they use."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of a Hugging Face causal LM (``model.model.layers``): FSDP's units."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(f"fsdp: {type(model).__name__} has no decoder layers at model.layers "
                         f"(a Hugging Face causal LM such as Qwen3, Qwen3-MoE, Qwen2 or Llama)")
    return list(layers)


def fully_shard_summed(root: nn.Module, units: list[nn.Module], device: torch.device, amp: torch.dtype,
                       cpu_offload: bool = False) -> nn.Module:
    """``root`` sharded over the default group's ranks with ``fully_shard``: each of ``units`` its own FSDP unit
    (gathered for its forward and backward only), the rest the root's. Gradients are *summed* across ranks
    (each rank back-propagates its own share of the batch's loss, already divided by the whole batch's
    count), with a plain SUM that gloo supports. ``amp`` other than fp32: bf16 weights gathered for compute,
    gradients reduced in fp32, fp32 master shards."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard
    kw: dict = {"mesh": init_device_mesh(device.type, (dist.get_world_size(),))}
    if amp != torch.float32:
        # inputs stay as they come (fp32 rotary tables) and compute under the caller's autocast, rather than
        # FSDP's default cast of every unit's input to bf16
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=amp, reduce_dtype=torch.float32, cast_forward_inputs=False)
    if cpu_offload:
        kw["offload_policy"] = CPUOffloadPolicy()
    for unit in units:
        fully_shard(unit, **kw)
    fully_shard(root, **kw)
    for m in root.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)
            m.set_force_sum_reduction_for_comms(True)       # gloo has no PREMUL_SUM
    return root


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """A sharded DTensor gathered whole (a collective: every rank calls it); a plain tensor as it is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def cloned(obj):
    """``obj`` with every tensor in it (in dicts, lists, tuples) copied: a gathered state that must not change with
    later steps, nor share storage with a trainer that loads it."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: cloned(v) for k, v in obj.items()}
    if type(obj) in (list, tuple):
        return type(obj)(cloned(x) for x in obj)
    return obj


__all__ = ["cloned", "decoder_layers", "full_tensor", "fully_shard_summed"]
