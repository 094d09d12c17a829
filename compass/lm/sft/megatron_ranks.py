"""The ``megatron`` SFT backend on ranks: one rank of an SFT run whose model is a megatron-core ``GPTModel`` split by
megatron's tensor, pipeline, expert and data parallelism (``ranks`` > 1; one process uses
:mod:`compass.lm.sft.megatron_backend`).

Each rank is a :class:`compass.rl.trainer.megatron_trainer.MegatronRank` — the RL engine's megatron rank, so the
shards, megatron's ``DistributedDataParallel``, its pipeline schedule, the gradient clip over all ranks and the
gathered states are the ones the megatron RL trainer uses and tests. What SFT adds is the loss: the summed
cross-entropy of the supervised tokens divided by the step's supervised-token count, i.e. ``sum(logp * seed)``
with ``seed = -1 / n_sup`` at every supervised position, back-propagated through megatron's schedule in one pass.

A step's samples (every micro-batch of the loop's step) are laid out as the one-process backend lays them —
packed per micro-batch under a same-sample causal mask, or one sample per row — and become one batch; megatron's
schedule splits each data-parallel rank's rows into ``grad_accum_steps`` micro-batches (``micro_batch_tokens``
does not apply here). The loss is a sum, so the update is the one-process update up to the order of float
additions.

States keep the one-process layout (the full megatron weights under their TP = PP = EP = 1 names, AdamW's state
keyed by those names), so a state saved at one set of sizes resumes at any other, or in one process.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.distributed as dist

from compass.lm.sft.losses import Sample, supervised_count
from compass.lm.sft.megatron_backend import one_sample_rows
from compass.lm.sft.packing import IGNORE, pack_samples, to_tensors


def rows_batch(groups: list[list[Sample]], pad_id: int, packing: bool, pack_len: int | None) -> tuple[dict, dict]:
    """The samples of ``groups`` (each packed on its own, or one sample per row) as one right-padded batch:
    ``input_ids``, ``attention_mask``, ``segments`` ``[R, S]`` and ``supervised`` ``[R, S-1]`` (position t
    predicts token t+1 of its own sample, which has a label) -> (batch, counts)."""
    rows, padded = [], 0
    for samples in groups:
        part = (pack_samples(samples, pack_len or max(len(ids) for ids, _ in samples)) if packing
                else one_sample_rows(samples))
        rows += part
        padded += len(part) * max(len(r) for r in part)     # as one process pads each micro-batch
    t = to_tensors(rows, pad_id)
    ids, targets = t["input_ids"], t["targets"][:, :-1]
    supervised = targets != IGNORE
    if not bool((targets[supervised] == ids[:, 1:][supervised]).all()):
        raise ValueError("megatron sft: a label differs from the token it stands at; SFT labels are the ids "
                         "themselves where the loss applies, -100 elsewhere")
    batch = {"input_ids": ids, "attention_mask": (t["segments"] >= 0).long(), "segments": t["segments"],
             "supervised": supervised}
    return batch, {"tokens": sum(len(r) for r in rows), "padded_tokens": padded}


class MegatronSFTRank:
    """One rank (see the module doc); every rank runs every call, rank 0 answers (None elsewhere).

    ``payload``: the HF model (``compass.lm.model_payload``); ``options``: the SFT loop's options (lr,
    weight_decay, grad_clip, packing, pack_len, seed); ``sizes``: tensor_parallel, pipeline_parallel,
    expert_parallel and micro_batches."""

    def __init__(self, payload: dict, pad_id: int, options: dict, sizes: dict):
        from compass.lm.model_payload import model_from_payload
        from compass.rl.config import MegatronTrainerSettings
        from compass.rl.trainer.megatron_trainer import MegatronRank
        self.pad_id, self.packing, self.pack_len = pad_id, options["packing"], options["pack_len"]
        self.grad_clip, self.weight_decay = options["grad_clip"], options["weight_decay"]
        self.micro_batches = sizes.get("micro_batches", 1)
        settings = MegatronTrainerSettings(ranks=dist.get_world_size(), **sizes)
        # what MegatronRank reads of an RL config; no router replay is set, so the routers route freely
        cfg = SimpleNamespace(seed=options["seed"], rollout=SimpleNamespace(temperature=1.0),
                              trainer=SimpleNamespace(backend=settings, lr=options["lr"],
                                                      weight_decay=options["weight_decay"]))
        self.m = MegatronRank(model_from_payload(payload), cfg)
        self.rank = self.m.rank

    # -- what the loop reads ----------------------------------------------------------------------
    def info(self) -> dict:
        return {"mode": "packed" if self.packing else "padded", "fallback_reason": None}

    def pid(self) -> int:
        return self.m.pid()

    def train(self) -> None:
        self.m.ddp.train()

    def _own_sum(self, logp: torch.Tensor | None, batch: dict, rows: list[int]) -> torch.Tensor:
        """The summed log-prob of ``rows``' supervised tokens where this rank holds their log-probs (the last
        pipeline stage's first tensor-parallel rank), else 0: summed over the world, each row counts once."""
        total = torch.zeros((), dtype=torch.float64, device=self.m.device)
        if logp is not None and self.m.last_stage and self.m.tp_rank == 0:
            total = (logp.double() * batch["supervised"][rows].to(logp.device)).sum()
        return total

    def _fit_micro_batches(self, batch: dict) -> None:
        """No more schedule micro-batches than a data-parallel rank has rows (packed steps can have few): each one
        short of rows would be a zero-weighted row run for nothing."""
        rows_per_rank = -(-batch["input_ids"].shape[0] // self.m.dp)
        self.m.micro_batches = max(1, min(self.micro_batches, rows_per_rank))

    # -- one optimizer step ----------------------------------------------------------------------
    def step(self, micro_batches: list[list[Sample]], lr: float, n_sup: int) -> dict | None:
        """One AdamW step, loss = summed cross-entropy / ``n_sup`` -> {loss_sum, tokens, padded_tokens} (rank 0)."""
        m = self.m
        batch, counts = rows_batch(micro_batches, self.pad_id, self.packing, self.pack_len)
        self._fit_micro_batches(batch)
        rows, own = m._rows(batch)
        seed = torch.zeros(len(rows), batch["input_ids"].shape[1] - 1, device=m.device)
        seed[:own] = -batch["supervised"][rows[:own]].float().to(m.device) / n_sup
        m.ddp.train()
        logp, _, _ = m._run(batch, rows, None, 1.0, seed=seed)           # forward and backward, one pass
        loss_sum = -self._own_sum(None if logp is None else logp[:own], batch, rows[:own])
        if m.world > 1:
            dist.all_reduce(loss_sum)
        m.apply_gradients(self.grad_clip, lr, self.weight_decay)
        return None if self.rank else {"loss_sum": float(loss_sum), **counts}

    def heldout_loss(self, samples: list[Sample], chunk: int = 64) -> float | None:
        """Token-mean loss over every supervised token of ``samples``, no gradient (rank 0)."""
        total = 0.0
        for i in range(0, len(samples), chunk):
            batch, _ = rows_batch([samples[i:i + chunk]], self.pad_id, self.packing, self.pack_len)
            self._fit_micro_batches(batch)
            logp, _, _ = self.m._whole(batch, None, 1.0)         # the whole batch's [R, S-1] on every rank
            total -= float((logp.double() * batch["supervised"].to(logp.device)).sum())
        self.m.ddp.train()
        return None if self.rank else total / max(supervised_count(samples), 1)

    # -- states: the one-process layout ------------------------------------------------------------
    def state(self) -> dict | None:
        """{model, optimizer, torch_rng}: the full megatron weights and AdamW's state under the full model's
        names (rank 0; every rank takes part)."""
        gathered = self.m.state_dict()          # the megatron trainer's gathered state, in an optimizer's layout
        if self.rank:
            return None
        names, adam, steps = list(gathered["model"]), gathered["adam"], gathered["steps"]
        state = {} if steps == 0 else {
            n: {"step": torch.tensor(float(steps)), "exp_avg": adam["exp_avg"][n], "exp_avg_sq": adam["exp_avg_sq"][n]}
            for n in names}
        return {"model": gathered["model"],
                "optimizer": {"state": state, "param_groups": [{**self.m.optimizer.hyper(), "params": names}]},
                "torch_rng": torch.get_rng_state()}

    def load(self, state: dict) -> None:
        """A state of :meth:`state`, or of the one-process megatron backend; each rank cuts its shards."""
        torch.set_rng_state(state["torch_rng"])
        saved = state["optimizer"]["state"]         # full name -> {step, exp_avg, exp_avg_sq}; empty before a step
        steps = int(next(iter(saved.values()))["step"]) if saved else 0
        self.m.load_state_dict({"model": state["model"], "steps": steps,
                                "adam": {k: {n: st[k] for n, st in saved.items()} for k in ("exp_avg", "exp_avg_sq")}})

    def finish(self) -> dict | None:
        """The trained weights under HF names (rank 0), for the training process's model."""
        return self.m.hf_state_dict()


def megatron_rank_worker(payload: dict, pad_id: int, options: dict, sizes: dict) -> MegatronSFTRank:
    """What each rank of :class:`compass.lm.sft.worker.SFTRanks` holds with ``backend: megatron``."""
    return MegatronSFTRank(payload, pad_id, options, sizes)


__all__ = ["MegatronSFTRank", "megatron_rank_worker", "rows_batch"]
