"""Where a model computes and in what precision: the one place that decides, for every stage.

Settings (each model-holding config carries ``device`` and ``precision``):

- ``device``: ``auto`` (the GPU when torch sees one, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``.
  In a Ray actor given ``num_gpus``, Ray restricts ``CUDA_VISIBLE_DEVICES`` to the actor's GPU, so
  ``auto`` is that GPU.
- ``precision``: ``auto`` (bf16 on a GPU, fp32 on the CPU), ``fp32`` or ``bf16``. bf16 here is mixed
  precision as the peers train: the weights, their gradients and the optimizer state stay fp32 (the
  master copy) and the forward and backward run under ``torch.autocast`` in bf16. On the CPU, ``auto``
  is fp32, so a CPU run computes exactly what it did before these settings existed.
"""
from __future__ import annotations

import contextlib
import re
import torch

from compass.config import DEVICE_PATTERN


def resolve_device(setting: str = "auto") -> torch.device:
    """``setting`` -> the torch device it names; ``auto`` takes the GPU when there is one.

    Raises ValueError, naming the setting, for a malformed value or a GPU that is not there."""
    if not re.match(DEVICE_PATTERN, setting or ""):
        raise ValueError(f"device {setting!r}: expected auto, cpu, cuda or cuda:N")
    if setting == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    dev = torch.device(setting)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {setting!r}: torch sees no GPU here (torch.cuda.is_available() is False); "
                             f"use device: auto or cpu")
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise ValueError(f"device {setting!r}: only {torch.cuda.device_count()} GPU(s) visible")
        dev = torch.device("cuda", index)
    return dev


def compute_dtype(device: torch.device, precision: str = "auto") -> torch.dtype:
    """The dtype the forward computes in: ``auto`` is bf16 on a GPU, fp32 on the CPU."""
    if precision == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if precision == "bf16":
        return torch.bfloat16
    if precision == "fp32":
        return torch.float32
    raise ValueError(f"precision {precision!r}: expected auto, fp32 or bf16")


def autocast(device: torch.device, dtype: torch.dtype):
    """The context the forward (and its backward) runs in: ``torch.autocast`` for bf16, nothing for fp32
    (no autocast at all, so an fp32 run is bit-for-bit what it was)."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


@contextlib.contextmanager
def activation_checkpointing(model, on: bool):
    """Within the block (``on``), the model's training forwards keep each layer's input only and recompute the
    layer in the backward: transformers' own forward (its gradient checkpointing) and the native Qwen3
    forwards (:func:`compass.lm.qwen3_native.checkpointed_layers`). Off: nothing changes."""
    if not on:
        yield
        return
    from compass.lm.qwen3_native import checkpointed_layers
    was = getattr(model, "is_gradient_checkpointing", False)
    hf = not was and getattr(model, "supports_gradient_checkpointing", False)
    use_cache = getattr(model.config, "use_cache", None)
    if hf:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False          # a training forward has no KV cache (transformers warns otherwise)
    try:
        with checkpointed_layers(True):
            yield
    finally:
        if hf:
            model.gradient_checkpointing_disable()
            model.config.use_cache = use_cache


def model_device(model) -> torch.device:
    """The device of a model's first parameter (the one its inputs must go to)."""
    return next(model.parameters()).device


def to_device(batch: dict, device: torch.device) -> dict:
    """A batch (a dict of tensors, and anything else) with every tensor on ``device``; on the device already,
    the very same tensors (no copy)."""
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def place_for_inference(model, device: str = "auto", precision: str = "auto"):
    """Move a model that only generates or scores (evaluation) to ``device``, in its compute dtype (no master
    weights are needed without an optimizer). On the CPU with ``auto`` it stays as it is. Returns the model."""
    dev = resolve_device(device)
    dtype = compute_dtype(dev, precision)
    return model.to(device=dev, dtype=dtype)


@contextlib.contextmanager
def watch_inputs(model):
    """Within the block, every tensor handed to ``model`` or any of its submodules that lies on another device
    than that module's parameters is recorded, as ``"<module>: input on <device>, weights on <device>"`` in the
    yielded list. Tests and ``compass bench gpu`` use it to show a stage hands the model nothing off its device
    (torch would often copy silently or fail late). The native decoder computes on packed weights, not through
    the modules: it is watched by its own tensors' devices."""
    bad: list[str] = []

    def check(module, args, kwargs):
        p = next(module.parameters(recurse=False), None)
        if p is None:
            return
        seen = [*args, *kwargs.values()]
        while seen:
            x = seen.pop()
            if isinstance(x, torch.Tensor):
                if x.device != p.device:
                    bad.append(f"{type(module).__name__}: input on {x.device}, weights on {p.device}")
            elif isinstance(x, (list, tuple)):
                seen.extend(x)
            elif isinstance(x, dict):
                seen.extend(x.values())

    handles = [m.register_forward_pre_hook(check, with_kwargs=True) for m in model.modules()]
    try:
        yield bad
    finally:
        for h in handles:
            h.remove()
