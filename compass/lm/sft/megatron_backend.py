"""The ``megatron`` SFT backend: the supervised loss on a megatron-core ``GPTModel`` (TP = PP = EP = 1).

The same model the RL engine's megatron trainer trains (:mod:`compass.rl.trainer.megatron_trainer`):
the HF Qwen3-MoE checkpoint converted exactly with :mod:`compass.lm.megatron_convert`, one
process (gloo on loopback), megatron's CUDA-only calls mapped to the CPU where there is no GPU.
:meth:`MegatronSFT.write_back` converts the trained weights back into the HF model (exact), so
the stage saves the same kind of checkpoint whichever backend trained it.

Packing: samples share a row under a causal, same-sample mask (:func:`compass.lm.sft.packing.segment_mask`).
Megatron's RoPE always uses positions ``0..S-1`` of the row, not the per-sample restart the
native forward uses; within one sample both differ by a constant offset, and RoPE attention
scores depend only on the relative position, so the loss is the per-sample loss (up to float
rounding; ``tests/compass/lm/sft/test_megatron_backend.py`` checks it against transformers at 1e-5).
Without packing, each sample gets its own right-padded row.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from compass.lm.sft.packing import IGNORE, PackedRow, pack_samples, segment_mask, to_tensors
from compass.lm.sft.losses import Sample, SFTBackend


def one_sample_rows(samples: list[Sample]) -> list[PackedRow]:
    """Each sample alone in its row (the unpacked layout)."""
    rows = []
    for i, (ids, labels) in enumerate(samples):
        row = PackedRow()
        row.add(i, ids, labels)
        rows.append(row)
    return rows


class MegatronSFT(SFTBackend):
    """Holds the megatron model converted from ``hf_model``; ``self(samples)`` is the summed loss.

    ``hf_model`` is read at construction and written only by :meth:`write_back`. The logits are
    computed at every position of the rows (megatron's output layer), then the loss is taken at the
    supervised ones: at a real vocabulary and long rows that is the memory peak (a chunked head is
    not done).
    """

    def __init__(self, hf_model, pad_id: int, *, packing: bool, pack_len: int | None, seed: int = 0):
        from compass.lm.megatron_convert import megatron_config_from_hf, megatron_from_hf, unsupported
        from compass.lm.megatron_convert import init_single_process
        why = unsupported(hf_model.config)
        if why is not None:
            raise ValueError(f"sft backend 'megatron' cannot train this model: {why}; use backend: torch")
        init_single_process(seed)
        self.hf_model, self.pad_id = hf_model, pad_id
        self.packed, self.pack_len = packing, pack_len
        self.fallback_reason = None
        # No load-balancing loss: the torch SFT paths train on the LM loss alone.
        self.tcfg = megatron_config_from_hf(hf_model.config, aux_loss_coeff=0.0, routing_replay=False)
        self.module, self.device = megatron_from_hf(hf_model, self.tcfg)

    @property
    def mode(self) -> str:
        return "packed" if self.packed else "padded"

    def __call__(self, samples: list[Sample]) -> tuple[torch.Tensor, dict]:
        """Summed cross-entropy over the supervised tokens of ``samples`` -> (loss sum, counts)."""
        if self.packed:
            rows = pack_samples(samples, self.pack_len or max(len(ids) for ids, _ in samples))
        else:
            rows = one_sample_rows(samples)
        t = to_tensors(rows, self.pad_id)
        ids, targets = t["input_ids"].to(self.device), t["targets"].to(self.device)
        R, S = ids.shape
        pos = torch.arange(S, dtype=torch.long, device=self.device).unsqueeze(0).expand(R, S)
        masked = ~segment_mask(t["segments"].to(self.device))                      # megatron: True = masked
        logits = self.module(ids, pos, masked)                                     # [R, S, V]
        sel = targets != IGNORE
        loss = F.cross_entropy(logits[sel].float(), targets[sel], reduction="sum")
        return loss, {"tokens": sum(len(r) for r in rows), "padded_tokens": int(ids.numel()), "rows": len(rows)}

    # -- weights: megatron's tensors (no ``_extra_state``) for resume, HF names for the checkpoint -----

    def state_dict(self) -> dict[str, torch.Tensor]:
        from compass.lm.megatron_convert import megatron_tensor_state
        return {k: v.detach().cpu().clone() for k, v in megatron_tensor_state(self.module).items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        from compass.lm.megatron_convert import copy_megatron_tensors
        copy_megatron_tensors(self.module, state, "megatron sft state")

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        from compass.lm.megatron_convert import hf_weights
        return hf_weights(self.module, self.hf_model.config)

    def write_back(self) -> None:
        """Copy the trained weights into the HF model (every HF tensor must be covered)."""
        hf = self.hf_state_dict()
        missing = sorted(set(self.hf_model.state_dict()) - set(hf))
        if missing:
            raise ValueError(f"megatron sft: no trained weight for {missing[:5]}")
        self.hf_model.load_state_dict(hf, strict=True)
