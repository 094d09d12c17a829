"""The weights side of the SFT loop: the model, its AdamW and one optimizer step, either in the training process
(:class:`SFTWorker`) or as N ranks on Ray (:class:`SFTRanks`: with the torch backend each rank an ``SFTWorker``
with ``sharded=True``; with the megatron backend a :class:`compass.lm.sft.megatron_ranks.MegatronSFTRank`). The
loop itself (:func:`compass.lm.sft.train.train_sft`: sampling, schedule, logging, state files) runs once, in the
training process, whichever it drives.

On torch ranks, the model is sharded with FSDP2 (:func:`compass.dist.fsdp.fully_shard_summed`)
and every rank receives the step's whole micro-batches; each takes a contiguous share of every micro-batch's
samples, back-propagates its share's summed loss divided by the *whole* step's supervised-token count, and FSDP
sums the shares' gradients across ranks: the update one process would make on the whole step, up to the order of
float additions. A rank whose share is empty, or that has fewer pieces (``micro_batch_tokens``) than another,
runs zero-weighted pieces on the step's shortest sample, so that every rank enters every collective.

FSDP units: with the packed native forward (:func:`compass.lm.sft.losses.packed_loss_sum`, which reads every
weight at once rather than layer by layer) the whole model is one unit, gathered for each piece's forward and
backward; with transformers' padded forward each decoder layer is its own unit (less memory at a time). Either
way the weights at rest, their gradients and AdamW's state are sharded 1/N per rank.

States are gathered and keep the one-process layout (the torch backend: the HF state dict, AdamW's state keyed by
parameter position; the megatron backend: megatron's full weights, AdamW's state keyed by parameter name), so a
state saved by N ranks resumes on M ranks or in one process.
"""
from __future__ import annotations

import logging

import torch
import torch.distributed as dist
from torch import nn

from compass.dist.fsdp import cloned
from compass.lm.device import activation_checkpointing, autocast, compute_dtype, model_device, resolve_device
from compass.lm.sft.losses import Sample, make_sft_backend, mean_loss, split_by_tokens, supervised_count

PREFIX = "model."           # the HF model's place inside the FSDP root (_Root.model)


class _Root(nn.Module):
    """The FSDP root: its forward is the backend's summed loss over a list of samples."""

    def __init__(self, model: nn.Module, loss_fn):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn      # reads self.model's parameters when called: the gathered ones inside forward

    def forward(self, samples: list[Sample]):
        return self.loss_fn(samples)


def share(samples: list, rank: int, world: int) -> list:
    """Rank ``rank``'s contiguous share of ``samples`` (sizes differ by at most one, the first ranks larger)."""
    base, extra = divmod(len(samples), world)
    lo = rank * base + min(rank, extra)
    return samples[lo:lo + base + (rank < extra)]


def optimizer_by_name(sd: dict, names: list[str]) -> dict:
    """A torch optimizer state dict keyed by parameter position -> keyed by ``names[position]``."""
    return {"state": {names[i]: v for i, v in sd["state"].items()},
            "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in sd["param_groups"]]}


def optimizer_by_position(sd: dict, names: list[str]) -> dict:
    """The inverse of :func:`optimizer_by_name` for an optimizer over parameters named ``names``, in order (a
    group's positions sorted: torch pairs a saved group's ids with the optimizer's parameters in order)."""
    index = {n: i for i, n in enumerate(names)}
    return {"state": {index[k]: v for k, v in sd["state"].items()},
            "param_groups": [{**g, "params": sorted(index[k] for k in g["params"])} for g in sd["param_groups"]]}


def _shortest(micro_batches: list[list[Sample]]) -> Sample:
    return min((s for mb in micro_batches for s in mb), key=lambda s: len(s[0]))


class SFTWorker:
    """The model and optimizer of an SFT run (see the module doc). ``sharded``: this process is one rank of the
    default ``torch.distributed`` group (torch backend); otherwise the one process that trains."""

    def __init__(self, model, pad_id: int, *, backend: str = "torch", packing: bool = False,
                 pack_len: int | None = None, device: str = "auto", precision: str = "auto", lr: float = 1e-3,
                 weight_decay: float = 0.0, grad_clip: float = 1.0, micro_batch_tokens: int | None = None,
                 activation_checkpointing: bool = False, seed: int = 0, sharded: bool = False,
                 logger: logging.Logger | None = None):
        if sharded and backend != "torch":
            raise ValueError(f"sft: SFTWorker shards the torch backend; backend {backend!r} on ranks is "
                             f"compass.lm.sft.megatron_ranks")
        if backend == "torch":
            self.device = resolve_device(device)
            model.to(self.device)
        else:                                       # megatron places its own model
            self.device = model_device(model)
        self.model, self.amp, self.grad_clip = model, compute_dtype(self.device, precision), grad_clip
        self.megatron = backend == "megatron"
        self.micro_batch_tokens = micro_batch_tokens
        self.checkpointing = activation_checkpointing and backend == "torch"
        self.net = make_sft_backend(backend, model, pad_id, packing=packing, pack_len=pack_len, logger=logger,
                                    seed=seed)
        self.rank, self.world = (dist.get_rank(), dist.get_world_size()) if sharded else (0, 1)
        self.root = None
        if sharded:
            from compass.dist.fsdp import decoder_layers, fully_shard_summed
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            units = [] if self.net.packed else decoder_layers(model)
            self.root = fully_shard_summed(_Root(model, self.net), units, self.device, self.amp)
        torch.manual_seed(seed)
        self.optimizer = torch.optim.AdamW(self._params(), lr=lr, weight_decay=weight_decay)

    # -- what the loop reads ----------------------------------------------------------------------
    def info(self) -> dict:
        return {"mode": self.net.mode, "fallback_reason": self.net.fallback_reason}

    def pid(self) -> int:
        import os
        return os.getpid()

    def _params(self):
        return self.root.parameters() if self.root is not None else self.net.parameters()

    def _loss(self, samples: list[Sample]):
        return self.root(samples) if self.root is not None else self.net(samples)

    def _max_over_ranks(self, n: int) -> int:
        t = torch.tensor([n], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t)

    def _summed(self, values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    # -- one optimizer step ----------------------------------------------------------------------
    def step(self, micro_batches: list[list[Sample]], lr: float, n_sup: int) -> dict | None:
        """One AdamW step on ``micro_batches`` (this rank's share of each), loss = summed cross-entropy / ``n_sup``
        (the step's supervised tokens). -> {loss_sum, tokens, padded_tokens} over all ranks (rank 0; None on
        the others)."""
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        pieces: list = [p for mb in micro_batches
                        for p in split_by_tokens(share(mb, self.rank, self.world), self.micro_batch_tokens) if p]
        if self.world > 1:
            pieces += [None] * (self._max_over_ranks(len(pieces)) - len(pieces))
        loss_sum, tokens, padded = 0.0, 0, 0
        for piece in pieces:
            with autocast(self.device, self.amp), activation_checkpointing(self.model, self.checkpointing):
                ls, c = self._loss(piece if piece is not None else [_shortest(micro_batches)])
            if piece is None:               # zero weight: it only takes part in the collectives
                (ls * 0.0).backward()
                continue
            (ls / n_sup).backward()
            loss_sum += float(ls.detach())
            tokens += c["tokens"]
            padded += c["padded_tokens"]
        if self.world > 1:
            loss_sum, tokens, padded = self._summed([loss_sum, tokens, padded])
        torch.nn.utils.clip_grad_norm_(self._params(), self.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.rank:
            return None
        return {"loss_sum": loss_sum, "tokens": int(tokens), "padded_tokens": int(padded)}

    def heldout_loss(self, samples: list[Sample], chunk: int = 64) -> float | None:
        """Token-mean loss over every supervised token of ``samples``, no gradient (rank 0; None elsewhere)."""
        module = self.root if self.root is not None else self.net
        module.eval()
        try:
            with autocast(self.device, self.amp):
                if self.world == 1:
                    return mean_loss(self.net, samples, chunk)
                total = 0.0
                with torch.no_grad():
                    for i in range(0, len(samples), chunk):     # one forward per chunk on every rank
                        part = samples[i:i + chunk]
                        mine = share(part, self.rank, self.world)
                        s, _ = self._loss(mine or [_shortest([part])])
                        total += float(s) if mine else 0.0
                (total,) = self._summed([total])
                return None if self.rank else total / max(supervised_count(samples), 1)
        finally:
            module.train()

    def train(self) -> None:
        (self.root if self.root is not None else self.net).train()

    # -- states ----------------------------------------------------------------------------------
    def _megatron_names(self) -> list[str]:
        return [n for n, _ in self.net.module.named_parameters()]

    def _names(self) -> list[str]:
        return [n.removeprefix(PREFIX) for n, _ in self.root.named_parameters()]

    def state(self) -> dict | None:
        """{model, optimizer, torch_rng} in the one-process layout (gathered from the ranks: rank 0; None
        elsewhere)."""
        if self.root is None:
            optim = self.optimizer.state_dict()
            if self.megatron:       # by name: the layout megatron's ranks save and read (megatron_ranks)
                optim = optimizer_by_name(optim, self._megatron_names())
            return {"model": self.net.state_dict(), "optimizer": optim, "torch_rng": torch.get_rng_state()}
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                             get_optimizer_state_dict)
        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        model = get_model_state_dict(self.root, options=opts)
        optim = get_optimizer_state_dict(self.root, self.optimizer, options=opts)
        if self.rank:
            return None
        optim = optimizer_by_position(
            {"state": {k.removeprefix(PREFIX): cloned(v) for k, v in optim["state"].items()},
             "param_groups": [{**g, "params": [k.removeprefix(PREFIX) for k in g["params"]]}
                              for g in optim["param_groups"]]}, self._names())
        return {"model": {k.removeprefix(PREFIX): v.detach().clone() for k, v in model.items()},
                "optimizer": optim, "torch_rng": torch.get_rng_state()}

    def load(self, state: dict) -> None:
        """A state of :meth:`state`, saved by any number of ranks (or one process)."""
        torch.set_rng_state(state["torch_rng"])
        if self.root is None:
            self.net.load_state_dict(state["model"])
            optim = state["optimizer"]
            if self.megatron:
                optim = optimizer_by_position(optim, self._megatron_names())
            self.optimizer.load_state_dict(optim)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
        from torch.distributed.tensor import DTensor, distribute_tensor
        with torch.no_grad():       # each rank cuts its shard from the full tensor
            for name, p in self.root.named_parameters():
                full = state["model"][name.removeprefix(PREFIX)].to(self.device, p.dtype)
                p.copy_(distribute_tensor(full, p.device_mesh, p.placements) if isinstance(p, DTensor) else full)
        optim = optimizer_by_name(state["optimizer"], [PREFIX + n for n in self._names()])
        set_optimizer_state_dict(self.root, self.optimizer, optim, options=StateDictOptions(full_state_dict=True))

    def finish(self) -> dict | None:
        """End of training: the backend's weights written back into the HF model. On ranks: the full HF state
        dict (rank 0; None elsewhere), for the training process's model."""
        if self.root is None:
            self.net.eval()
            self.net.write_back()
            self.model.eval()
            return None
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
        sd = get_model_state_dict(self.root, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return None if self.rank else {k.removeprefix(PREFIX): v.detach().clone() for k, v in sd.items()}


def rank_worker(payload: dict, pad_id: int, options: dict) -> SFTWorker:
    """What each rank of :class:`SFTRanks` holds: its own copy of the model, sharded."""
    from compass.lm.model_payload import model_from_payload
    return SFTWorker(model_from_payload(payload), pad_id, sharded=True, **options)


class SFTRanks:
    """The worker's methods run on ``settings.ranks`` Ray actors at once (rank 0 answers): :class:`SFTWorker`
    sharded with FSDP2 (torch backend), or :class:`compass.lm.sft.megatron_ranks.MegatronSFTRank` (megatron
    backend, parallel sizes ``megatron``); ``finish`` loads the trained weights into ``model``, the training
    process's copy."""

    def __init__(self, model, pad_id: int, settings, options: dict, megatron: dict | None = None):
        from compass.dist.rank_group import RankGroup
        from compass.lm.model_payload import model_payload
        self.model = model
        bundle = {"CPU": settings.cpus_per_rank, "GPU": settings.gpus_per_rank}
        if options["backend"] == "megatron":
            from compass.lm.megatron_convert import unsupported
            from compass.lm.megatron_parallel import ParallelSizes
            from compass.lm.sft.megatron_ranks import megatron_rank_worker
            why = unsupported(model.config)
            if why is not None:
                raise ValueError(f"sft backend 'megatron' cannot train this model: {why}; use backend: torch")
            sizes = megatron or {}
            split = ParallelSizes(sizes.get("tensor_parallel", 1), sizes.get("pipeline_parallel", 1),
                                  sizes.get("expert_parallel", 1))
            split.check(settings.ranks, model.config)
            factory, args = megatron_rank_worker, (model_payload(model), pad_id, options, sizes)
            what = f"sft megatron ({settings.ranks} ranks: tensor {split.tp}, pipeline {split.pp}, expert {split.ep})"
            gloo = not settings.gpus_per_rank
        else:
            factory, args, what = rank_worker, (model_payload(model), pad_id, options), f"sft ({settings.ranks} ranks)"
            # ranks told to compute on the CPU join over gloo even where they see a GPU (NCCL takes no CPU tensors)
            gloo = options.get("device") == "cpu"
        self.group = RankGroup(factory, args, world_size=settings.ranks, bundle=bundle, strategy=settings.placement,
                               threads=settings.threads_per_rank, backend="gloo" if gloo else "auto", what=what)

    def _call(self, method: str, *args):
        return self.group.call(method, *args)[0]

    def info(self) -> dict:
        return self._call("info")

    def step(self, micro_batches, lr, n_sup):
        return self._call("step", micro_batches, lr, n_sup)

    def heldout_loss(self, samples):
        return self._call("heldout_loss", samples)

    def train(self) -> None:
        self._call("train")

    def state(self) -> dict:
        return self._call("state")

    def load(self, state: dict) -> None:
        self._call("load", state)

    def pids(self) -> list[int]:
        return self.group.pids()

    def finish(self) -> None:
        sd = self._call("finish")
        with torch.no_grad():
            self.model.load_state_dict(sd, strict=True)
        self.model.eval()

    def close(self) -> None:
        self.group.close()


__all__ = ["SFTRanks", "SFTWorker", "optimizer_by_name", "optimizer_by_position", "rank_worker", "share"]
