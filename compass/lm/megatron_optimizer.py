"""AdamW on one megatron rank's shard of the model, its state either whole on every data-parallel replica or
sharded over them (ZeRO stage 1).

Sharded (``distributed_optimizer``): PyTorch's ``ZeroRedundancyOptimizer`` over megatron's data-parallel group
for the dense parameters and over its expert-data-parallel group for the experts (the ranks that hold the same
expert piece). Each parameter's AdamW moments live on one rank of its group; after the step the owner
broadcasts the updated parameter to the others. Megatron's own ``DistributedOptimizer`` does the same sharding
but allocates its buffers on CUDA unconditionally, so it cannot run on the CPU ranks this project is tested on.

The update is AdamW's either way: every replica clips the same reduced gradient, and each parameter is stepped
once, by its owner, with the same arithmetic. Moments are read and written by parameter: sharded, a read is
an all-reduce over the parameter's group (the owner's moments, zeros elsewhere), so every replica sees them whole
(for the gathered checkpoint), and a write keeps only the owner's.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

EXPERT = ".mlp.experts."


class RankOptimizer:
    """AdamW over ``named`` (the rank's ``(name, parameter)`` pairs); ``shard``: ZeRO-1 over megatron's
    data-parallel groups (see the module doc)."""

    def __init__(self, named: list[tuple[str, torch.nn.Parameter]], *, lr: float, weight_decay: float,
                 shard: bool = False):
        self.named = list(named)
        self.sharded = shard
        self.optimizers: list[torch.optim.Optimizer] = []
        self.group_of: dict[int, object] = {}           # id(param) -> its ZeRO process group (sharded)
        if not shard:
            self.optimizers.append(torch.optim.AdamW([p for _, p in self.named], lr=lr, weight_decay=weight_decay))
            return
        from megatron.core import parallel_state as ps
        from torch.distributed.optim import ZeroRedundancyOptimizer
        for expert, group in ((False, ps.get_data_parallel_group()), (True, ps.get_expert_data_parallel_group())):
            params = [p for n, p in self.named if (EXPERT in n) == expert]
            if not params:
                continue
            self.optimizers.append(ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW,
                                                           process_group=group, lr=lr, weight_decay=weight_decay))
            self.group_of.update({id(p): group for p in params})

    def _local(self, opt) -> torch.optim.Optimizer:
        """The optimizer holding this rank's moments (ZeRO: its local optimizer over the parameters it owns)."""
        return opt.optim if self.sharded else opt

    def hyper(self) -> dict:
        """AdamW's settings of the (one) parameter group, without its parameters."""
        return {k: v for k, v in self.optimizers[0].param_groups[0].items() if k != "params"}

    def step(self, lr: float, weight_decay: float) -> None:
        for opt in self.optimizers:
            for group in opt.param_groups:
                group["lr"], group["weight_decay"] = lr, weight_decay
            opt.step()
            opt.zero_grad(set_to_none=True)

    def _owned(self) -> dict[int, dict]:
        """id(param) -> its AdamW state, for the parameters whose state this rank holds."""
        return {id(p): st for opt in self.optimizers for p, st in self._local(opt).state.items()}

    def held(self) -> dict[str, int]:
        """What of the rank's AdamW state it holds: ``params_held`` of ``params`` (all, unsharded), and their
        elements ``numel_held`` of ``numel`` (each element two fp32 moments)."""
        owned = self._owned()
        return {"params_held": sum(id(p) in owned for _, p in self.named), "params": len(self.named),
                "numel_held": sum(p.numel() for _, p in self.named if id(p) in owned),
                "numel": sum(p.numel() for _, p in self.named)}

    def moments(self) -> dict[str, dict[str, torch.Tensor]]:
        """{"exp_avg", "exp_avg_sq"} -> {local name: tensor on the CPU} (zeros before the first step), for what a
        gathered checkpoint reads (:func:`compass.lm.megatron_parallel.gather_full_state` takes each piece from the
        first rank of its data-parallel group): unsharded, every parameter; sharded, the parameters of the groups
        this rank comes first in, each moment reduced there from its owner. Sharded, every rank of each group must
        call it."""
        owned = self._owned()
        out: dict[str, dict[str, torch.Tensor]] = {"exp_avg": {}, "exp_avg_sq": {}}
        for name, p in self.named:
            st = owned.get(id(p), {})
            for k in out:
                t = st[k].detach().clone() if k in st else torch.zeros_like(p)
                if self.sharded:
                    group = self.group_of[id(p)]
                    dist.reduce(t, dst=dist.get_global_rank(group, 0), group=group)   # the owner's; zeros elsewhere
                    if dist.get_rank(group) != 0:
                        continue
                out[k][name] = t.cpu()          # off the GPU at once: a whole state does not fit beside the model
        return out

    def load(self, by_name: dict[str, dict[str, torch.Tensor]], step: int) -> None:
        """Each parameter's moments from ``by_name`` (local name -> {exp_avg, exp_avg_sq}), kept where the
        parameter's state lives; ``step``: AdamW's step count (0: no state, as before the first step)."""
        for opt in self.optimizers:
            local = self._local(opt)
            local.state.clear()
            if step == 0:
                continue
            mine = {id(p) for g in local.param_groups for p in g["params"]}
            for name, p in self.named:
                if id(p) in mine:
                    local.state[p] = {"step": torch.tensor(float(step)),
                                      **{k: by_name[name][k].to(p).clone() for k in ("exp_avg", "exp_avg_sq")}}


__all__ = ["RankOptimizer"]
