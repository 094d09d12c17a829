"""The controller half of a trainer whose ranks hold the model (``fsdp``, ``megatron``): one rank in this
process, or N Ray actors in a :class:`compass.dist.rank_group.RankGroup`. Each protocol call runs on every rank;
rank 0 answers."""
from __future__ import annotations

import torch

from compass.rl.algos.losses import policy_loss
from compass.rl.trainer.base import TrainerBackend


def whole_batch_loss(cfg, logp: torch.Tensor, entropy: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                     vocab_size: int, old_logp: torch.Tensor | None = None, old_entropy: torch.Tensor | None = None):
    """Step 2 of a ranked update: ``cfg.loss`` (:func:`compass.rl.algos.losses.policy_loss`) on the whole batch's
    log-probs and entropies ``[B, L-1]`` (the same on every rank), and, when any advantage is non-zero, its
    gradient with respect to every token's log-prob ``[B, L-1]``: the seed each rank back-propagates through its
    own rows, exact whatever the loss aggregates over the batch. ``old_logp`` None: this forward's (ratio 1);
    ``old_entropy`` None: this forward's. -> (loss, the loss's metrics, its token_advantages flag, gradient or
    None)."""
    has_signal = bool((advantages != 0).any())
    leaf = logp.clone().requires_grad_(has_signal)
    old = logp if old_logp is None else old_logp.detach().float().to(logp.device)
    ent = entropy if old_entropy is None else old_entropy.float().to(logp.device)
    with torch.set_grad_enabled(has_signal):
        loss, lm, token_adv = policy_loss(cfg.loss.kind, leaf, old, advantages, mask, entropy=ent.detach(),
                                          vocab_size=vocab_size, settings=cfg.loss.model_dump(exclude={"kind"}))
    grad = torch.autograd.grad(loss, leaf)[0] if has_signal else None
    return loss, lm, token_adv, grad


class RankedTrainer(TrainerBackend):
    """Holds either ``_local`` (a rank object in this process) or ``group`` (its ranks on Ray); a subclass's
    ``__init__`` makes one of them with :meth:`_in_process` or :meth:`_on_ray`."""

    updates_model_in_place = False          # the ranks train their own copies
    name = "ranked"

    def _in_process(self, rank) -> None:
        self.ranks, self.group, self._local = 1, None, rank

    def _on_ray(self, factory, args: tuple, settings, *, backend: str, what: str) -> None:
        """``settings``: the backend's :class:`compass.rl.config.RankSettings` (ranks, bundle, placement, threads)."""
        from compass.dist.rank_group import RankGroup
        self.ranks, self._local = settings.ranks, None
        bundle = {"CPU": settings.cpus_per_rank, "GPU": settings.gpus_per_rank}
        self.group = RankGroup(factory, args, world_size=settings.ranks, bundle=bundle, strategy=settings.placement,
                               threads=settings.threads_per_rank, backend=backend, what=what)

    @property
    def restarts(self) -> int:
        return 0 if self.group is None else self.group.restarts

    @property
    def on_ray(self) -> bool:
        """Ranks in Ray actors: a rank's death is a RankDied, and :meth:`restart` builds a new group."""
        return self.group is not None

    def restart(self) -> None:
        if self.group is None:
            raise RuntimeError(f"{self.name} trainer: one in-process rank has nothing to restart")
        self.group.restart()

    def _call(self, method: str, *args):
        if self._local is not None:
            return getattr(self._local, method)(*args)
        return self.group.call(method, *args)[0]

    def _attribute(self, name: str):
        return getattr(self._local, name) if self._local is not None else \
            self.group.call("__getattribute__", name)[0]

    def logprobs(self, batch, routes=None):
        return self._call("logprobs", batch, routes)

    def update(self, batch, advantages, old_logp, cfg, routes=None, old_entropy=None) -> dict[str, float]:
        return self._call("update", batch, advantages, old_logp, cfg, routes, old_entropy)

    def gradients(self, batch, advantages, old_logp, cfg, routes=None, old_entropy=None) -> dict[str, torch.Tensor]:
        """The batch's whole gradient under Hugging Face names, no step (the rank's ``gradients``)."""
        return self._call("gradients", batch, advantages, old_logp, cfg, routes, old_entropy)

    def pre_step_logprobs(self):
        return self._call("pre_step_logprobs")

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        return self._call("hf_state_dict")

    def hf_state_dict_ref(self):
        """With ranks on Ray: rank 0's gathered weights left in Ray's object store, for a rollout pool that takes
        weight refs (its actors read them there; no copy through the controller). None in process."""
        return None if self.group is None else self.group.call_ref("hf_state_dict")

    def state_dict(self) -> dict:
        return self._call("state_dict")

    def load_state_dict(self, state: dict) -> None:
        self._call("load_state_dict", state)

    @property
    def steps(self) -> int:
        return self._attribute("steps")

    def rank_pids(self) -> list[int]:
        """The ranks' process ids (fault-injection tests kill one)."""
        return [self._local.pid()] if self._local is not None else self.group.pids()

    def close(self) -> None:
        if self.group is not None:
            self.group.close()
        self._local = None


__all__ = ["RankedTrainer", "whole_batch_loss"]
