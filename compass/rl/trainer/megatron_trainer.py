"""The ``megatron`` trainer backend: the policy as a megatron-core ``GPTModel`` with megatron's tensor, pipeline,
expert and data parallelism, its ``DistributedDataParallel`` wrapper and its optimizer.

Ranks (:class:`MegatronRank`): one in this process (``ranks: 1``, a group of one), or ``ranks`` Ray actors in a
placement group (:class:`compass.dist.rank_group.RankGroup`; NCCL between GPUs, gloo on the CPU). Megatron's
``parallel_state`` splits them into tensor (``tensor_parallel``), pipeline (``pipeline_parallel``), expert
(``expert_parallel``) and data-parallel groups (``ranks / (tensor_parallel * pipeline_parallel)``). Each rank
builds the HF Qwen3-MoE (or dense Qwen3) policy's megatron twin and keeps its shard (:mod:`compass.lm.megatron_parallel`);
``hf_state_dict()`` gathers the shards on rank 0 and converts back (exact). On a machine without CUDA,
:mod:`compass.lm.megatron_cpu_compat` maps megatron's CUDA-only calls to the CPU first. With tensor parallelism
the sequence is split over the TP ranks too (megatron's sequence parallelism, which its MoE layers require),
so each batch is padded to a multiple of ``tensor_parallel`` columns.

One update, on every rank at once (the same batch reaches all of them; each data-parallel rank takes a
contiguous share of its rows, all ranks of one data-parallel rank the same rows):

1. **forward, no gradients**, through megatron's pipeline schedule: the last stage turns its rows' logits into
   log-probs and entropies (``logits[:, :-1] / temperature`` -> log-softmax -> gather and entropy, with position
   ids ``0..L-1`` as the HF forward uses and an explicit causal + pad-key mask; the vocabulary-parallel logits
   are gathered first); a sum over the world makes the whole batch's ``[B, L-1]`` on every rank;
2. **loss**: the configured policy loss on the whole batch, identically on every rank, and its gradient with
   respect to every token's log-prob (exact for every loss, whatever it aggregates over the batch);
3. **backward** through the schedule again: each rank back-propagates its rows' share of that gradient
   (times the data-parallel size, which megatron's gradient reduction divides by); ``finalize_model_grads``
   reduces the gradients over the data-parallel, expert-data-parallel and tensor-parallel groups;
4. **step**: ``torch.optim.AdamW`` on the rank's shard, after clipping the gradient's norm over all ranks
   (megatron's own optimizers, its distributed optimizer among them, allocate on CUDA unconditionally);
   with ``distributed_optimizer`` its state sharded over the data-parallel ranks
   (:mod:`compass.lm.megatron_optimizer`).

Every data-parallel rank runs as many rows as the first (``ceil(B / dp)``): one with fewer (or none, when the
batch has fewer rows than there are data-parallel ranks) repeats the batch's shortest row with a zero weight,
since megatron's token dispatcher gathers equal shapes across the expert-parallel ranks.

Router Replay uses megatron's native mechanism: ``TransformerConfig.moe_enable_routing_replay``
gives every ``TopKRouter`` a ``RouterReplay`` instance; each rank drives its own routers' instances with
``set_target_indices`` and ``RouterReplayAction.REPLAY_FORWARD`` (or ``RECORD`` for
:meth:`MegatronTrainer.record_routes`). In ``REPLAY_FORWARD`` megatron takes the given expert indices and
gathers the current router's scores at them (``probs = softmax(logits.gather(idx))`` for Qwen3's renormalised
top-k), so the router keeps its gradient. Layout: routes ``[B, L, n_moe, k]`` -> per router the rank's rows,
its sequence chunk and its layer, ``routes[rows, s0:s1, i].transpose(0, 1).reshape(-1, k)`` (megatron is
sequence-first: token ``s * B + b``). A ``-1`` anywhere in a position's k entries means "route freely": a
forward pre-hook on each router fills that row with the top-k of the *current* router's logits on the hidden
state that actually reaches it (so the fill equals what free routing would pick in that same forward, after
the replayed upstream layers).

Checkpoints are gathered, as the ``fsdp`` trainer's: the full megatron weights and Adam state under the full
model's names, so a state saved at one set of parallel sizes loads at any other.
"""
from __future__ import annotations

import copy
import functools
from contextlib import contextmanager

import torch
import torch.distributed as dist

from compass.lm.megatron_convert import (build_gpt_model, hf_to_megatron, megatron_config_from_hf, megatron_to_hf,
                                        moe_layer_pattern)
from compass.lm.megatron_parallel import (ParallelSizes, cut, gated_fc1, gather_full_state, init_parallel,
                                         is_tied_copy, load_full_state, source_name, tp_part)
from compass.rl.algos.losses import masked_mean
from compass.rl.trainer.base import register_trainer_backend
from compass.rl.trainer.ranked import RankedTrainer, whole_batch_loss


# -- helpers ---------------------------------------------------------------------------

def attention_mask_4d(attention_mask: torch.Tensor) -> torch.Tensor:
    """``[B, L]`` 1/0 key mask -> megatron's ``[B, 1, L, L]`` bool mask (True = masked): causal and pad keys."""
    B, L = attention_mask.shape
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool, device=attention_mask.device), diagonal=1)
    return causal[None, None] | ~attention_mask.bool()[:, None, None, :]


def _settings(cfg):
    """The megatron settings of ``cfg``'s trainer (their defaults when it names another backend, as a test that
    builds this trainer directly from a default config does)."""
    from compass.rl.config import MegatronTrainerSettings
    s = cfg.trainer.backend
    return s if isinstance(s, MegatronTrainerSettings) else MegatronTrainerSettings()


def _join_alone() -> None:
    """A process not in a ``torch.distributed`` group joins a group of one (gloo, in memory)."""
    if not dist.is_initialized():
        from compass.dist.process_group import join
        join("gloo", 0, 1)


class MegatronRank:
    """One rank of the megatron trainer (see the module doc); built after the rank joined its group."""

    def __init__(self, model, cfg, *, aux_loss_coeff: float = 0.0):
        """``model``: the HF Qwen3-MoE policy, or its payload (``compass.lm.model_payload``; it is read, not
        modified); ``cfg``: :class:`compass.rl.config.RLConfig` (seed, trainer, rollout.temperature)."""
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.transformer.moe.router_replay import RouterReplay
        if isinstance(model, dict):
            from compass.lm.model_payload import model_from_payload
            model = model_from_payload(model)
        s = _settings(cfg)
        self.sizes = ParallelSizes(s.tensor_parallel, s.pipeline_parallel, s.expert_parallel)
        _join_alone()
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.sizes.check(self.world, model.config)
        init_parallel(self.sizes, int(getattr(cfg, "seed", 0)))
        from megatron.core import parallel_state as ps
        self.ps = ps
        self.dp, self.dp_rank = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank()
        self.tp, self.tp_rank = ps.get_tensor_model_parallel_world_size(), ps.get_tensor_model_parallel_rank()
        self.last_stage = ps.is_pipeline_last_stage()
        self.micro_batches = s.micro_batches
        self.cfg = cfg
        self.hf_config = copy.deepcopy(model.config)
        self.tcfg = megatron_config_from_hf(self.hf_config, aux_loss_coeff=aux_loss_coeff, routing_replay=True,
                                            sizes=self.sizes)
        self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
            else torch.device("cpu")
        self.model = build_gpt_model(self.hf_config, self.tcfg)          # this rank's shard of it
        load_full_state(self.model, hf_to_megatron(model.state_dict(), self.hf_config), self.tcfg)
        del model                              # the full HF copy: only the shard stays
        self.model.to(self.device)
        self.ddp = DistributedDataParallel(config=self.tcfg, module=self.model,
                                           ddp_config=DistributedDataParallelConfig(grad_reduce_in_fp32=True))
        # the local routers, and each one's place among the full model's MoE layers
        pattern = moe_layer_pattern(self.hf_config)
        self.n_moe_layers = sum(pattern)
        self.routers, self.moe_index = [], []
        for layer in self.model.decoder.layers:
            if hasattr(layer.mlp, "router"):
                self.routers.append(layer.mlp.router)
                self.moe_index.append(sum(pattern[:layer.layer_number - 1]))
        self.replays = [r.router_replay for r in self.routers]
        # The instances register themselves in a class-level list for RouterReplay's static helpers;
        # this trainer drives its own instances, so it takes them out (several trainers may share a process).
        for rp in self.replays:
            if rp in RouterReplay.global_router_replay_instances:
                RouterReplay.global_router_replay_instances.remove(rp)
        self._fill_targets: list[torch.Tensor | None] = [None] * len(self.routers)
        for i, router in enumerate(self.routers):
            router.register_forward_pre_hook(self._make_fill_hook(i))
        self.topk = self.tcfg.moe_router_topk
        # torch's AdamW on this rank's shard (its state sharded over the data-parallel ranks with
        # distributed_optimizer), the gradient norm clipped over all ranks (:meth:`_clip`): megatron's own
        # optimizers allocate on CUDA unconditionally
        from compass.lm.megatron_optimizer import RankOptimizer
        self.optimizer = RankOptimizer(list(self.model.named_parameters()), lr=cfg.trainer.lr,
                                       weight_decay=cfg.trainer.weight_decay, shard=s.distributed_optimizer)
        self.steps = 0                 # optimizer steps taken (updates with signal), like the torch trainer
        self.last_logp: torch.Tensor | None = None

    # -- router replay ------------------------------------------------------------------

    def _make_fill_hook(self, i: int):
        def hook(router, args):
            target = self._fill_targets[i]
            if target is None:
                return None
            free_rows = (target < 0).any(dim=1)
            if bool(free_rows.any()):
                with torch.no_grad():
                    hidden = args[0].reshape(-1, args[0].shape[-1])
                    logits = hidden.float() @ router.weight.float().t()
                    own = torch.topk(logits, k=self.topk, dim=1).indices
                target = torch.where(free_rows.unsqueeze(1), own, target)
            self.replays[i].set_target_indices(target)
            return None
        return hook

    def _chunk(self, width: int) -> tuple[int, int]:
        """The sequence positions ``[s0, s1)`` this rank's routers see of a padded ``width``."""
        if not self.tcfg.sequence_parallel:
            return 0, width
        n = width // self.tp
        return self.tp_rank * n, (self.tp_rank + 1) * n

    def _layer_targets(self, routes: torch.Tensor, width: int) -> list[torch.Tensor]:
        """``routes`` ``[rows, width, n_moe, k]`` -> per local router ``[tokens, k]`` (sequence-first)."""
        expect = (self.n_moe_layers, self.topk)
        if tuple(routes.shape[2:]) != expect:
            raise ValueError(f"routes must be [B, L, n_moe_layers, top_k] with n_moe_layers, top_k = {expect}, "
                             f"got {tuple(routes.shape)}")
        routes = routes.to(self.device).long()
        if bool((routes >= self.tcfg.num_moe_experts).any()):
            raise ValueError(f"routes name an expert >= num_experts ({self.tcfg.num_moe_experts})")
        if routes.shape[1] < width:          # the padding columns route freely
            routes = torch.nn.functional.pad(routes, (0, 0, 0, 0, 0, width - routes.shape[1]), value=-1)
        s0, s1 = self._chunk(width)
        return [routes[:, s0:s1, i, :].transpose(0, 1).reshape(-1, self.topk).contiguous() for i in self.moe_index]

    @contextmanager
    def _routing(self, replay: bool, record: bool = False):
        """Megatron's Router Replay action for the forwards inside: replay (each forward's targets in
        ``_fill_targets``, set just before it), record, or neither (free routing)."""
        from megatron.core.transformer.moe.router_replay import RouterReplayAction
        try:
            if record or replay:
                for rp in self.replays:
                    rp.clear_indices()
                    rp.set_router_replay_action(RouterReplayAction.RECORD if record
                                                else RouterReplayAction.REPLAY_FORWARD)
            yield
        finally:
            self._fill_targets = [None] * len(self.routers)
            for rp in self.replays:
                rp.clear_indices()
                rp.clear_router_replay_action()

    # -- forward and backward through megatron's schedule ---------------------------------------

    def _rows(self, batch: dict) -> tuple[list[int], int]:
        """This data-parallel rank's rows, and how many of them are its own: the rest repeat the batch's shortest
        row with a zero weight, so that every data-parallel rank runs as many rows as the first (megatron's
        token dispatcher gathers equal shapes across them), a multiple of ``micro_batches``."""
        B = batch["input_ids"].shape[0]
        mine = torch.arange(B).tensor_split(self.dp)[self.dp_rank].tolist()
        n = -(-(-(-B // self.dp)) // self.micro_batches) * self.micro_batches     # ceil(B/dp), to a multiple of m
        shortest = int(batch["attention_mask"].sum(1).argmin())
        return mine + [shortest] * (n - len(mine)), len(mine)

    def _run(self, batch: dict, rows: list[int], routes, temperature: float, seed: torch.Tensor | None = None,
             record: bool = False):
        """Rows ``rows`` through the pipeline schedule, in ``micro_batches`` equal micro-batches:
        ``(logp, entropy, routes)`` ``[rows, L-1]`` on the last stage (None elsewhere; routes with ``record``:
        ``[rows, L, n_moe, k]``, zero where another rank's routers decided). With ``seed`` ``[rows, L-1]``, also
        the backward of ``sum(logp * seed)``."""
        from megatron.core.pipeline_parallel import get_forward_backward_func
        from megatron.core.tensor_parallel.mappings import gather_from_tensor_model_parallel_region
        ids = batch["input_ids"][rows].to(self.device)
        attn = batch["attention_mask"][rows].to(self.device)
        n, L = ids.shape
        width = -(-L // self.tp) * self.tp            # sequence parallelism cuts the sequence into tp equal parts
        if width != L:
            ids = torch.nn.functional.pad(ids, (0, width - L))
            attn = torch.nn.functional.pad(attn, (0, width - L))
        pos = torch.arange(width, dtype=torch.long, device=self.device).unsqueeze(0).expand(n, width)
        if "segments" in batch:         # packed rows (SFT): causal within each sample, padding -1
            from compass.lm.sft.packing import segment_mask
            seg = torch.nn.functional.pad(batch["segments"][rows].to(self.device), (0, width - L), value=-1)
            mask = ~segment_mask(seg)
        else:
            mask = attention_mask_4d(attn)
        m = self.micro_batches
        per = n // m                                  # _rows padded the rows to a multiple of m
        own_routes = None if routes is None else routes[rows]
        lp, en, rec = [None] * m, [None] * m, [None] * m

        def on_logits(j: int, logits):
            if self.tp > 1:
                logits = gather_from_tensor_model_parallel_region(logits)      # [per, width, V]
            logprobs = torch.log_softmax(logits[:, :L - 1].float() / temperature, dim=-1)
            logp = logprobs.gather(-1, ids[j * per:(j + 1) * per, 1:L].unsqueeze(-1)).squeeze(-1)
            lp[j], en[j] = logp.detach(), -(logprobs.exp() * logprobs).sum(-1).detach()
            if seed is None:
                return logp.sum() * 0.0, {}
            # megatron's gradient reduction divides by the data-parallel size and its schedule by the number of
            # micro-batches; the seed is this rank's share of the whole batch's gradient
            return (logp * seed[j * per:(j + 1) * per]).sum() * (self.dp * m), {}

        def step(chunks, model):
            j = next(chunks)
            part = slice(j * per, (j + 1) * per)
            if own_routes is not None:              # this micro-batch's routes, read by the routers' fill hooks
                self._fill_targets = self._layer_targets(own_routes[part], width)
            out = model(ids[part], pos[part], mask[part])
            if record:                              # this stage's routers recorded this micro-batch just now
                rec[j] = [rp.get_recorded_indices().clone() for rp in self.replays]
            return out, functools.partial(on_logits, j)

        with self._routing(replay=own_routes is not None, record=record):
            if seed is not None:
                self.ddp.zero_grad_buffer()
            get_forward_backward_func()(forward_step_func=step, data_iterator=iter(range(m)), model=[self.ddp],
                                        num_microbatches=m, seq_length=width, micro_batch_size=per,
                                        forward_only=seed is None)
        if seed is not None:
            from megatron.core.distributed import finalize_model_grads
            finalize_model_grads([self.ddp])
        routes_out = None
        if record:
            s0, s1 = self._chunk(width)
            routes_out = torch.zeros(n, width, self.n_moe_layers, self.topk, dtype=torch.long, device=self.device)
            for j in range(m):
                for i, r in zip(self.moe_index, rec[j]):
                    routes_out[j * per:(j + 1) * per, s0:s1, i] = r.reshape(s1 - s0, per, self.topk).transpose(0, 1)
            routes_out = routes_out[:, :L]
        if lp[0] is None:                            # not the last stage
            return None, None, routes_out
        return torch.cat(lp), torch.cat(en), routes_out

    def _whole(self, batch: dict, routes, temperature: float, record: bool = False):
        """Pass 1 (no gradients): the whole batch's ``(logp, entropy)`` ``[B, L-1]`` (and with ``record`` its
        routes ``[B, L, n_moe, k]``) on every rank."""
        rows, own = self._rows(batch)
        self.ddp.eval()
        with torch.no_grad():
            lp, en, rt = self._run(batch, rows, routes, temperature, record=record)
        rows = rows[:own]
        B, L = batch["input_ids"].shape
        logp = torch.zeros(B, L - 1, device=self.device)
        entropy = torch.zeros(B, L - 1, device=self.device)
        # one rank per data-parallel rank contributes its rows (the last stage's first tensor-parallel rank):
        # each row is non-zero on one rank only, so the sum over the world is the gather, exactly
        if self.last_stage and self.tp_rank == 0:
            logp[rows], entropy[rows] = lp[:own], en[:own]
        routes_out = None
        if record:
            routes_out = torch.zeros(B, L, self.n_moe_layers, self.topk, dtype=torch.long, device=self.device)
            routes_out[rows] = rt[:own]      # each (row, position, layer) is decided on one rank only
        if self.world > 1:
            dist.all_reduce(logp)
            dist.all_reduce(entropy)
            if routes_out is not None:
                dist.all_reduce(routes_out)
        return logp, entropy, routes_out

    # -- the protocol (every rank runs each call) ----------------------------------------------

    def logprobs(self, batch, routes=None):
        """``(logp, entropy)`` ``[B, L-1]`` float32 on rank 0 (None elsewhere); with ``routes``, replayed."""
        logp, ent, _ = self._whole(batch, routes, self.cfg.rollout.temperature)
        return (logp.cpu(), ent.cpu()) if self.rank == 0 else None

    def logprobs_with_routes(self, batch):
        """Free routing with ``RouterReplayAction.RECORD``, in one forward: ``(logp, entropy, routes)`` on rank 0,
        ``routes`` ``[B, L, n_moe, k]`` long (the experts megatron's routers picked, best first)."""
        if not self.n_moe_layers:           # a dense model routes nothing
            out = self.logprobs(batch)
            return None if out is None else (*out, None)
        logp, ent, routes = self._whole(batch, None, self.cfg.rollout.temperature, record=True)
        return (logp.cpu(), ent.cpu(), routes.cpu()) if self.rank == 0 else None

    def _backward(self, batch, advantages, old_logp, cfg, routes, old_entropy):
        """Steps 1-3 of an update (the module doc): the batch's loss on every rank and, when any advantage is
        non-zero, its gradient in megatron's gradient buffers."""
        dev = self.device
        mask = batch["completion_mask"][:, 1:].to(dev)
        advantages = advantages.detach().float().to(dev)
        has_signal = bool((advantages != 0).any())
        logp, entropy, _ = self._whole(batch, routes, cfg.rollout.temperature)                  # 1. forward
        loss, lm, token_adv, g = whole_batch_loss(cfg, logp, entropy, advantages, mask,                 # 2. loss
                                                  self.hf_config.vocab_size, old_logp, old_entropy)
        self.last_logp = logp
        if has_signal:                                                                          # 3. backward
            rows, own = self._rows(batch)
            self.ddp.train()
            seed = g[rows]
            seed[own:] = 0.0                    # the padding rows weigh nothing
            self._run(batch, rows, routes, cfg.rollout.temperature, seed=seed)
        return {"loss": float(loss.detach()), "entropy": float(masked_mean(entropy, mask)),
                "adv_abs_token_mean": float(masked_mean(advantages.abs(), mask)), "grad_norm": 0.0,
                "updated": float(has_signal), "routes_replayed": float(routes is not None),
                "token_advantages": token_adv, **{k: float(v) for k, v in lm.items()}}

    def _clip(self, max_norm: float) -> float:
        """The gradient's global norm over every rank's unique pieces (a tensor-parallel replica counted once, a
        data- or expert-data-parallel replica once), and every piece scaled as ``clip_grad_norm_`` scales it."""
        ps = self.ps
        dense = expert = torch.zeros((), dtype=torch.float64, device=self.device)
        for name, p in self.model.named_parameters():
            if is_tied_copy(self.model, name):          # the first stage's embedding counts it
                continue
            sq = p.grad.double().pow(2).sum()
            if ".mlp.experts." in name:
                expert = expert + sq
            elif tp_part(name)[0] is not None or self.tp_rank == 0:
                dense = dense + sq
        edp = ps.get_expert_data_parallel_world_size()
        total = dense / self.dp + expert / edp
        if self.world > 1:
            dist.all_reduce(total)
        norm = float(total.sqrt())
        coef = min(max_norm / (norm + 1e-6), 1.0)
        for p in self.model.parameters():
            p.grad.mul_(coef)
        return norm

    def update(self, batch, advantages, old_logp, cfg, routes=None, old_entropy=None) -> dict[str, float] | None:
        """One AdamW step on ``cfg.loss`` through :func:`compass.rl.algos.losses.policy_loss`, as the torch
        trainer takes it. ``advantages`` ``[B, L-1]``; a loss that only accepts ``[B]`` gets the per-sequence mean
        over completion tokens (metric ``token_advantages`` 0). No signal (all advantages 0): forward only, no
        step (``updated`` 0). ``old_entropy`` ``[B, L-1]``: the sampling policy's entropy for ESPO's clip (None:
        this forward's). Metrics on rank 0, None elsewhere."""
        m = self._backward(batch, advantages, old_logp, cfg, routes, old_entropy)
        if m["updated"]:                                                                       # 4. step
            m["grad_norm"] = self.apply_gradients(cfg.trainer.max_grad_norm, cfg.trainer.lr, cfg.trainer.weight_decay)
        return m if self.rank == 0 else None

    def apply_gradients(self, max_norm: float, lr: float, weight_decay: float) -> float:
        """One AdamW step on the gradients megatron's DDP reduced into its buffers, clipped to ``max_norm`` over
        all ranks (:meth:`_clip`) -> the norm before clipping."""
        for p in self.model.parameters():
            p.grad = p.main_grad.to(p.dtype)
        norm = self._clip(max_norm)
        self.optimizer.step(lr, weight_decay)
        self.steps += 1
        return norm

    def gradients(self, batch, advantages, old_logp, cfg, routes=None, old_entropy=None):
        """The batch's whole gradient (before clipping) under Hugging Face names on rank 0, None elsewhere; no
        step is taken (tests compare parallel sizes with it)."""
        self.ddp.zero_grad_buffer()             # no signal, no backward: zeros, not the last update's
        self._backward(batch, advantages, old_logp, cfg, routes, old_entropy)
        grads = {n.removeprefix("module."): (p.main_grad if getattr(p, "main_grad", None) is not None
                                             else torch.zeros_like(p)) for n, p in self.model.named_parameters()}
        full = gather_full_state(self.model, self.tcfg, grads)
        self.ddp.zero_grad_buffer()
        return megatron_to_hf(full, self.hf_config) if self.rank == 0 else None

    def adam_held(self) -> dict[str, int]:
        """What of this rank's AdamW state it holds (:meth:`compass.lm.megatron_optimizer.RankOptimizer.held`)."""
        return self.optimizer.held()

    def pre_step_logprobs(self):
        return None if self.rank != 0 or self.last_logp is None else self.last_logp.cpu()

    # -- weights and resume --------------------------------------------------------------

    def megatron_state(self) -> dict[str, torch.Tensor] | None:
        """The full megatron weights (TP = PP = EP = 1 names) on rank 0, None elsewhere; every rank takes part."""
        return gather_full_state(self.model, self.tcfg)

    def hf_state_dict(self) -> dict[str, torch.Tensor] | None:
        full = self.megatron_state()
        return megatron_to_hf(full, self.hf_config) if self.rank == 0 else None

    def _adam_local(self) -> dict[str, dict[str, torch.Tensor]]:
        """This rank's AdamW moments by local parameter name, on the CPU, for :func:`gather_full_state` (zeros before
        the first step; sharded, each reduced from its owner: every rank takes part)."""
        return self.optimizer.moments()

    def state_dict(self) -> dict | None:
        """The full weights and Adam moments under the full megatron names on rank 0 (None elsewhere): loads at
        any parallel sizes."""
        model = self.megatron_state()
        moments = {k: gather_full_state(self.model, self.tcfg, v) for k, v in self._adam_local().items()}
        if self.rank != 0:
            return None
        return {"model": model, "adam": moments, "steps": self.steps,
                "sizes": {"tensor_parallel": self.sizes.tp, "pipeline_parallel": self.sizes.pp,
                          "expert_parallel": self.sizes.ep, "ranks": self.world}}

    def load_state_dict(self, state: dict) -> None:
        """A gathered state (:meth:`state_dict`), saved at any parallel sizes; each rank loads its shards."""
        if "adam" not in state:
            raise ValueError("megatron trainer: this state has no gathered Adam moments ('adam'): it was saved by "
                             "the one-process trainer before parallel ranks; run the stage again without it (remove "
                             "the stage run's folder under COMPASS_STATE_DIR)")
        load_full_state(self.model, state["model"], self.tcfg)
        self.steps = int(state["steps"])
        self.optimizer.load(self.local_cuts({k: state["adam"][k] for k in ("exp_avg", "exp_avg_sq")})
                            if self.steps else {}, self.steps)

    def local_cuts(self, full: dict[str, dict[str, torch.Tensor]]) -> dict[str, dict[str, torch.Tensor]]:
        """``full`` (kind -> {full model name: tensor}, e.g. AdamW's moments) -> {local name: {kind: this rank's
        cut}}."""
        out = {}
        for name, _ in self.model.named_parameters():
            dim, part, parts = tp_part(name)
            src = source_name(self.model, name, self.tcfg)
            out[name] = {k: cut(v[src], dim, part, parts, gated_fc1(name, self.tcfg)) for k, v in full.items()}
        return out

    def pid(self) -> int:
        import os
        return os.getpid()


@register_trainer_backend("megatron")
class MegatronTrainer(RankedTrainer):
    """The controller's handle on the megatron ranks (:class:`compass.rl.trainer.ranked.RankedTrainer`)."""

    name = "megatron"

    def __init__(self, model, cfg, *, aux_loss_coeff: float = 0.0):
        from compass.lm.model_payload import model_payload
        s = _settings(cfg)
        if s.ranks == 1:                    # in this process: no Ray, no port
            self._in_process(MegatronRank(model, cfg, aux_loss_coeff=aux_loss_coeff))
            return
        ParallelSizes(s.tensor_parallel, s.pipeline_parallel, s.expert_parallel).check(s.ranks, model.config)
        self._on_ray(functools.partial(MegatronRank, aux_loss_coeff=aux_loss_coeff), (model_payload(model), cfg), s,
                     backend="gloo" if not s.gpus_per_rank else "auto",
                     what=f"megatron trainer ({s.ranks} ranks: tensor {s.tensor_parallel}, pipeline "
                          f"{s.pipeline_parallel}, expert {s.expert_parallel})")

    @property
    def n_moe_layers(self) -> int:
        return self._attribute("n_moe_layers")

    def logprobs_with_routes(self, batch):
        return self._call("logprobs_with_routes", batch)

    def record_routes(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The experts megatron's routers pick freely: ``[B, L, n_moe, k]`` long (None for a dense model)."""
        return self.logprobs_with_routes(batch)[2]


__all__ = ["MegatronRank", "MegatronTrainer", "attention_mask_4d"]
