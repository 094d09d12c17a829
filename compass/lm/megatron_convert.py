"""Hugging Face Qwen3-MoE and dense Qwen3 <-> megatron-core ``GPTModel``: the config mapping and the weight
conversion. A dense Qwen3 is the same mapping without the MoE rows (every layer a dense MLP).

Config (:func:`megatron_config_from_hf`): one HF ``Qwen3MoeConfig`` gives a
``TransformerConfig`` whose forward is the same function:

=============================  =============================================================
HF (Qwen3-MoE)                 megatron-core 0.16.1
=============================  =============================================================
``hidden_size``                ``hidden_size``
``num_hidden_layers``          ``num_layers``
``num_attention_heads``        ``num_attention_heads``
``num_key_value_heads``        ``num_query_groups`` (GQA)
``head_dim``                   ``kv_channels`` (softmax scale 1/sqrt(head_dim) in both)
``rms_norm_eps``               ``layernorm_epsilon``, ``normalization="RMSNorm"``
q_norm / k_norm (per head)     ``qk_layernorm=True`` (RMSNorm over head_dim, before RoPE)
``rope_parameters.rope_theta``  ``rotary_base``, ``position_embedding_type="rope"``,
                               ``rotary_percent=1``, ``rotary_interleaved=False`` (rotate_half)
SiLU-gated experts             ``gated_linear_unit=True``, ``activation_func=F.silu``
``moe_intermediate_size``      ``moe_ffn_hidden_size``
``intermediate_size``          ``ffn_hidden_size`` (dense layers: ``mlp_only_layers`` /
                               ``decoder_sparse_step`` -> ``moe_layer_freq`` list)
``num_experts``                ``num_moe_experts``
``num_experts_per_tok``        ``moe_router_topk``
softmax -> top-k -> renorm     ``moe_router_score_function="softmax"``,
(``norm_topk_prob=True``)      ``moe_router_pre_softmax=False`` (top-k on the logits, then
                               softmax over the k picked logits = the renormalised top-k
                               probabilities), ``moe_router_topk_scaling_factor=None``
no biases                      ``add_bias_linear=False``, ``add_qkv_bias=False``
``tie_word_embeddings``        ``share_embeddings_and_output_weights`` (no ``output_layer``
                               weight when tied)
router aux loss (RL: off)      ``moe_router_load_balancing_type="none"``, ``moe_aux_loss_coeff=0``
                               (configurable: ``aux_loss_coeff > 0`` -> ``"aux_loss"``)
=============================  =============================================================

``norm_topk_prob=False`` maps to ``moe_router_pre_softmax=True`` (top-k of the full
softmax, not renormalised).

Weights (:func:`hf_to_megatron`, :func:`megatron_to_hf`), per layer ``i``:

- ``q_proj``/``k_proj``/``v_proj`` -> ``self_attention.linear_qkv.weight``, megatron's
  grouped layout: for each KV group g, the rows of its ``H/G`` query heads, then
  key head g, then value head g (``[G * (H/G + 2) * d, hidden]``); HF's GQA maps
  query head h to KV head ``h // (H/G)``, the same grouping.
- ``o_proj`` -> ``self_attention.linear_proj``; ``q_norm``/``k_norm`` ->
  ``q_layernorm``/``k_layernorm``; ``input_layernorm`` -> ``input_layernorm``;
  ``post_attention_layernorm`` -> ``pre_mlp_layernorm``.
- MoE: ``mlp.gate.weight`` -> ``mlp.router.weight``; the fused 3-D
  ``mlp.experts.gate_up_proj[e]`` (``[2I, hidden]``, gate rows then up rows) is
  exactly megatron's ``mlp.experts.local_experts.e.linear_fc1.weight`` (its GLU
  chunks fc1's output into (gate, up)); ``down_proj[e]`` -> ``linear_fc2.weight``
  (``SequentialMLP`` experts: megatron's grouped experts need Transformer Engine).
- dense MLP layers: ``cat(gate_proj, up_proj)`` -> ``mlp.linear_fc1``, ``down_proj`` -> ``mlp.linear_fc2``.
- ``model.embed_tokens`` -> ``embedding.word_embeddings``, ``model.norm`` ->
  ``decoder.final_layernorm``, ``lm_head`` -> ``output_layer``.

Both directions are pure reshapes/concatenations, so the round trip is exact.
"""
from __future__ import annotations

import socket

import torch

from compass.lm.megatron_cpu_compat import apply_cpu_compat


# -- config -----------------------------------------------------------------------

def rope_theta(hf_config) -> float:
    params = getattr(hf_config, "rope_parameters", None) or {}
    if params.get("rope_type", "default") not in ("default", None):
        raise ValueError(f"megatron conversion supports plain RoPE only, got rope_type={params.get('rope_type')!r}")
    theta = params.get("rope_theta", getattr(hf_config, "rope_theta", None))
    if theta is None:
        raise ValueError("HF config has no rope_theta")
    return float(theta)


def moe_layer_pattern(hf_config) -> list[int]:
    """1 for each MoE layer, 0 for each dense-MLP layer (HF Qwen3MoeDecoderLayer's rule)."""
    n = hf_config.num_hidden_layers
    only = set(getattr(hf_config, "mlp_only_layers", None) or [])
    step = getattr(hf_config, "decoder_sparse_step", 1) or 1
    experts = getattr(hf_config, "num_experts", 0) or 0
    return [int(i not in only and experts > 0 and (i + 1) % step == 0) for i in range(n)]


def tied(hf_config) -> bool:
    """The LM head is the embedding matrix (small Qwen3 models): megatron keeps no ``output_layer`` weight."""
    return bool(getattr(hf_config, "tie_word_embeddings", False))


def _check_supported(hf_config) -> None:
    if getattr(hf_config, "model_type", None) not in ("qwen3_moe", "qwen3"):
        raise ValueError(f"megatron conversion supports qwen3_moe and qwen3, got "
                         f"{getattr(hf_config, 'model_type', None)!r}")
    if getattr(hf_config, "attention_bias", False):
        raise ValueError("megatron conversion: attention_bias=True is not supported (add_qkv_bias)")
    if getattr(hf_config, "use_sliding_window", False):
        raise ValueError("megatron conversion: sliding-window attention is not supported")
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise ValueError(f"megatron conversion: hidden_act must be silu, got {hf_config.hidden_act!r}")


def unsupported(hf_config) -> str | None:
    """Why this conversion cannot take ``hf_config`` (None: it can): architecture, RoPE type, layer layout."""
    try:
        _check_supported(hf_config)
        rope_theta(hf_config)
        moe_layer_pattern(hf_config)
    except (ValueError, AttributeError, TypeError) as e:
        return str(e)
    return None


def megatron_config_from_hf(hf_config, *, aux_loss_coeff: float = 0.0, routing_replay: bool = True,
                            init_weights: bool = False, sizes=None):
    """``TransformerConfig`` computing the same forward as the HF Qwen3-MoE config (fp32, no dropout);
    ``sizes`` (:class:`compass.lm.megatron_parallel.ParallelSizes`, default all 1): the parallel sizes."""
    apply_cpu_compat()
    from megatron.core.transformer.transformer_config import TransformerConfig
    _check_supported(hf_config)
    pattern = moe_layer_pattern(hf_config)
    tp, pp, ep = (1, 1, 1) if sizes is None else (sizes.tp, sizes.pp, sizes.ep)
    moe = {}
    if any(pattern):
        moe = dict(
            num_moe_experts=hf_config.num_experts,
            moe_ffn_hidden_size=hf_config.moe_intermediate_size,
            moe_router_topk=hf_config.num_experts_per_tok,
            moe_layer_freq=pattern,
            moe_router_score_function="softmax",
            moe_router_pre_softmax=not bool(hf_config.norm_topk_prob),
            moe_router_topk_scaling_factor=None,
            moe_router_load_balancing_type="aux_loss" if aux_loss_coeff > 0 else "none",
            moe_aux_loss_coeff=float(aux_loss_coeff),
            moe_token_dispatcher_type="allgather",
            moe_grouped_gemm=False,
            moe_enable_routing_replay=routing_replay,
        )
    return TransformerConfig(
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        expert_model_parallel_size=ep,
        pipeline_dtype=torch.float32 if pp > 1 else None,
        # megatron trains MoE layers under TP only with the sequence split across the TP ranks too
        sequence_parallel=tp > 1,
        num_layers=hf_config.num_hidden_layers,
        hidden_size=hf_config.hidden_size,
        num_attention_heads=hf_config.num_attention_heads,
        num_query_groups=hf_config.num_key_value_heads,
        kv_channels=hf_config.head_dim,
        ffn_hidden_size=hf_config.intermediate_size,
        normalization="RMSNorm",
        layernorm_epsilon=hf_config.rms_norm_eps,
        qk_layernorm=True,
        gated_linear_unit=True,
        activation_func=torch.nn.functional.silu,
        add_bias_linear=False,
        add_qkv_bias=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        **moe,
        # numerics: plain fp32 torch paths everywhere (no fusions: they need CUDA kernels)
        params_dtype=torch.float32,
        bf16=False,
        fp16=False,
        use_cpu_initialization=True,
        perform_initialization=init_weights,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        persist_layer_norm=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
    )


def build_gpt_model(hf_config, tcfg):
    """An empty megatron ``GPTModel`` (local spec: no Transformer Engine) for ``tcfg``: this rank's stage of
    it under pipeline parallelism (the embedding on the first, the output layer on the last)."""
    apply_cpu_compat()
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    spec = get_gpt_decoder_block_spec(tcfg, use_transformer_engine=False, normalization="RMSNorm")
    spec = _swap_norms(spec)
    first = last = True
    if ps.model_parallel_is_initialized():
        first, last = ps.is_pipeline_first_stage(), ps.is_pipeline_last_stage()
    return GPTModel(config=tcfg, transformer_layer_spec=spec, vocab_size=hf_config.vocab_size,
                    max_sequence_length=hf_config.max_position_embeddings, pre_process=first, post_process=last,
                    share_embeddings_and_output_weights=tied(hf_config), position_embedding_type="rope",
                    rotary_percent=1.0, rotary_base=rope_theta(hf_config))


class SequenceParallelRMSNorm(torch.nn.RMSNorm):
    """The local spec's norm (torch's ``RMSNorm``, as megatron's ``WrappedTorchNorm`` builds it), under sequence
    parallelism too: the same function and weight, marked ``sequence_parallel`` when it is on, so that megatron's
    ``finalize_model_grads`` sums its gradient over the tensor-parallel ranks (each saw part of the sequence).
    ``WrappedTorchNorm`` refuses sequence parallelism; megatron's other norms need Apex or Transformer Engine."""

    def __init__(self, config, hidden_size: int, eps: float = 1e-5):
        super().__init__(hidden_size, eps=eps)
        setattr(self.weight, "sequence_parallel", bool(config.sequence_parallel))


def _swap_norms(spec):
    """``spec`` (a megatron module spec tree) with every norm class of the local spec (``WrappedTorchNorm``, or
    Apex's ``FusedLayerNorm`` where Apex is installed, which takes no RMSNorm) replaced by
    :class:`SequenceParallelRMSNorm`."""
    import dataclasses
    from megatron.core.fusions.fused_layer_norm import FusedLayerNorm
    from megatron.core.transformer.torch_norm import WrappedTorchNorm
    if spec is WrappedTorchNorm or spec is FusedLayerNorm:
        return SequenceParallelRMSNorm
    if isinstance(spec, list):
        return [_swap_norms(x) for x in spec]
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        return dataclasses.replace(spec, **{f.name: _swap_norms(getattr(spec, f.name))
                                            for f in dataclasses.fields(spec) if f.init})
    return spec


# -- fused qkv ----------------------------------------------------------------------

def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_heads: int, n_kv: int,
             head_dim: int) -> torch.Tensor:
    """HF ``q [H*d, h]``, ``k``/``v`` ``[G*d, h]`` -> megatron ``linear_qkv`` ``[G*(H/G+2)*d, h]``."""
    per = n_heads // n_kv
    hidden = q.shape[-1]
    qg = q.reshape(n_kv, per * head_dim, hidden)
    kg = k.reshape(n_kv, head_dim, hidden)
    vg = v.reshape(n_kv, head_dim, hidden)
    return torch.cat([qg, kg, vg], dim=1).reshape(n_kv * (per + 2) * head_dim, hidden)


def split_qkv(qkv: torch.Tensor, n_heads: int, n_kv: int, head_dim: int):
    """Inverse of :func:`fuse_qkv`."""
    per = n_heads // n_kv
    hidden = qkv.shape[-1]
    g = qkv.reshape(n_kv, (per + 2) * head_dim, hidden)
    q = g[:, :per * head_dim].reshape(n_heads * head_dim, hidden)
    k = g[:, per * head_dim:(per + 1) * head_dim].reshape(n_kv * head_dim, hidden)
    v = g[:, (per + 1) * head_dim:].reshape(n_kv * head_dim, hidden)
    return q, k, v


# -- weights -----------------------------------------------------------------------

def hf_to_megatron(hf_sd: dict[str, torch.Tensor], hf_config) -> dict[str, torch.Tensor]:
    """HF Qwen3-MoE state dict -> megatron ``GPTModel`` state dict (tensors only, new storage)."""
    c = hf_config
    H, G, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    out: dict[str, torch.Tensor] = {}

    def take(name):
        if name not in hf_sd:
            raise KeyError(f"hf_to_megatron: missing {name}")
        return hf_sd[name].detach()

    out["embedding.word_embeddings.weight"] = take("model.embed_tokens.weight").clone()
    for i, is_moe in enumerate(moe_layer_pattern(c)):
        hp, mp = f"model.layers.{i}.", f"decoder.layers.{i}."
        out[mp + "input_layernorm.weight"] = take(hp + "input_layernorm.weight").clone()
        out[mp + "self_attention.linear_qkv.weight"] = fuse_qkv(
            take(hp + "self_attn.q_proj.weight"), take(hp + "self_attn.k_proj.weight"),
            take(hp + "self_attn.v_proj.weight"), H, G, d).clone()
        out[mp + "self_attention.linear_proj.weight"] = take(hp + "self_attn.o_proj.weight").clone()
        out[mp + "self_attention.q_layernorm.weight"] = take(hp + "self_attn.q_norm.weight").clone()
        out[mp + "self_attention.k_layernorm.weight"] = take(hp + "self_attn.k_norm.weight").clone()
        out[mp + "pre_mlp_layernorm.weight"] = take(hp + "post_attention_layernorm.weight").clone()
        if is_moe:
            out[mp + "mlp.router.weight"] = take(hp + "mlp.gate.weight").clone()
            gate_up = take(hp + "mlp.experts.gate_up_proj")          # [E, 2I, h]
            down = take(hp + "mlp.experts.down_proj")                # [E, h, I]
            for e in range(c.num_experts):
                out[mp + f"mlp.experts.local_experts.{e}.linear_fc1.weight"] = gate_up[e].clone()
                out[mp + f"mlp.experts.local_experts.{e}.linear_fc2.weight"] = down[e].clone()
        else:
            out[mp + "mlp.linear_fc1.weight"] = torch.cat(
                [take(hp + "mlp.gate_proj.weight"), take(hp + "mlp.up_proj.weight")], dim=0)
            out[mp + "mlp.linear_fc2.weight"] = take(hp + "mlp.down_proj.weight").clone()
    out["decoder.final_layernorm.weight"] = take("model.norm.weight").clone()
    if not tied(c):
        out["output_layer.weight"] = take("lm_head.weight").clone()
    return out


def megatron_to_hf(mg_sd: dict[str, torch.Tensor], hf_config) -> dict[str, torch.Tensor]:
    """Megatron ``GPTModel`` state dict -> HF Qwen3-MoE names (``_extra_state`` entries ignored)."""
    c = hf_config
    H, G, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim

    def take(name):
        if name not in mg_sd:
            raise KeyError(f"megatron_to_hf: missing {name}")
        return mg_sd[name].detach()

    out: dict[str, torch.Tensor] = {"model.embed_tokens.weight": take("embedding.word_embeddings.weight").clone()}
    for i, is_moe in enumerate(moe_layer_pattern(c)):
        hp, mp = f"model.layers.{i}.", f"decoder.layers.{i}."
        q, k, v = split_qkv(take(mp + "self_attention.linear_qkv.weight"), H, G, d)
        out[hp + "self_attn.q_proj.weight"] = q.clone()
        out[hp + "self_attn.k_proj.weight"] = k.clone()
        out[hp + "self_attn.v_proj.weight"] = v.clone()
        out[hp + "self_attn.o_proj.weight"] = take(mp + "self_attention.linear_proj.weight").clone()
        out[hp + "self_attn.q_norm.weight"] = take(mp + "self_attention.q_layernorm.weight").clone()
        out[hp + "self_attn.k_norm.weight"] = take(mp + "self_attention.k_layernorm.weight").clone()
        if is_moe:
            out[hp + "mlp.experts.gate_up_proj"] = torch.stack(
                [take(mp + f"mlp.experts.local_experts.{e}.linear_fc1.weight") for e in range(c.num_experts)])
            out[hp + "mlp.experts.down_proj"] = torch.stack(
                [take(mp + f"mlp.experts.local_experts.{e}.linear_fc2.weight") for e in range(c.num_experts)])
            out[hp + "mlp.gate.weight"] = take(mp + "mlp.router.weight").clone()
        else:
            gate, up = take(mp + "mlp.linear_fc1.weight").chunk(2, dim=0)
            out[hp + "mlp.gate_proj.weight"] = gate.clone()
            out[hp + "mlp.up_proj.weight"] = up.clone()
            out[hp + "mlp.down_proj.weight"] = take(mp + "mlp.linear_fc2.weight").clone()
        out[hp + "input_layernorm.weight"] = take(mp + "input_layernorm.weight").clone()
        out[hp + "post_attention_layernorm.weight"] = take(mp + "pre_mlp_layernorm.weight").clone()
    out["model.norm.weight"] = take("decoder.final_layernorm.weight").clone()
    out["lm_head.weight"] = take("embedding.word_embeddings.weight" if tied(c) else "output_layer.weight").clone()
    return out


def load_hf_into_megatron(model, hf_sd: dict[str, torch.Tensor], hf_config) -> None:
    """Copy HF weights into a megatron ``GPTModel`` in place; every megatron tensor must be covered."""
    mg = hf_to_megatron(hf_sd, hf_config)
    own = {k: v for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
    missing = sorted(set(own) - set(mg))
    extra = sorted(set(mg) - set(own))
    if missing or extra:
        raise ValueError(f"load_hf_into_megatron: missing {missing[:5]}, unexpected {extra[:5]}")
    with torch.no_grad():
        for k, v in own.items():
            if v.shape != mg[k].shape:
                raise ValueError(f"load_hf_into_megatron: {k} has shape {tuple(v.shape)}, "
                                 f"HF gives {tuple(mg[k].shape)}")
            v.copy_(mg[k])


def megatron_tensor_state(model) -> dict[str, torch.Tensor]:
    """The model's state dict without megatron's ``_extra_state`` placeholders."""
    return {k: v for k, v in model.state_dict().items()
            if isinstance(v, torch.Tensor) and not k.endswith("_extra_state")}


def megatron_from_hf(hf_model, tcfg):
    """``(GPTModel, device)``: a megatron model built for ``tcfg`` holding ``hf_model``'s weights, on the
    current GPU where there is one, else the CPU (``hf_model`` is read, not modified)."""
    model = build_gpt_model(hf_model.config, tcfg)
    load_hf_into_megatron(model, hf_model.state_dict(), hf_model.config)
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    return model.to(device), device


def hf_weights(model, hf_config) -> dict[str, torch.Tensor]:
    """The megatron model's weights under HF names, on the CPU (the exact inverse of the load)."""
    return {k: v.cpu() for k, v in megatron_to_hf(megatron_tensor_state(model), hf_config).items()}


def copy_megatron_tensors(model, state: dict[str, torch.Tensor], what: str = "load_state_dict") -> None:
    """Copy ``state`` (a ``megatron_tensor_state``) into ``model`` in place; the names must match exactly."""
    own = megatron_tensor_state(model)
    if set(own) != set(state):
        raise ValueError(f"{what}: weight names differ ({sorted(set(own) ^ set(state))[:5]})")
    with torch.no_grad():
        for k, v in own.items():
            v.copy_(state[k])


# -- process groups -------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_single_process(seed: int = 0) -> None:
    """gloo process group (world size 1, loopback) + megatron parallel state TP=PP=EP=1; idempotent. A parallel
    state left from a default group since destroyed is rebuilt (:func:`compass.lm.megatron_parallel.init_parallel`)."""
    apply_cpu_compat()
    import torch.distributed as dist

    from compass.lm.megatron_parallel import ParallelSizes, init_parallel
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    if dist.get_world_size() != 1:
        raise RuntimeError(f"megatron trainer: single process only, torch.distributed has world size "
                           f"{dist.get_world_size()}")
    init_parallel(ParallelSizes(), seed)     # also the RNG tracker states (dropout is 0: nothing random is drawn)
