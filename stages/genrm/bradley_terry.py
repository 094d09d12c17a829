"""The Bradley–Terry baseline: the same base checkpoint with a scalar head, trained on the same pairs.

``r(x, y)`` = a linear head on the last token's final hidden state of ``chat(x) + y + eos``.
Loss on the non-tie pairs: ``-log σ(r_w - r_l)`` (the winner's score above the loser's);
tie pairs carry no BT signal and are skipped (a plain BT model cannot express a tie). A
verdict needs a tie rule: ``|r_a - r_b| < τ`` (or equal scores) → TIE, else the higher score wins, with τ
chosen on the training pairs (ties included) to maximize ternary accuracy.
"""
from __future__ import annotations

import logging
import random

import torch
import torch.nn.functional as F

from compass.lm.chat import chat_prefix


def bt_loss(r_w: torch.Tensor, r_l: torch.Tensor) -> torch.Tensor:
    """Mean Bradley–Terry loss ``-log σ(r_w - r_l)``; ``r_w``, ``r_l``: ``[P]`` scores of winners and losers."""
    return -F.logsigmoid(r_w - r_l).mean()


def bt_verdict(r_a: float, r_b: float, tau: float) -> str:
    """A, B or TIE from two scalar rewards and the tie threshold τ."""
    if abs(r_a - r_b) < tau or r_a == r_b:
        return "TIE"
    return "A" if r_a > r_b else "B"


def choose_tie_threshold(diffs: list[float], labels: list[str]) -> tuple[float, float]:
    """τ maximizing ternary accuracy of ``bt_verdict`` over pairs with score differences ``r_a - r_b``.

    Candidates: 0 (never TIE) and the midpoints between consecutive sorted ``|diff|``. Returns
    (τ, accuracy at τ); the smallest best τ on a tie of accuracies.
    """
    n = len(diffs)
    if n == 0:
        return 0.0, 0.0
    order = sorted(range(n), key=lambda i: abs(diffs[i]))
    sign_ok = [labels[i] == bt_verdict(diffs[i], 0.0, 0.0) for i in range(n)]
    correct = sum(sign_ok)                   # τ = 0: only exactly equal scores are called TIE
    best, best_tau = correct, 0.0
    for k, i in enumerate(order):            # pairs order[:k+1] now fall under τ → TIE
        correct += (labels[i] == "TIE") - sign_ok[i]
        nxt = abs(diffs[order[k + 1]]) if k + 1 < n else abs(diffs[i]) + 1.0
        if nxt == abs(diffs[i]):
            continue                         # τ cannot separate equal |diff|
        if correct > best:
            best, best_tau = correct, (abs(diffs[i]) + nxt) / 2
    return best_tau, best / n


class ScalarRM(torch.nn.Module):
    """A causal LM's backbone with a scalar head on the last real token."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm
        self.head = torch.nn.Linear(lm.config.hidden_size, 1)
        torch.nn.init.zeros_(self.head.bias)
        torch.nn.init.normal_(self.head.weight, std=0.02)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``input_ids``, ``attention_mask`` ``[B, T]`` right-padded → scores ``[B]``."""
        out = self.lm(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        h = out.hidden_states[-1]                                  # [B, T, H]
        last = attention_mask.sum(1) - 1                           # [B]
        return self.head(h[torch.arange(h.size(0)), last]).squeeze(-1)


def encode_response(tok, prompt: str, response: str, max_len: int) -> list[int] | None:
    ids = tok(chat_prefix(tok, prompt) + response + tok.eos_token, add_special_tokens=False)["input_ids"]
    return ids if len(ids) <= max_len else None


def _batch(seqs: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    return {"input_ids": ids, "attention_mask": mask}


def train_bt(rm: ScalarRM, tok, pairs: list[tuple[list[int], list[int]]], *, steps: int, batch_size: int,
             lr: float, seed: int, log: logging.Logger | None = None, log_every: int = 50) -> list[float]:
    """AdamW steps of ``bt_loss`` on (winner ids, loser ids) pairs, seeded shuffles; returns per-step losses."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    opt = torch.optim.AdamW(rm.parameters(), lr=lr, weight_decay=0.0)
    order: list[int] = []
    losses = []
    rm.train()
    for step in range(steps):
        idx = []
        while len(idx) < min(batch_size, len(pairs)):
            if not order:
                order = list(range(len(pairs)))
                rng.shuffle(order)
            idx.append(order.pop())
        b = _batch([pairs[i][0] for i in idx] + [pairs[i][1] for i in idx], tok.pad_token_id)
        r = rm(**b)
        loss = bt_loss(r[:len(idx)], r[len(idx):])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(rm.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if log is not None and (step % log_every == 0 or step == steps - 1):
            log.info("bradley_terry step %d/%d: loss %.4f", step + 1, steps, losses[-1])
    rm.eval()
    return losses


@torch.no_grad()
def score(rm: ScalarRM, tok, seqs: list[list[int]], batch_size: int = 32) -> list[float]:
    """Scalar rewards of encoded sequences, in order."""
    rm.eval()
    out: list[float] = []
    for i in range(0, len(seqs), batch_size):
        out.extend(rm(**_batch(seqs[i:i + batch_size], tok.pad_token_id)).tolist())
    return out
