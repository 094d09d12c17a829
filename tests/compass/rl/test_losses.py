"""Dr. GRPO and GSPO against hand-computed values (RL-ZVP and ESPO: test_zvp_espo.py)."""
from __future__ import annotations

import math

import pytest
import torch

from compass.rl.algos.advantages import dr_grpo, group_centered, over_tokens
from compass.rl.algos.losses import gspo


def test_dr_grpo_subtracts_the_group_mean_only():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [3.0, 0.0, 0.0, 0.0]])
    want = torch.tensor([[0.5, -0.5, -0.5, 0.5], [0.0, 0.0, 0.0, 0.0], [2.25, -0.75, -0.75, -0.75]])
    assert torch.allclose(group_centered(rewards), want)
    mask = torch.ones(12, 2).tril()                              # completion lengths 1 and 2
    assert torch.allclose(dr_grpo(rewards, mask), want.reshape(-1, 1) * mask)   # [G*N, T], 0 off the mask


def test_gspo_sequence_ratio_value_and_gradient():
    old = torch.zeros(2, 3)
    logp = torch.tensor([[0.1, 0.2, 0.3], [-0.5, 0.0, 9.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv = over_tokens(torch.tensor([1.0, -1.0]), mask)
    loss, m = gspo(logp, old, adv, mask, clip_eps=0.3)
    s0, s1 = math.exp(0.2), math.exp(-0.25)               # geometric means over the masked tokens
    assert loss.item() == pytest.approx(-(s0 * 1 + s1 * -1) / 2, rel=1e-6)
    loss.backward()
    # d/dlogp_t of -(1/B) s_i A_i = -(1/B) A_i s_i / |y_i|; padding gets nothing
    assert torch.allclose(logp.grad[0], torch.full((3,), -s0 / 3 / 2), atol=1e-6)
    assert torch.allclose(logp.grad[1], torch.tensor([s1 / 2 / 2, s1 / 2 / 2, 0.0]), atol=1e-6)
    assert m["clip_frac"] == 0.0
    # eps 0.1: s0 = 1.22 > 1.1 with A > 0 and s1 = 0.78 < 0.9 with A < 0: both clipped
    loss, m = gspo(logp.detach(), old, adv, mask, clip_eps=0.1)
    assert loss.item() == pytest.approx(-(1.1 - 0.9) / 2, rel=1e-6) and m["clip_frac"] == 1.0
    loss, m = gspo(logp.detach(), old, adv, mask, clip_eps=0.3, clip_eps_high=0.1)   # only the upper bound binds
    assert loss.item() == pytest.approx(-(1.1 - s1) / 2, rel=1e-6) and m["clip_frac"] == 0.5


def test_token_level_advantages_in_ppo_and_gspo():
    from compass.rl.algos.losses import gspo, ppo_clip_token_mean
    logp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    tok_adv = torch.tensor([[1.0, 3.0, 100.0], [-1.0, 0.0, 1.0]])
    loss, _ = ppo_clip_token_mean(logp, logp.detach(), tok_adv, mask)
    assert loss.item() == pytest.approx(-(1 + 3 - 1 + 0 + 1) / 5)   # pad advantage (100) never counts
    loss.backward()
    torch.testing.assert_close(logp.grad, -tok_adv * mask / 5)
    # GSPO is sequence-level: a token advantage row enters as its mean over the completion
    l_tok, _ = gspo(logp.detach(), logp.detach(), tok_adv, mask)
    l_seq, _ = gspo(logp.detach(), logp.detach(), over_tokens(torch.tensor([2.0, 0.0]), mask), mask)
    assert l_tok.item() == pytest.approx(l_seq.item())
