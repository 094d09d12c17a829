"""Tiny stand-ins for users' Hugging Face models, one per supported family, written as real model folders.

Each is a random-init model (``from_config``, 2 layers, hidden 64) saved with ``save_pretrained``, and
a real tokenizer: a small byte-level BPE trained with the ``tokenizers`` library, the family's special
tokens, and a chat template in the family's style written here (Qwen's ``<|im_start|>role`` turns with
``<think>`` tokens for Qwen3 / Qwen3-MoE, Llama 3's header tokens). Families differ where real ones do:
where the template lives (tokenizer_config.json or chat_template.jinja), the pad token (own, equal to
eos, none), tied embeddings, dtype, sharding.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen3Config,
                          Qwen3MoeConfig)

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "What is 12+30? Add the tens, then the ones: the answer is 42.",
    "Write a product title for a red cotton shirt in size M.",
    "def add(a, b):\n    return a + b\n",
    "<think>Let me think step by step.</think> The result is 7.",
] * 4

QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN3_SPECIALS = QWEN_SPECIALS + ["<think>", "</think>", "<tool_call>", "</tool_call>"]
LLAMA_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                  "<|finetune_right_pad_id|>"]

# Qwen3 style: turns in <|im_start|>role ... <|im_end|>; with enable_thinking=False an empty think block.
QWEN3_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}")
# Qwen2.5 style: the same turns, and a system turn of its own when the conversation has none.
QWEN2_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a careful assistant.<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Llama 3 style: bos, then header tokens around the role, each turn closed by <|eot_id|>.
LLAMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")

FAMILIES = {
    # model_type: specials, tokens, template, where the template is kept, tokenizer class, config, dtype, tied
    "qwen3": dict(specials=QWEN3_SPECIALS, eos="<|im_end|>", pad="<|endoftext|>", bos=None, template=QWEN3_TEMPLATE,
                  template_in="jinja", tokenizer_class="Qwen2Tokenizer", config=Qwen3Config, dtype=torch.bfloat16,
                  tie=True, prefix="<|im_start|>user\n"),
    "qwen3_moe": dict(specials=QWEN3_SPECIALS, eos="<|im_end|>", pad="<|endoftext|>", bos=None,
                      template=QWEN3_TEMPLATE, template_in="config", tokenizer_class="Qwen2Tokenizer",
                      config=Qwen3MoeConfig, dtype=torch.float32, tie=False, prefix="<|im_start|>user\n"),
    # a base-model tokenizer: pad is eos (the importer must give it another pad)
    "qwen2": dict(specials=QWEN_SPECIALS, eos="<|endoftext|>", pad="<|endoftext|>", bos=None, template=QWEN2_TEMPLATE,
                  template_in="config", tokenizer_class="Qwen2Tokenizer", config=Qwen2Config, dtype=torch.float32,
                  tie=True, prefix="<|im_start|>system\n",
                  # sampling defaults as Qwen2.5 ships them: the import must keep them out of the pipeline's calls
                  generation=dict(do_sample=True, repetition_penalty=1.05, temperature=0.7, top_p=0.8, top_k=20)),
    # no pad token at all, as Llama 3 ships
    "llama": dict(specials=LLAMA_SPECIALS, eos="<|eot_id|>", pad=None, bos="<|begin_of_text|>",
                  template=LLAMA_TEMPLATE, template_in="jinja", tokenizer_class="PreTrainedTokenizerFast",
                  config=LlamaConfig, dtype=torch.bfloat16, tie=False, prefix="<|begin_of_text|><|start_header_id|>"),
}


def build_tokenizer(family: str, vocab_size: int = 400, texts: list[str] | None = None) -> PreTrainedTokenizerFast:
    spec = FAMILIES[family]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=spec["specials"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(texts or SENTENCES, trainer=trainer)
    if spec["bos"]:     # Llama 3's tokenizer.json adds bos itself unless asked not to (add_special_tokens=False)
        tk.post_processor = processors.TemplateProcessing(
            single=f"{spec['bos']} $A", pair=f"{spec['bos']} $A {spec['bos']} $B",
            special_tokens=[(spec["bos"], tk.token_to_id(spec["bos"]))])
    kw = {k: spec[k] for k in ("eos", "pad", "bos") if spec[k]}
    return PreTrainedTokenizerFast(tokenizer_object=tk, **{f"{k}_token": v for k, v in kw.items()})


def save_tokenizer(family: str, tok, out: Path) -> None:
    """The tokenizer files as the family ships them: its tokenizer class, its template in tokenizer_config.json
    or in chat_template.jinja."""
    spec = FAMILIES[family]
    tok.save_pretrained(out)
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = spec["tokenizer_class"]
    jinja = out / "chat_template.jinja"
    if jinja.exists():
        jinja.unlink()
    if spec["template_in"] == "config":
        cfg["chat_template"] = spec["template"]
    else:
        jinja.write_text(spec["template"])
    cfg_path.write_text(json.dumps(cfg, indent=2))


def model_config(family: str, vocab_size: int, tok):
    spec = FAMILIES[family]
    # 2 heads of 32: vLLM's CPU attention takes head sizes of 32, 64, ... (the vllm backend test loads them)
    common = dict(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, intermediate_size=128, max_position_embeddings=1024,
                  tie_word_embeddings=spec["tie"], eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    if family in ("qwen3", "qwen3_moe"):
        common["head_dim"] = 32
    if family == "qwen3_moe":
        common.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True)
    return spec["config"](**common)


def make_model_folder(family: str, out: Path, *, seed: int = 0, shard: str | None = None,
                      texts: list[str] | None = None, tokenizer_vocab: int = 400, vocab_size: int | None = None) -> Path:
    """A model folder of ``family`` in ``out``; ``shard`` (e.g. ``"60KB"``) saves it in shards with an index;
    ``vocab_size`` overrides the embedding's rows (default: the tokenizer's size rounded up, plus spare rows,
    as real checkpoints have)."""
    spec = FAMILIES[family]
    tok = build_tokenizer(family, tokenizer_vocab, texts)
    vocab_size = vocab_size or -(-len(tok) // 64) * 64 + 64
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(model_config(family, vocab_size, tok), dtype=torch.float32)
    model = model.to(spec["dtype"])
    out.mkdir(parents=True, exist_ok=True)
    kw = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(out, **kw)
    save_tokenizer(family, tok, out)
    if spec.get("generation"):
        gen_path = out / "generation_config.json"
        gen_path.write_text(json.dumps({**json.loads(gen_path.read_text()), **spec["generation"]}, indent=2))
    (out / "README.md").write_text(f"a tiny {family} for tests\n")
    return out
