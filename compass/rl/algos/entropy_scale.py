"""The entropy scale of a policy's rollouts, and the RL-ZVP and ESPO α it calls for (docs/rl.md, "α for
this project").

Both papers tuned α where the policy was a Qwen3 base model (|V| = 151,936) whose top 20% of tokens by
entropy held 2-10 nats at the start of RL (RL-ZVP, arXiv 2509.21880 §4.3). Their α carries to another
tokenizer and model by keeping what it was tuned to produce:

- RL-ZVP (eq. 5): the size of a zero-variance advantage, ``α · H`` on the tokens that matter. Keep
  ``α · mean(top-20% H)`` = 0.10 × 6 nats = 0.6, the paper's (6 = the middle of its 2-10 nats).
- ESPO (eq. (3)): the clip of the high-entropy group, ``ε_top = α · mean(top-20% e) / log|V|``. Keep the
  paper's ε_top = 0.02 × 6 / log(151,936) ≈ 0.010.

``compass bench entropy-scale`` (:mod:`compass.bench.entropy_scale`) measures a policy with these functions.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

TOP_FRACTION = 0.2                  # "top 20% of tokens with the highest entropy" (both papers)
REF_TOP_ENTROPY = 6.0               # nats: middle of RL-ZVP §4.3's 2-10 (Qwen3-1.7B/8B-Base, start of RL)
REF_TOP_ENTROPY_RANGE = (2.0, 10.0)
REF_VOCAB = 151_936                 # Qwen3's vocabulary, where ESPO tuned α (arXiv 2512.00499 §4.4)
ZVP_ALPHA = 0.10                    # RL-ZVP Table 3's best (0.20 close; 0.05 and 0.30 clearly worse)
ESPO_ALPHA = 0.02                   # ESPO Table 3's best (0.01, 0.05, 0.10 worse)


def zvp_alpha(top_entropy: float, ref_top_entropy: float = REF_TOP_ENTROPY) -> float:
    """RL-ZVP α that gives this policy's top-20% tokens the paper's zero-variance advantage α·H."""
    return ZVP_ALPHA * ref_top_entropy / top_entropy


def espo_alpha(top_entropy: float, vocab_size: int, ref_top_entropy: float = REF_TOP_ENTROPY) -> float:
    """ESPO α that gives this policy's high-entropy group the paper's clip ε_top (eq. (3))."""
    return ESPO_ALPHA * (ref_top_entropy / math.log(REF_VOCAB)) * (math.log(vocab_size) / top_entropy)


def entropy_stats(entropies: Sequence[np.ndarray], vocab_size: int, top_frac: float = TOP_FRACTION) -> dict:
    """Statistics of per-token entropies (one array per completion) and the α of both rules.

    The top tokens are the batch's ``top_frac`` share with the highest entropy (ESPO's upper range, RL-ZVP's
    "top 20%"); ``max_per_completion`` is the mean over completions of their largest entropy (RL-ZVP's
    ``max_k H`` on all-failed groups).
    """
    flat = np.concatenate([np.asarray(e, dtype=np.float64) for e in entropies if len(e)])
    order = np.sort(flat)
    n_top = min(len(flat), max(1, math.floor(top_frac * len(flat) + 0.5)))
    top, rest = order[len(flat) - n_top:], order[:len(flat) - n_top]

    def summary(x: np.ndarray) -> dict:
        if not len(x):
            return {"n": 0}
        return {"n": int(len(x)), "mean": float(x.mean()), "p10": float(np.quantile(x, 0.1)),
                "p50": float(np.quantile(x, 0.5)), "p90": float(np.quantile(x, 0.9))}

    h_top = float(top.mean())
    log_v = math.log(vocab_size)
    lo, hi = REF_TOP_ENTROPY_RANGE
    return {
        "vocab_size": int(vocab_size), "log_vocab": log_v,
        "completions": len(entropies), "tokens": int(len(flat)),
        "entropy_all": summary(flat), "entropy_top": summary(top), "entropy_rest": summary(rest),
        "max_per_completion": float(np.mean([np.max(e) for e in entropies if len(e)])),
        "top_threshold": float(top.min()),
        "rl_zvp": {"rule": "alpha * mean(top-20% H) = 0.10 * 6 nats",
                   "alpha": zvp_alpha(h_top), "alpha_range": [zvp_alpha(h_top, lo), zvp_alpha(h_top, hi)],
                   "alpha_times_top_entropy_at_0.1": 0.1 * h_top},
        "espo": {"rule": "eps_top = alpha * mean(top-20% e) / log|V| = 0.02 * 6 / log(151936)",
                 "alpha": espo_alpha(h_top, vocab_size),
                 "alpha_range": [espo_alpha(h_top, vocab_size, lo), espo_alpha(h_top, vocab_size, hi)],
                 "paper_eps_top": ESPO_ALPHA * REF_TOP_ENTROPY / math.log(REF_VOCAB),
                 "eps_top_at_0.02": ESPO_ALPHA * h_top / log_v,
                 "eps_rest_at_0.02": ESPO_ALPHA * float(rest.mean()) / log_v if len(rest) else 0.0},
    }


def sample_entropies(model, tok, prompts: Sequence[str], *, group_size: int, max_new_tokens: int,
                     temperature: float, seed: int, batch_prompts: int = 8) -> list[np.ndarray]:
    """Per-token entropies of ``group_size`` samples of each prompt (the ``hf`` rollout, as RL samples)."""
    from compass.lm.chat import chat_prefix
    from compass.rl.rollout.base import SamplingParams, get_rollout_backend
    rollout = get_rollout_backend("hf")(model, tok, dtype="float32")
    ids = [tok(chat_prefix(tok, p), add_special_tokens=False)["input_ids"] for p in prompts]
    out: list[np.ndarray] = []
    for k in range(0, len(ids), batch_prompts):
        sp = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed + k)
        for group in rollout.generate(ids[k:k + batch_prompts], group_size, sp):
            out += [c.entropies for c in group]
    return out
