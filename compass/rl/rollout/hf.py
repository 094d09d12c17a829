"""The ``hf`` rollout backend: transformers' own ``generate`` (KV cache, batched sampling).

Per completion it returns the sampled ids, the sampler's log-prob and entropy
at every step (from ``generate``'s raw logits divided by the temperature: the
exact distribution it sampled from, since no other logits processor is on),
and, with ``record_routes``, the experts every MoE router picked at every
position (``compass.rl.router_replay.record_routes``).

The rollout model is either the trainer's own model (``dtype`` float32: the same
object, so weight sync is free) or a copy in another dtype (``bfloat16``: the
usual inference/training precision split, refreshed by ``sync_weights``).
"""
from __future__ import annotations

import contextlib
from typing import Sequence

import torch

from compass.lm.device import model_device
from compass.rl.rollout.base import Completion, LocalModelRollout, SamplingParams, register_rollout_backend


@register_rollout_backend("hf")
class HfRollout(LocalModelRollout):
    name = "hf"
    chat_sample_equivalent = True

    @torch.no_grad()
    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, sampling: SamplingParams) -> list[list[Completion]]:
        if sampling.budgets is not None:
            raise ValueError("hf rollout: per-prompt budgets (sampling.budgets) are not supported; use the native "
                             "backend")
        tok, model = self.tok, self.model
        pad, eos = tok.pad_token_id, tok.eos_token_id
        width = max(len(p) for p in prompt_ids)
        dev = model_device(model)                                                # inputs where the model is
        ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long, device=dev)   # left padding
        attn = torch.zeros_like(ids)
        for i, p in enumerate(prompt_ids):
            ids[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long, device=dev)
            attn[i, width - len(p):] = 1
        torch.manual_seed(sampling.seed)
        greedy = sampling.temperature == 0       # evaluation; log-probs are then the untempered distribution's
        was_training = model.training
        model.eval()
        recorder = contextlib.nullcontext()
        if self.record_routes:
            from compass.rl.router_replay import record_routes
            recorder = record_routes(model)
        with recorder as rec:
            out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=sampling.max_new_tokens,
                                 do_sample=not greedy, temperature=None if greedy else sampling.temperature,
                                 top_k=None, top_p=None, suppress_tokens=[pad] if greedy else None,
                                 num_return_sequences=n, pad_token_id=pad, eos_token_id=eos,
                                 return_dict_in_generate=True, output_logits=True)
        model.train(was_training)
        gen = out.sequences[:, width:]                                           # [B*n, T]
        logits = torch.stack(out.logits, dim=1).float() / (1.0 if greedy else sampling.temperature)  # [B*n, T, V]
        logprobs_all = torch.log_softmax(logits, dim=-1)
        token_logp = logprobs_all.gather(-1, gen.unsqueeze(-1)).squeeze(-1).cpu()   # [B*n, T]
        entropy = (-(logprobs_all.exp() * logprobs_all).sum(-1)).cpu()             # [B*n, T]
        routes = (rec.routes(seq_len=out.sequences.shape[1], rows=out.sequences.shape[0])
                  if self.record_routes else None)                               # [B*n, width+T, layers, k]
        results: list[list[Completion]] = [[] for _ in prompt_ids]
        for row, seq in enumerate(gen.tolist()):
            length = seq.index(eos) + 1 if eos in seq else len(seq)
            c_ids = seq[:length]
            p_len = len(prompt_ids[row // n])
            r = None if routes is None else routes[row, width - p_len: width + length].cpu().numpy()
            results[row // n].append(self.completion(c_ids, token_logp[row, :length].numpy(),
                                                     entropy[row, :length].numpy(), r))
        return results

