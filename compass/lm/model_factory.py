"""Tiny models and tokenizers, saved as Hugging Face folders.

Everything is built from a seed with no download, so transformers, mergekit
and vLLM load the result unchanged. The tokenizer is a byte-level BPE trained
on the world's corpus, with digits split one per token.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3Config, Qwen3MoeConfig)

from compass.lm.model_config import ModelConfig, TokenizerConfig  # noqa: F401  (re-exported)

PAD, UNK, EOS = "<|pad|>", "<|unk|>", "<|end|>"
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]
MARKUP_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<answer>", "</answer>"]
SPECIAL_TOKENS = [PAD, UNK, EOS, *ROLE_TOKENS, *MARKUP_TOKENS]

# One turn is "<|role|>content<|end|>"; generation starts after "<|assistant|>".
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tokenizer(texts: Iterable[str] | str, cfg: TokenizerConfig | None = None) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on ``texts``, with digits kept one per token.

    Every byte has a token, so any text round-trips; merges never cross a
    digit boundary, because BPE over numbers (``128`` as one token, ``12``
    ``8`` elsewhere) makes arithmetic much harder to learn (docs/architecture.md §5).
    Training is single-pass and deterministic: the same texts in the same
    order give the same files.
    """
    cfg = cfg or TokenizerConfig()
    tk = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency,
                                  special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tk.train_from_iterator([texts] if isinstance(texts, str) else texts, trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token=PAD, unk_token=UNK, eos_token=EOS,
                                  additional_special_tokens=ROLE_TOKENS + MARKUP_TOKENS)
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def model_config(cfg: ModelConfig, tok: PreTrainedTokenizerFast):
    common = dict(vocab_size=len(tok), hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
                  num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
                  head_dim=cfg.head_dim, max_position_embeddings=cfg.max_positions,
                  intermediate_size=cfg.intermediate_size, tie_word_embeddings=False,
                  pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    if cfg.arch == "qwen3":
        return Qwen3Config(**common)
    return Qwen3MoeConfig(**common, num_experts=cfg.num_experts, num_experts_per_tok=cfg.experts_per_token,
                          moe_intermediate_size=cfg.expert_size, norm_topk_prob=True)


def build_model(cfg: ModelConfig, tok: PreTrainedTokenizerFast, seed: int):
    """Random init from ``seed``: the same seed gives the same weights."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(model_config(cfg, tok), dtype=torch.float32)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model


def save_checkpoint(model, tok, out_dir: str | Path, meta: dict | None = None) -> Path:
    """HF folder: config.json, model.safetensors, tokenizer files (+ compass.json metadata)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    if meta:
        (out / "compass.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
    return out


def load_checkpoint(path: str | Path, dtype=torch.float32):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(path))
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    return model, tok
