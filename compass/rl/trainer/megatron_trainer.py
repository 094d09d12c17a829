"""The ``megatron`` trainer backend: the policy as a megatron-core ``GPTModel`` (TP = PP = EP = 1).

Runs on one process: ``torch.distributed`` with gloo on 127.0.0.1 (world size
1) and megatron's ``parallel_state`` with tensor/pipeline/expert parallel size
1. On a machine without CUDA, :mod:`compass.lm.megatron_cpu_compat` maps
megatron's CUDA-only calls to the CPU first. The HF Qwen3-MoE policy is
converted in with :mod:`compass.lm.megatron_convert`; ``hf_state_dict()``
converts back (exact).

Log-probs are computed like :func:`compass.lm.policy_forward.token_logprobs`:
``logits[:, :-1] / temperature`` -> log-softmax -> gather and entropy, with
position ids ``0..L-1`` (as the HF forward uses) and an explicit attention mask
(causal, pad keys masked).

Router Replay uses megatron's native mechanism: ``TransformerConfig.moe_enable_routing_replay``
gives every ``TopKRouter`` a ``RouterReplay`` instance; this trainer drives its own
instances (one per MoE layer, in layer order) with ``set_target_indices`` and
``RouterReplayAction.REPLAY_FORWARD`` (or ``RECORD`` in :meth:`MegatronTrainer.record_routes`).
In ``REPLAY_FORWARD`` megatron takes the given expert indices and gathers the
current router's scores at them (``probs = softmax(logits.gather(idx))`` for
Qwen3's renormalised top-k), so the router keeps its gradient.
Layout: routes ``[B, L, n_moe, k]`` -> per layer ``routes[:, :, i].transpose(0, 1).reshape(L * B, k)``
(megatron is sequence-first: token ``s * B + b``).
A ``-1`` anywhere in a position's k entries means "route freely": a forward
pre-hook on each router fills that row with the top-k of the *current* router's
logits on the hidden state that actually reaches it (so the fill equals what
free routing would pick in that same forward, after the replayed upstream layers).
"""
from __future__ import annotations

import copy
from contextlib import contextmanager

import torch

from compass.lm.megatron_cpu_compat import apply_cpu_compat
from compass.lm.megatron_convert import (copy_megatron_tensors, hf_weights, init_single_process,
                                        megatron_config_from_hf, megatron_from_hf, megatron_tensor_state)
from compass.rl.algos.losses import masked_mean, policy_loss
from compass.rl.trainer.base import TrainerBackend, register_trainer_backend


# -- helpers ---------------------------------------------------------------------------

def attention_mask_4d(attention_mask: torch.Tensor) -> torch.Tensor:
    """``[B, L]`` 1/0 key mask -> megatron's ``[B, 1, L, L]`` bool mask (True = masked): causal and pad keys."""
    B, L = attention_mask.shape
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool, device=attention_mask.device), diagonal=1)
    return causal[None, None] | ~attention_mask.bool()[:, None, None, :]


@register_trainer_backend("megatron")
class MegatronTrainer(TrainerBackend):
    """A :class:`compass.rl.trainer.base.TrainerBackend` on megatron-core (see the module doc)."""

    name = "megatron"

    def __init__(self, model, cfg, *, aux_loss_coeff: float = 0.0):
        """``model``: the HF Qwen3-MoE policy (its config and weights are read, it is not modified);
        ``cfg``: :class:`compass.rl.config.RLConfig` (seed, trainer.lr, trainer.weight_decay, rollout.temperature)."""
        init_single_process(int(getattr(cfg, "seed", 0)))
        from megatron.core.transformer.moe.router_replay import RouterReplay
        self.cfg = cfg
        self.hf_config = copy.deepcopy(model.config)
        self.tcfg = megatron_config_from_hf(self.hf_config, aux_loss_coeff=aux_loss_coeff, routing_replay=True)
        # CPU here; on a CUDA machine the model goes to the current GPU (that path is untested in CI)
        self.model, self.device = megatron_from_hf(model, self.tcfg)
        self.routers = [layer.mlp.router for layer in self.model.decoder.layers if hasattr(layer.mlp, "router")]
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
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.trainer.lr,
                                           weight_decay=cfg.trainer.weight_decay)
        self.steps = 0                 # optimizer steps taken (updates with signal), like the torch trainer

    # -- router replay ------------------------------------------------------------------

    @property
    def n_moe_layers(self) -> int:
        return len(self.routers)

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

    def _layer_targets(self, routes: torch.Tensor, B: int, L: int) -> list[torch.Tensor]:
        expect = (B, L, self.n_moe_layers, self.topk)
        if tuple(routes.shape) != expect:
            raise ValueError(f"routes must be [B, L, n_moe_layers, top_k] = {expect}, got {tuple(routes.shape)}")
        routes = routes.to(self.device).long()
        if bool((routes >= self.tcfg.num_moe_experts).any()):
            raise ValueError(f"routes name an expert >= num_experts ({self.tcfg.num_moe_experts})")
        # [B, L, n, k] -> per layer [L*B, k], sequence-first like megatron's tokens (s * B + b)
        return [routes[:, :, i, :].transpose(0, 1).reshape(L * B, self.topk).contiguous()
                for i in range(self.n_moe_layers)]

    @contextmanager
    def _routing(self, routes: torch.Tensor | None, B: int, L: int, record: bool = False):
        from megatron.core.transformer.moe.router_replay import RouterReplayAction
        try:
            if record:
                for rp in self.replays:
                    rp.clear_indices()
                    rp.set_router_replay_action(RouterReplayAction.RECORD)
            elif routes is not None:
                self._fill_targets = self._layer_targets(routes, B, L)
                for rp in self.replays:
                    rp.clear_indices()
                    rp.set_router_replay_action(RouterReplayAction.REPLAY_FORWARD)
            yield
        finally:
            self._fill_targets = [None] * len(self.routers)
            for rp in self.replays:
                rp.clear_indices()
                rp.clear_router_replay_action()

    # -- forward ------------------------------------------------------------------------

    def _token_logprobs(self, batch: dict[str, torch.Tensor], temperature: float):
        ids, attn = batch["input_ids"].to(self.device), batch["attention_mask"].to(self.device)
        B, L = ids.shape
        pos = torch.arange(L, dtype=torch.long, device=self.device).unsqueeze(0).expand(B, L)
        logits = self.model(ids, pos, attention_mask_4d(attn))               # [B, L, V]
        logprobs = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
        logp = logprobs.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        entropy = -(logprobs.exp() * logprobs).sum(-1)
        return logp, entropy

    def logprobs(self, batch: dict[str, torch.Tensor],
                 routes: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logp, entropy)`` ``[B, L-1]`` float32, no grad; with ``routes``, replayed (see the module doc)."""
        B, L = batch["input_ids"].shape
        self.model.eval()
        with torch.no_grad(), self._routing(routes, B, L):
            logp, entropy = self._token_logprobs(batch, self.cfg.rollout.temperature)
        dev = batch["input_ids"].device
        return logp.detach().to(dev), entropy.detach().to(dev)

    def logprobs_with_routes(self, batch: dict[str, torch.Tensor]):
        """Free routing with ``RouterReplayAction.RECORD``, in one forward: ``(logp, entropy, routes)``,
        ``routes`` ``[B, L, n_moe, k]`` long (the experts megatron's routers picked, best first)."""
        B, L = batch["input_ids"].shape
        self.model.eval()
        with torch.no_grad(), self._routing(None, B, L, record=True):
            logp, entropy = self._token_logprobs(batch, self.cfg.rollout.temperature)
            rec = [rp.get_recorded_indices() for rp in self.replays]
        routes = torch.stack([r.reshape(L, B, self.topk).transpose(0, 1) for r in rec], dim=2).long()
        dev = batch["input_ids"].device
        return logp.detach().to(dev), entropy.detach().to(dev), routes.to(dev)

    def record_routes(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The experts megatron's routers pick freely: ``[B, L, n_moe, k]`` long."""
        return self.logprobs_with_routes(batch)[2]

    # -- update -------------------------------------------------------------------------

    def update(self, batch: dict[str, torch.Tensor], advantages: torch.Tensor, old_logp: torch.Tensor,
               cfg, routes: torch.Tensor | None = None,
               old_entropy: torch.Tensor | None = None) -> dict[str, float]:
        """One AdamW step on ``cfg.loss`` through :func:`compass.rl.algos.losses.policy_loss`, as the torch
        trainer takes it.

        ``advantages`` ``[B, L-1]``; a loss that only accepts ``[B]`` gets the per-sequence mean over
        completion tokens (metric ``token_advantages`` 0). No signal (all advantages 0): forward
        only, no step (``updated`` 0). ``old_entropy`` ``[B, L-1]``: the sampling policy's entropy for
        ESPO's clip (None: this forward's).
        """
        B, L = batch["input_ids"].shape
        mask = batch["completion_mask"][:, 1:].to(self.device)
        advantages = advantages.detach().float().to(self.device)
        old_logp = old_logp.detach().float().to(self.device)
        has_signal = bool((advantages != 0).any())
        for group in self.optimizer.param_groups:
            group["lr"], group["weight_decay"] = cfg.trainer.lr, cfg.trainer.weight_decay
        self.model.train()
        grad_norm = 0.0
        with self._routing(routes, B, L), torch.set_grad_enabled(has_signal):
            logp, entropy = self._token_logprobs(batch, cfg.rollout.temperature)
            ent = entropy if old_entropy is None else old_entropy.float().to(self.device)
            loss, lm, token_adv = policy_loss(cfg.loss.kind, logp, old_logp, advantages, mask,
                                              entropy=ent.detach(), vocab_size=self.hf_config.vocab_size,
                                              settings=cfg.loss.model_dump(exclude={"kind"}))
            if has_signal:
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.trainer.max_grad_norm))
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.steps += 1
        with torch.no_grad():
            return {"loss": float(loss.detach()), "entropy": float(masked_mean(entropy.detach(), mask)),
                    "adv_abs_token_mean": float(masked_mean(advantages.abs(), mask)), "grad_norm": grad_norm,
                    "updated": float(has_signal), "routes_replayed": float(routes is not None),
                    "token_advantages": token_adv, **{k: float(v) for k, v in lm.items()}}

    # -- weights and resume --------------------------------------------------------------

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        return hf_weights(self.model, self.hf_config)

    def state_dict(self) -> dict:
        return {"model": {k: v.detach().clone() for k, v in megatron_tensor_state(self.model).items()},
                "optimizer": copy.deepcopy(self.optimizer.state_dict()), "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        copy_megatron_tensors(self.model, state["model"])
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self.steps = int(state["steps"])

