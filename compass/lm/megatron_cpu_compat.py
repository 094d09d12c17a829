"""CPU compatibility shim for megatron-core 0.16.1 (applied only when CUDA is absent).

megatron-core assumes a GPU in a handful of places that a tiny CPU run still
reaches: it allocates buffers on ``torch.cuda.current_device()`` (router
weights, RoPE frequencies, all-gather outputs of the token dispatcher,
attention buffers) and keeps per-parallel-group RNG states with
``torch.cuda.get_rng_state`` / ``manual_seed`` / ``default_generators``
(``tensor_parallel.random``: the RNG tracker used by ``model_parallel_cuda_manual_seed``
and ``get_cuda_rng_tracker().fork()``).

:func:`apply_cpu_compat` maps those calls to the CPU, and nothing else:

- ``torch.cuda.current_device()`` returns ``"cpu"`` (so ``.to(device=...)`` and
  ``torch.empty(..., device=...)`` land on the CPU);
- ``torch.cuda.get_rng_state`` / ``set_rng_state`` / ``manual_seed`` /
  ``manual_seed_all`` / ``synchronize`` act on one dedicated CPU
  ``torch.Generator`` (the "shadow CUDA generator"), and megatron's private
  ``tensor_parallel.random._get_cuda_rng_state`` / ``_set_cuda_rng_state`` read
  and write that same generator. The tracker's forks therefore never touch the
  global CPU RNG. (Dropout on CPU draws from the global CPU RNG; the RL
  trainer runs with dropout 0, so no random op is affected.)
- ``megatron.core.transformer.utils.get_default_causal_mask`` (hard-coded
  ``device="cuda"``; used by the unfused softmax when no mask is passed) builds
  the same upper-triangular mask on the CPU.
- the pipeline schedules (``megatron.core.pipeline_parallel.schedules``) count tokens in a
  ``torch.zeros(..., device="cuda")``: that module sees a ``torch`` whose ``zeros`` puts a
  ``"cuda"`` tensor on the CPU (every other name is torch's own).
- ``LanguageModule.setup_embeddings_and_output_layer`` moves the tied embedding's last-stage copy
  with ``.cuda()`` before the all-reduce that makes it equal to the first stage's: while it runs,
  ``Tensor.cuda`` leaves a tensor where it is.

Separately, :func:`apply_no_te_compat` (called by :func:`apply_cpu_compat` too, on
any machine) defines ``moe_utils.te_general_gemm = None`` when Transformer Engine
is absent: 0.16.1 references that name in the router's gating linear without
defining it, so the plain ``torch.mm`` branch must be selected by hand.

The CUDA part is a no-op when ``torch.cuda.is_available()`` is true, and idempotent.
``torch.cuda.is_available()`` itself is left alone, so other libraries keep
seeing a CPU-only machine.
"""
from __future__ import annotations

import torch

_APPLIED = False
_SHADOW_CUDA_GEN: torch.Generator | None = None


class _TorchOnCpu:
    """``torch`` for a module that makes its tensors with a hard-coded ``device="cuda"``: ``zeros`` on the CPU."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def zeros(*size, device=None, **kw):
        if device == "cuda" or (isinstance(device, torch.device) and device.type == "cuda"):
            device = "cpu"
        return torch.zeros(*size, device=device, **kw)


def cpu_compat_needed() -> bool:
    return not torch.cuda.is_available()


def shadow_generator() -> torch.Generator:
    """The CPU generator that stands in for the CUDA default generator."""
    global _SHADOW_CUDA_GEN
    if _SHADOW_CUDA_GEN is None:
        _SHADOW_CUDA_GEN = torch.Generator(device="cpu")
        _SHADOW_CUDA_GEN.manual_seed(0)
    return _SHADOW_CUDA_GEN


def apply_no_te_compat() -> None:
    """megatron-core 0.16.1 without Transformer Engine: ``moe_utils.te_general_gemm`` is referenced
    by the router's gating linear but only defined when TE imports. Define it as None (the plain
    ``torch.mm`` branch). Needed on any machine without TE, GPU or not; idempotent."""
    from megatron.core.transformer.moe import moe_utils
    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def apply_cpu_compat() -> bool:
    """Patch ``torch.cuda`` and megatron's RNG helpers for a CPU-only run.

    Returns True when the shim is (now or already) active, False when CUDA is
    present and nothing was patched.
    """
    global _APPLIED
    apply_no_te_compat()
    if not cpu_compat_needed():
        return False
    if _APPLIED:
        return True
    gen = shadow_generator()

    def current_device():
        return "cpu"

    def get_rng_state(device="cuda"):
        return gen.get_state()

    def set_rng_state(new_state, device="cuda"):
        gen.set_state(new_state)

    def manual_seed(seed):
        gen.manual_seed(int(seed))

    def synchronize(device=None):
        return None

    torch.cuda.current_device = current_device
    torch.cuda.get_rng_state = get_rng_state
    torch.cuda.set_rng_state = set_rng_state
    torch.cuda.manual_seed = manual_seed
    torch.cuda.manual_seed_all = manual_seed
    torch.cuda.synchronize = synchronize
    torch.cuda.random.get_rng_state = get_rng_state
    torch.cuda.random.set_rng_state = set_rng_state

    from megatron.core.tensor_parallel import random as mrandom

    def _get_cuda_rng_state(device="cuda", clone=False, graph_safe=False):
        return gen.get_state()

    def _set_cuda_rng_state(new_state, device=-1, graph_safe=False):
        gen.set_state(new_state)

    mrandom._get_cuda_rng_state = _get_cuda_rng_state
    mrandom._set_cuda_rng_state = _set_cuda_rng_state

    # the default causal mask of the unfused softmax is built with a hard-coded device="cuda"
    from megatron.core.fusions import fused_softmax
    from megatron.core.transformer import utils as mutils

    def get_default_causal_mask(sq: int) -> torch.Tensor:
        return torch.triu(torch.ones(sq, sq, dtype=torch.bool), diagonal=1)

    mutils.get_default_causal_mask = get_default_causal_mask
    fused_softmax.get_default_causal_mask = get_default_causal_mask

    from megatron.core.pipeline_parallel import schedules
    schedules.torch = _TorchOnCpu()

    from megatron.core.models.common.language_module.language_module import LanguageModule
    setup = LanguageModule.setup_embeddings_and_output_layer

    def setup_embeddings_on_cpu(self):
        cuda = torch.Tensor.cuda
        torch.Tensor.cuda = lambda t, *a, **k: t
        try:
            return setup(self)
        finally:
            torch.Tensor.cuda = cuda

    LanguageModule.setup_embeddings_and_output_layer = setup_embeddings_on_cpu
    _APPLIED = True
    return True
