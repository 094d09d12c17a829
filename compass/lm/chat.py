"""Small language-model helpers shared by stages: chat formatting, sampling, SFT loss."""
from __future__ import annotations

import torch


def chat_prefix(tok, prompt: str) -> str:
    return tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                   add_generation_prompt=True)


def encode_sft_pair(tok, prompt: str, response: str, max_len: int) -> tuple[list[int], list[int]] | None:
    """Token ids and labels for one (prompt, response); loss only on the response.

    Returns None when the pair does not fit in ``max_len`` (never truncate a
    trace silently: a cut trace teaches the model to stop mid-thought).
    """
    prefix = tok(chat_prefix(tok, prompt), add_special_tokens=False)["input_ids"]
    answer = tok(response + tok.eos_token, add_special_tokens=False)["input_ids"]
    ids = prefix + answer
    if len(ids) > max_len:
        return None
    return ids, [-100] * len(prefix) + answer


def encode_document(tok, text: str, max_len: int) -> tuple[list[int], list[int]] | None:
    """Token ids and labels for one plain document (pretraining): no chat template, loss on every
    token and on the closing eos. None when it does not fit in ``max_len``."""
    ids = tok(text + tok.eos_token, add_special_tokens=False)["input_ids"]
    return None if len(ids) > max_len else (ids, list(ids))


def collate(batch: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a batch of (ids, labels) for teacher forcing."""
    n = max(len(ids) for ids, _ in batch)
    ids = torch.full((len(batch), n), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), n), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), n), dtype=torch.long)
    for i, (x, y) in enumerate(batch):
        ids[i, :len(x)] = torch.tensor(x)
        labels[i, :len(y)] = torch.tensor(y)
        mask[i, :len(x)] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


@torch.no_grad()
def sample(model, tok, prompts: list[str], *, n: int = 1, max_new_tokens: int = 64,
           temperature: float = 1.0, seed: int = 0) -> list[list[dict]]:
    """``n`` completions per prompt with transformers' ``generate`` (KV cache, batched).

    Returns, per prompt, n dicts: ``text`` (decoded, special markup kept),
    ``ids`` (completion token ids, eos included when produced).
    """
    from compass.lm.device import model_device
    torch.manual_seed(seed)
    model.eval()
    enc = tok([chat_prefix(tok, p) for p in prompts], return_tensors="pt", padding=True,
              add_special_tokens=False).to(model_device(model))                 # inputs where the model is
    do_sample = temperature > 0
    out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=do_sample,
                         temperature=temperature if do_sample else None, top_p=None, top_k=None,
                         num_return_sequences=n, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                         suppress_tokens=[tok.pad_token_id])  # pads only ever follow eos: ids stay exact
    gen = out[:, enc["input_ids"].shape[1]:]
    results: list[list[dict]] = [[] for _ in prompts]
    for row, ids in enumerate(gen.tolist()):
        if tok.eos_token_id in ids:
            ids = ids[:ids.index(tok.eos_token_id) + 1]
        text = tok.decode([t for t in ids if t not in (tok.eos_token_id, tok.pad_token_id)])
        results[row // n].append({"text": text, "ids": ids})
    return results
