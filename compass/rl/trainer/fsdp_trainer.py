"""The ``fsdp`` trainer backend: the HF policy sharded over N data-parallel ranks with PyTorch FSDP2.

Each rank (:class:`FsdpRank`) holds a copy of the policy built from the same weights, sharded with
``fully_shard`` per decoder layer and once at the root, and an AdamW over its shards. N = 1 runs in this
process (a group of one: the GPU bench, a one-GPU run); N > 1 runs as N Ray actors in a placement group
(:class:`compass.dist.rank_group.RankGroup`), NCCL between GPUs and gloo on the CPU.

One update, on every rank at once (the same batch reaches all of them; each takes a contiguous share of
its rows):

1. **forward, no gradients** — each rank's rows in micro-batches (``micro_batch_tokens``); the log-probs
   and entropies are summed across ranks (each row is non-zero on one rank only), so every rank holds the
   whole batch's ``[B, L-1]``;
2. **loss** — the configured policy loss on the whole batch, identically on every rank, and its gradient
   with respect to every token's log-prob (exact for every loss, whatever it aggregates over the batch:
   sequence means, ESPO's entropy groups);
3. **backward** — each rank runs its rows again with gradients and back-propagates its rows' share of that
   gradient; FSDP sums the shares across ranks (divide factor 1, not its default mean) and reduce-scatters
   them after each micro-batch, so a rank holds only its shard of the accumulated gradient;
4. **step** — the global gradient norm clipped, AdamW on the shards.

A rank with fewer micro-batches than another (or no rows, when the batch has fewer rows than there are
ranks) runs zero-weighted ones on the batch's shortest row, so that every rank enters each collective. The cost over the one-process ``torch`` trainer is the extra forward of step 1 (which the
``torch`` trainer pays too with micro-batches) and the collectives.

Precision: ``bf16`` is FSDP2's ``MixedPrecisionPolicy`` (bf16 weights gathered for compute, gradients
reduced in fp32, fp32 master shards and AdamW state) under the ``torch`` trainer's autocast. The numerics
are close to the ``torch`` trainer's, not the same: the weights are bf16 for every op, so the embeddings
and norms compute in bf16 where autocast keeps fp32. ``cpu_offload`` keeps the shards, their gradients and
AdamW's state in host memory; it runs at one rank (a GPU bench phase) and is refused for more until the
ranks also join a gloo group for its CPU collectives.

Checkpoints are gathered, not sharded: ``state_dict()`` is the full model under Hugging Face names and the
full AdamW state keyed by parameter name (``torch.distributed.checkpoint.state_dict`` with
``full_state_dict``), so a state saved by N ranks loads on M ranks, and the weights are what every later
stage reads. The price is one host's memory for the whole state at save time.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from compass.dist.fsdp import cloned, decoder_layers, full_tensor, fully_shard_summed
from compass.lm.device import activation_checkpointing, autocast, compute_dtype, resolve_device, to_device
from compass.lm.policy_forward import token_logprobs
from compass.rl.algos.losses import masked_mean
from compass.rl.trainer.base import TRAINER_BACKENDS, register_trainer_backend  # noqa: F401
from compass.rl.trainer.ranked import RankedTrainer, whole_batch_loss
from compass.rl.trainer.torch_trainer import _replay, _rows, token_micro_batches

PREFIX = "policy."          # the HF model's place inside the FSDP root (_Policy.policy)


class _Policy(nn.Module):
    """The FSDP root: its forward is the policy's token log-probs, so the weights FSDP keeps at the root
    (embeddings, final norm, LM head) are gathered for the whole forward and its backward."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.policy = model

    def forward(self, input_ids, attention_mask, only, temperature: float):
        return token_logprobs(self.policy, input_ids, attention_mask, temperature, only=only, shared_prefix=False)


def shard(model: nn.Module, device: torch.device, amp: torch.dtype, cpu_offload: bool = False) -> _Policy:
    """``model`` wrapped in :class:`_Policy` and sharded over the default group's ranks: each decoder layer one
    FSDP unit, the rest the root's; gradients summed across ranks (:func:`compass.dist.fsdp.fully_shard_summed`)."""
    return fully_shard_summed(_Policy(model), decoder_layers(model), device, amp, cpu_offload)


class FsdpRank:
    """One rank of the sharded trainer (see the module doc); built after the rank joined its group."""

    def __init__(self, payload: dict, cfg):
        from compass.lm.model_payload import model_from_payload
        s = cfg.trainer.backend
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.device = resolve_device(s.device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if s.cpu_offload and self.device.type != "cuda":
            raise ValueError(f"trainer.backend.cpu_offload: the ranks compute on {self.device}, not a GPU; offload "
                             f"moves GPU state to host memory, where a CPU run already keeps it")
        self.amp = compute_dtype(self.device, s.precision)
        self.micro_batch_tokens = s.micro_batch_tokens
        self.checkpointing = s.activation_checkpointing
        self.temperature = cfg.rollout.temperature
        self.model = model_from_payload(payload).to(self.device)
        self.vocab_size = self.model.config.vocab_size
        self.root = shard(self.model, self.device, self.amp, s.cpu_offload)
        self.optimizer = torch.optim.AdamW(self.root.parameters(), lr=cfg.trainer.lr,
                                           weight_decay=cfg.trainer.weight_decay)
        self.steps = 0
        self.last_logp: torch.Tensor | None = None

    # -- the rows this rank computes ---------------------------------------------------------
    def _plan(self, batch: dict) -> list[list[int] | None]:
        """This rank's micro-batches (global row indices), padded with None (a zero-weighted micro-batch) to
        the largest count on any rank: every rank runs the same number of forwards and backwards."""
        B = batch["attention_mask"].shape[0]
        mine = torch.arange(B).tensor_split(self.world)[self.rank].tolist()
        if not mine:
            groups: list = []
        elif self.micro_batch_tokens is None:
            groups = [mine]
        else:
            local = token_micro_batches(batch["attention_mask"][mine], self.micro_batch_tokens)
            groups = [[mine[i] for i in g] for g in local]
        n = torch.tensor([len(groups)], device=self.device)
        if self.world > 1:
            dist.all_reduce(n, op=dist.ReduceOp.MAX)
        return groups + [None] * (int(n) - len(groups))

    def _forward(self, batch: dict, routes, idx: list[int], seed: torch.Tensor | None = None):
        """Rows ``idx``: their log-probs and entropies, and with ``seed`` (``[rows, width-1]``, or 0 for a padding
        micro-batch) the backward of ``sum(logp * seed)`` too, inside the same Router Replay block: with
        activation checkpointing the backward recomputes each layer, and it must route as the forward did."""
        sub, sub_routes, width = _rows(batch, routes, idx)
        with _replay(self.model, sub_routes):
            with autocast(self.device, self.amp):
                lp, en = self.root(sub["input_ids"], sub["attention_mask"], sub["completion_mask"][:, 1:],
                                   self.temperature)
            if seed is not None:
                (lp * seed).sum().backward()
        return lp, en, width

    @staticmethod
    def _padding_rows(batch: dict) -> list[int]:
        """The row a zero-weighted padding micro-batch runs: the shortest (it only has to enter the collectives)."""
        return [int(batch["attention_mask"].sum(1).argmin())]

    @torch.no_grad()
    def _all_rows(self, batch: dict, routes, plan) -> tuple[torch.Tensor, torch.Tensor]:
        """Pass 1: the whole batch's log-probs and entropies ``[B, L-1]`` on every rank."""
        shape = batch["completion_mask"][:, 1:].shape
        logp = torch.zeros(shape, dtype=torch.float32, device=self.device)
        entropy = torch.zeros(shape, dtype=torch.float32, device=self.device)
        for idx in plan:
            lp, en, width = self._forward(batch, routes, idx if idx is not None else self._padding_rows(batch))
            if idx is not None:
                logp[idx, :width - 1], entropy[idx, :width - 1] = lp, en
        if self.world > 1:          # each row is non-zero on one rank: the sum is the gather, exactly
            dist.all_reduce(logp)
            dist.all_reduce(entropy)
        return logp, entropy

    # -- the protocol (every rank runs each call) ----------------------------------------------
    def logprobs(self, batch, routes=None):
        batch = to_device(batch, self.device)
        routes = None if routes is None else routes.to(self.device)
        was_training = self.root.training
        self.root.eval()
        logp, ent = self._all_rows(batch, routes, self._plan(batch))
        self.root.train(was_training)
        return (logp.cpu(), ent.cpu()) if self.rank == 0 else None

    def _backward(self, batch, advantages, old_logp, cfg, routes, old_entropy):
        """Steps 1-3 of an update (the module doc): the batch's loss on every rank and, when any advantage is
        non-zero, its gradient summed into the shards' ``.grad``."""
        dev = self.device
        batch = to_device(batch, dev)
        advantages = advantages.to(dev).detach().float()
        old_logp, routes, old_entropy = (None if t is None else t.to(dev) for t in (old_logp, routes, old_entropy))
        mask = batch["completion_mask"][:, 1:]
        has_signal = bool((advantages != 0).any())
        self.root.train()
        plan = self._plan(batch)
        with activation_checkpointing(self.model, self.checkpointing):
            logp, entropy = self._all_rows(batch, routes, plan)                          # 1. forward
            loss, lm, _, g = whole_batch_loss(cfg, logp, entropy, advantages, mask, self.vocab_size,   # 2. loss
                                              old_logp, old_entropy)
            self.last_logp = logp
            if has_signal:
                self.optimizer.zero_grad(set_to_none=True)
                for idx in plan:                                                          # 3. backward
                    # each micro-batch's gradient is reduce-scattered as it ends: a rank never holds more than
                    # its shard of the accumulated gradient (deferring the sync would keep it whole, unsharded)
                    if idx is None:
                        self._forward(batch, routes, self._padding_rows(batch), seed=0.0)
                    else:
                        width = int(batch["attention_mask"][idx].sum(1).max())
                        self._forward(batch, routes, idx, seed=g[idx, :width - 1])
        return {"loss": float(loss.detach()), "entropy": float(masked_mean(entropy, mask)),
                "adv_abs_token_mean": float(masked_mean(advantages.abs(), mask)), "grad_norm": 0.0,
                "updated": float(has_signal), **{k: float(v) for k, v in lm.items()}}

    def update(self, batch, advantages, old_logp, cfg, routes=None, old_entropy=None) -> dict[str, float] | None:
        m = self._backward(batch, advantages, old_logp, cfg, routes, old_entropy)
        if m["updated"]:
            norm = torch.nn.utils.clip_grad_norm_(self.root.parameters(), cfg.trainer.max_grad_norm)
            m["grad_norm"] = float(full_tensor(norm))
            self.optimizer.step()                                                         # 4. step
            self.optimizer.zero_grad(set_to_none=True)
            self.steps += 1
        return m if self.rank == 0 else None

    def gradients(self, batch, advantages, old_logp, cfg, routes=None, old_entropy=None):
        """The batch's whole gradient (before clipping) under Hugging Face names on rank 0, None elsewhere; no
        step is taken (tests compare rank counts with it)."""
        self._backward(batch, advantages, old_logp, cfg, routes, old_entropy)
        out = {}
        for name, p in self.root.named_parameters():
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            full = full_tensor(g)                                                    # a collective: every rank
            if self.rank == 0:
                out[name.removeprefix(PREFIX)] = full.detach().cpu()
        self.optimizer.zero_grad(set_to_none=True)
        return out if self.rank == 0 else None

    def pre_step_logprobs(self):
        return None if self.rank != 0 or self.last_logp is None else self.last_logp.cpu()

    def _options(self, **kw):
        from torch.distributed.checkpoint.state_dict import StateDictOptions
        return StateDictOptions(full_state_dict=True, **kw)

    def hf_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The full weights under Hugging Face names on rank 0 (None elsewhere); every rank takes part."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict
        sd = get_model_state_dict(self.root, options=self._options(cpu_offload=True))
        return {k.removeprefix(PREFIX): v for k, v in sd.items()} if self.rank == 0 else None

    def state_dict(self) -> dict | None:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
        model = self.hf_state_dict()
        optim = get_optimizer_state_dict(self.root, self.optimizer, options=self._options(cpu_offload=True))
        if self.rank != 0:
            return None
        if self.device.type == "cpu" or self.world == 1:
            # gathered tensors that already lie on the CPU (all of them on a CPU, AdamW's step counters on a GPU)
            # are the live ones: a state must not change with later steps, nor share them with a trainer that
            # loads it
            model, optim = cloned(model), cloned(optim)
        return {"model": model, "optimizer": optim, "steps": self.steps, "ranks": self.world}

    def load_state_dict(self, state: dict) -> None:
        """A gathered state (:meth:`state_dict`), saved by any number of ranks; each rank loads its shards."""
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict
        from torch.distributed.tensor import DTensor, distribute_tensor
        model = state["model"]
        with torch.no_grad():
            # each rank cuts its own shard from the full tensor and copies it into the storage FSDP gathers from
            for name, p in self.root.named_parameters():
                full = model[name.removeprefix(PREFIX)].to(self.device, p.dtype)
                p.copy_(distribute_tensor(full, p.device_mesh, p.placements) if isinstance(p, DTensor) else full)
        set_optimizer_state_dict(self.root, self.optimizer, state["optimizer"], options=self._options())
        self.steps = int(state["steps"])

    def pid(self) -> int:
        import os
        return os.getpid()


@register_trainer_backend("fsdp")
class FsdpTrainer(RankedTrainer):
    """The controller's handle on the FSDP ranks (:class:`compass.rl.trainer.ranked.RankedTrainer`)."""
    name = "fsdp"

    def __init__(self, model, cfg):
        from compass.lm.model_payload import model_payload
        s = cfg.trainer.backend
        payload = model_payload(model)
        if s.ranks == 1:                    # a group of one in this process: no Ray, no port
            from compass.dist.process_group import default_backend, join
            join(default_backend(resolve_device(s.device)), 0, 1)
            self._in_process(FsdpRank(payload, cfg))
            return
        # ranks told to compute on the CPU join over gloo even where they see a GPU (NCCL takes no CPU tensors)
        self._on_ray(FsdpRank, (payload, cfg), s, backend="gloo" if s.device == "cpu" else "auto",
                     what=f"fsdp trainer ({s.ranks} ranks)")


__all__ = ["FsdpRank", "FsdpTrainer", "shard"]
