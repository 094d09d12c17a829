"""What the SFT loop computes a loss with: the ``torch`` backend (the HF model, through the packed native
forward or transformers' padded one) and the registry of backends (``megatron``:
:mod:`compass.lm.sft.megatron_backend`). Every loss here is a *sum* over supervised tokens, so pieces of a
batch add up to the whole and ranks add up to one process."""
from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

from compass.lm.chat import collate
from compass.lm.device import model_device, to_device
from compass.lm.policy_forward import split_head
from compass.lm.sft.packing import IGNORE, pack_samples, segment_mask, to_tensors

Sample = tuple[list[int], list[int]]


def split_by_tokens(samples: list[Sample], max_tokens: int | None) -> list[list[Sample]]:
    """Consecutive pieces of a micro-batch whose padded size (samples x the piece's longest sample) is at most
    ``max_tokens`` (a longer sample goes alone); None: the micro-batch whole. The loss is a sum over supervised
    tokens, so the pieces' sums add up to the whole's."""
    if max_tokens is None:
        return [samples]
    pieces: list[list[Sample]] = []
    cur: list[Sample] = []
    width = 0
    for s in samples:
        if cur and max(width, len(s[0])) * (len(cur) + 1) > max_tokens:
            pieces.append(cur)
            cur, width = [], 0
        cur.append(s)
        width = max(width, len(s[0]))
    if cur:
        pieces.append(cur)
    return pieces


def supervised_count(samples: list[Sample]) -> int:
    """Tokens with a loss: positions whose *next* token has a label."""
    return sum(sum(1 for y in labels[1:] if y != IGNORE) for _, labels in samples)


def packed_unsupported(model) -> str | None:
    """Why the packed forward cannot run this model (None: it can)."""
    from compass.lm.qwen3_native import unsupported
    return unsupported(model.config)


def packed_loss_sum(model, samples: list[Sample], pad_id: int, pack_len: int) -> tuple[torch.Tensor, dict]:
    """Summed cross-entropy over the supervised tokens of ``samples``, packed into rows of at most
    ``pack_len`` tokens; each sample attends only to itself (causal AND same-segment mask, positions
    restarting at 0), and the LM head runs only at supervised positions. -> (loss sum, counts)."""
    from compass.lm.qwen3_native import forward_layers, pack
    rows = pack_samples(samples, pack_len)
    t = to_tensors(rows, pad_id)
    w = pack(model)
    dev = w.embed.device
    ids, targets = t["input_ids"].to(dev), t["targets"].to(dev)
    # the model's embedding module, as the RL forward (qwen3_native.shared_prefix_hidden) and transformers embed:
    # indexing the table summed its gradient in a thread-dependent order (one seed, other weights per process)
    x = model.get_input_embeddings()(ids)
    h = forward_layers(w, x, t["positions"].to(dev), segment_mask(t["segments"].to(dev)))
    sel = targets != IGNORE
    logits = h[sel] @ w.lm_head
    loss = F.cross_entropy(logits.float(), targets[sel], reduction="sum")
    return loss, {"tokens": sum(len(r) for r in rows), "padded_tokens": int(ids.numel()), "rows": len(rows)}


def padded_loss_sum(model, samples: list[Sample], pad_id: int) -> tuple[torch.Tensor, dict]:
    """The same sum through transformers' own forward on right-padded rows (one sample per row)."""
    batch = to_device(collate(samples, pad_id), model_device(model))
    labels = batch["labels"][:, 1:]
    sel = labels != IGNORE
    parts = split_head(model)
    if parts is not None:      # the LM head only at supervised positions
        body, head = parts
        hidden = body(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        logits = head(hidden[:, :-1][sel])
    else:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1][sel]
    loss = F.cross_entropy(logits.float(), labels[sel], reduction="sum")
    return loss, {"tokens": int(batch["attention_mask"].sum()), "padded_tokens": int(batch["input_ids"].numel()),
                  "rows": len(samples)}


class SFTBackend:
    """What the training loop needs of a backend besides ``self(samples) -> (loss sum, counts)``:
    ``module`` (the ``nn.Module`` whose parameters the optimizer steps), ``state_dict`` /
    ``load_state_dict`` (the weights, for resume) and ``write_back`` (the result into the HF model)."""

    module: torch.nn.Module

    def parameters(self):
        return self.module.parameters()

    def train(self) -> None:
        self.module.train()

    def eval(self) -> None:
        self.module.eval()

    def state_dict(self) -> dict:
        return self.module.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state)

    def write_back(self) -> None:
        """Nothing to do when ``module`` is the HF model."""


class TorchSFT(SFTBackend):
    """The ``torch`` backend: the HF model itself, through the packed native forward where it applies,
    else transformers' padded one (saying why). ``self(samples)`` -> (loss sum, counts)."""

    def __init__(self, model, pad_id: int, *, packing: bool, pack_len: int | None, logger: logging.Logger | None = None):
        self.model = self.module = model
        self.pad_id, self.pack_len = pad_id, pack_len
        self.fallback_reason = None
        if packing:
            why = packed_unsupported(model)
            if why is not None:
                self.fallback_reason = f"packing off: the native forward does not support this model ({why})"
                if logger:
                    logger.warning("sft: %s; training on padded batches through transformers", self.fallback_reason)
        self.packed = packing and self.fallback_reason is None

    @property
    def mode(self) -> str:
        return "packed" if self.packed else "padded"

    def __call__(self, samples: list[Sample]) -> tuple[torch.Tensor, dict]:
        if self.packed:
            pack_len = self.pack_len or max(len(ids) for ids, _ in samples)
            return packed_loss_sum(self.model, samples, self.pad_id, pack_len)
        return padded_loss_sum(self.model, samples, self.pad_id)


def make_sft_backend(name: str, model, pad_id: int, *, packing: bool, pack_len: int | None,
                     logger: logging.Logger | None = None, seed: int = 0):
    """The trainable for backend ``name``: ``torch`` (the HF model) or ``megatron`` (a megatron-core
    ``GPTModel`` converted from it, :mod:`compass.lm.sft.megatron_backend`)."""
    if name == "torch":
        return TorchSFT(model, pad_id, packing=packing, pack_len=pack_len, logger=logger)
    if name == "megatron":
        from compass.lm.sft.megatron_backend import MegatronSFT
        return MegatronSFT(model, pad_id, packing=packing, pack_len=pack_len, seed=seed)
    raise ValueError(f"unknown sft backend {name!r}; known: torch, megatron")


@torch.no_grad()
def mean_loss(loss_fn: SFTBackend, samples: list[Sample], chunk: int = 64) -> float:
    """Token-mean loss over every supervised token of ``samples`` (no gradient)."""
    total, n = 0.0, 0
    for i in range(0, len(samples), chunk):
        part = samples[i:i + chunk]
        s, _ = loss_fn(part)
        total += float(s)
        n += supervised_count(part)
    return total / max(n, 1)
