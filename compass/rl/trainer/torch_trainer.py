"""The ``torch`` trainer backend: the HF policy itself, AdamW, the registered losses.

Router Replay: with ``routes`` every MoE router is driven by
``compass.rl.router_replay.replay_routes`` for the old-log-prob recompute and
for the update's forward and backward.
"""
from __future__ import annotations

import contextlib

import torch

from compass.lm.device import activation_checkpointing, autocast, compute_dtype, resolve_device, to_device
from compass.lm.model_config import is_moe
from compass.lm.policy_forward import token_logprobs
from compass.rl.algos.losses import masked_mean, policy_loss
from compass.rl.trainer.base import TrainerBackend, register_trainer_backend


def _replay(model, routes):
    if routes is None:
        return contextlib.nullcontext()
    from compass.rl.router_replay import replay_routes
    return replay_routes(model, routes)


def token_micro_batches(attention_mask: torch.Tensor, max_tokens: int) -> list[list[int]]:
    """Consecutive rows of a right-padded ``[B, L]`` batch in groups whose padded size (rows x the group's
    longest row) is at most ``max_tokens``; a row longer than that goes alone."""
    groups: list[list[int]] = []
    cur: list[int] = []
    width = 0
    for i, n in enumerate(attention_mask.sum(1).tolist()):
        if cur and max(width, n) * (len(cur) + 1) > max_tokens:
            groups.append(cur)
            cur, width = [], 0
        cur.append(i)
        width = max(width, n)
    if cur:
        groups.append(cur)
    return groups


def _rows(batch: dict, routes, idx: list[int]):
    """Rows ``idx`` of the batch cut to their longest row (right padding: nothing real is cut), and their routes."""
    width = int(batch["attention_mask"][idx].sum(1).max())
    sub = {k: v[idx, :width] for k, v in batch.items()}
    return sub, None if routes is None else routes[idx, :width], width


def policy_step(model, optimizer, batch, advantages, cfg, *, old_logp=None, routes=None, old_entropy=None,
                sink: dict | None = None, amp: tuple | None = None,
                micro_batch_tokens: int | None = None) -> dict[str, float]:
    """One policy-gradient step of the loss ``cfg.loss`` on a :func:`~compass.rl.trainer.batch.build_batch` batch.

    ``advantages`` ``[B, L-1]`` (per token); ``old_logp`` ``[B, L-1]``, or None for the
    detached log-probs of this same forward (a single update per batch: ratio 1).
    ``old_entropy`` ``[B, L-1]``: the sampling policy's token entropy, which ESPO's clip is defined on
    (its eq. (6)); None: this forward's, which is the same on a batch's first mini-batch only.
    When every advantage is 0 there is no signal: the forward runs (for the entropy
    metric) but no backward or optimizer step (``updated`` 0). ``sink``, when given, gets
    ``"logp"``: this forward's detached log-probs ``[B, L-1]`` (the pre-step policy's). ``amp``:
    ``(device, dtype)`` the forward runs under (:func:`compass.lm.device.autocast`; None: as it is).
    Every tensor given lies on the model's device.

    ``micro_batch_tokens``: when the batch's padded size is larger, its rows go through the model in
    micro-batches of at most that many tokens (:func:`token_micro_batches`), with the gradients
    accumulated for one optimizer step: the activations of one micro-batch are alive at a time. Exact for
    every loss, whatever it aggregates over the batch (sequence means, ESPO's entropy groups): a first pass
    without gradients gives the whole batch's log-probs, the loss is taken on them as usual and
    differentiated with respect to them alone, then each micro-batch's forward is run again and
    back-propagates its rows' share of that gradient (the chain rule, one extra forward per step).
    """
    model.train()
    if micro_batch_tokens is not None:
        groups = token_micro_batches(batch["attention_mask"], micro_batch_tokens)
        if len(groups) > 1:
            return _policy_step_micro(model, optimizer, batch, advantages, cfg, groups, old_logp=old_logp,
                                      routes=routes, old_entropy=old_entropy, sink=sink, amp=amp)
    mask = batch["completion_mask"][:, 1:]
    advantages = advantages.detach().float()
    has_signal = bool((advantages != 0).any())
    grad_norm = 0.0
    forward_ctx = autocast(*amp) if amp is not None else contextlib.nullcontext()
    with torch.set_grad_enabled(has_signal), _replay(model, routes):
        with forward_ctx:                      # the backward runs outside autocast, as torch recommends
            logp, entropy = token_logprobs(model, batch["input_ids"], batch["attention_mask"],
                                           cfg.rollout.temperature, only=mask)
        old = logp.detach() if old_logp is None else old_logp.detach()
        ent = entropy if old_entropy is None else old_entropy
        loss, lm, _ = policy_loss(cfg.loss.kind, logp, old, advantages, mask, entropy=ent.detach(),
                                  vocab_size=model.config.vocab_size, settings=cfg.loss.model_dump(exclude={"kind"}))
        if sink is not None:
            sink["logp"] = logp.detach()
        if has_signal:
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
    if has_signal:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.trainer.max_grad_norm))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        return {"loss": float(loss.detach()), "entropy": float(masked_mean(entropy.detach(), mask)),
                "adv_abs_token_mean": float(masked_mean(advantages.abs(), mask)), "grad_norm": grad_norm,
                "updated": float(has_signal), **{k: float(v) for k, v in lm.items()}}


def _policy_step_micro(model, optimizer, batch, advantages, cfg, groups, *, old_logp, routes, old_entropy, sink,
                       amp) -> dict[str, float]:
    """:func:`policy_step` over row groups with gradient accumulation (see its docstring)."""
    mask = batch["completion_mask"][:, 1:]
    advantages = advantages.detach().float()
    has_signal = bool((advantages != 0).any())
    forward_ctx = (lambda: autocast(*amp)) if amp is not None else contextlib.nullcontext
    temperature = cfg.rollout.temperature
    # pass 1, no gradients: the whole batch's log-probs and entropies, one micro-batch at a time
    logp = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    entropy = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    parts = [(idx, *_rows(batch, routes, idx)) for idx in groups]         # views: each group cut once
    with torch.no_grad():
        for idx, sub, sub_routes, width in parts:
            with _replay(model, sub_routes), forward_ctx():
                lp, en = token_logprobs(model, sub["input_ids"], sub["attention_mask"], temperature,
                                        only=sub["completion_mask"][:, 1:])
            logp[idx, :width - 1], entropy[idx, :width - 1] = lp, en
    # the loss on the whole batch, through a leaf: its gradient with respect to every token's log-prob
    leaf = logp.clone().requires_grad_(has_signal)
    old = logp if old_logp is None else old_logp.detach()
    ent = entropy if old_entropy is None else old_entropy
    with torch.set_grad_enabled(has_signal):
        loss, lm, _ = policy_loss(cfg.loss.kind, leaf, old, advantages, mask, entropy=ent.detach(),
                                  vocab_size=model.config.vocab_size, settings=cfg.loss.model_dump(exclude={"kind"}))
    if sink is not None:
        sink["logp"] = logp
    grad_norm = 0.0
    if has_signal:
        (g,) = torch.autograd.grad(loss, leaf)
        optimizer.zero_grad(set_to_none=True)
        # pass 2: each micro-batch again, with gradients; its rows' share of dL/dlogp flows back through it
        for idx, sub, sub_routes, width in parts:
            with _replay(model, sub_routes):
                with forward_ctx():
                    lp, _ = token_logprobs(model, sub["input_ids"], sub["attention_mask"], temperature,
                                           only=sub["completion_mask"][:, 1:])
                (lp * g[idx, :width - 1]).sum().backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.trainer.max_grad_norm))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {"loss": float(loss.detach()), "entropy": float(masked_mean(entropy, mask)),
            "adv_abs_token_mean": float(masked_mean(advantages.abs(), mask)), "grad_norm": grad_norm,
            "updated": float(has_signal), **{k: float(v) for k, v in lm.items()}}


@register_trainer_backend("torch")
class TorchTrainer(TrainerBackend):
    name = "torch"
    updates_model_in_place = True

    def __init__(self, model, cfg):
        # the HF model moves to the configured device (in place: an in-process rollout that shares it follows)
        self.device = resolve_device(cfg.trainer.backend.device)
        self.amp = compute_dtype(self.device, cfg.trainer.backend.precision)
        self.micro_batch_tokens = cfg.trainer.backend.micro_batch_tokens
        self.checkpointing = cfg.trainer.backend.activation_checkpointing
        self.model = model.to(self.device)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.trainer.lr, weight_decay=cfg.trainer.weight_decay)
        self.steps = 0
        self.temperature = cfg.rollout.temperature
        self.last = {}              # the last update's pre-step log-probs ("logp" [B, L-1]): the mismatch metric

    def _on_device(self, batch, *tensors):
        """The engine's CPU tensors on the trainer's device (the very same tensors when that is the CPU)."""
        return to_device(batch, self.device), *(None if t is None else t.to(self.device) for t in tensors)

    @torch.no_grad()
    def logprobs(self, batch, routes=None):
        batch, routes = self._on_device(batch, routes)
        was_training = self.model.training
        self.model.eval()
        with _replay(self.model, routes), autocast(self.device, self.amp):
            logp, ent = token_logprobs(self.model, batch["input_ids"], batch["attention_mask"], self.temperature,
                                       only=batch["completion_mask"][:, 1:])
        self.model.train(was_training)
        return logp.cpu(), ent.cpu()

    def logprobs_with_routes(self, batch):
        """Free routing; on a MoE model, the routes its routers chose, recorded by hooks (transformers' forward)."""
        if not is_moe(self.model.config):
            return (*self.logprobs(batch, None), None)
        from compass.rl.router_replay import record_routes
        with record_routes(self.model) as rec:
            logp, ent = self.logprobs(batch, None)
        return logp, ent, rec.routes().cpu()

    def pre_step_logprobs(self):
        logp = self.last.get("logp")
        return None if logp is None else logp.cpu()

    def update(self, batch, advantages, old_logp, cfg, routes=None, old_entropy=None) -> dict[str, float]:
        """One AdamW step on ``cfg.loss``; no step (``updated`` 0) when every advantage is 0."""
        self.last = {}
        batch, advantages, old_logp, routes, old_entropy = self._on_device(batch, advantages, old_logp, routes,
                                                                           old_entropy)
        with activation_checkpointing(self.model, self.checkpointing):
            m = policy_step(self.model, self.optimizer, batch, advantages, cfg, old_logp=old_logp, routes=routes,
                            old_entropy=old_entropy, sink=self.last, amp=(self.device, self.amp),
                            micro_batch_tokens=self.micro_batch_tokens)
        self.steps += int(m["updated"])
        return m

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach() for k, v in self.model.state_dict().items()}

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.steps = int(state["steps"])

