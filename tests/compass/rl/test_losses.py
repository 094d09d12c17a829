"""Dr. GRPO, GSPO and ESPO (seed paper eq. (1)-(3)) against hand-computed values."""
from __future__ import annotations

import math

import pytest
import torch

from compass.rl.advantages import dr_grpo, group_centered, over_tokens
from compass.rl.losses import entropy_groups, espo, gspo


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


def test_entropy_groups_rank_within_each_sequence():
    ent = torch.tensor([[0.1, 2.0, 0.5, 3.0, 7.0], [1.0, 1.0, 0.2, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]])
    g = entropy_groups(ent, mask, 2)
    assert g.tolist() == [[0, 1, 0, 1, -1], [0, 1, 0, -1, -1]]   # 3 tokens: ranks 0,1 | 2 -> bins 0,0,1
    assert entropy_groups(ent, mask, 1).tolist() == [[0, 0, 0, 0, -1], [0, 0, 0, -1, -1]]
    assert entropy_groups(ent, mask, 8)[0, :4].tolist() == [0, 4, 2, 6]          # more groups than tokens


def test_espo_hand_computed_value_clip_and_gradient():
    # one sequence, 4 tokens; entropy groups: low {t0, t2}, high {t1, t3}
    ent = torch.tensor([[0.1, 2.0, 0.5, 3.0]])
    mask = torch.ones(1, 4)
    logp = torch.tensor([[0.1, 0.2, 0.3, -0.2]], requires_grad=True)
    old = torch.zeros(1, 4)
    V = 8
    loss, m = espo(logp, old, over_tokens(torch.tensor([1.0]), mask), mask, entropy=ent, vocab_size=V, alpha=1.0,
                   groups=2)
    s_low, s_high = math.exp(0.2), math.exp(0.0)                       # eq. (2): exp of the mean log-ratio
    eps_low, eps_high = 0.3 / math.log(V), 2.5 / math.log(V)           # eq. (3), alpha = 1
    assert s_low > 1 + eps_low                                         # A > 0: the low group is clipped
    expected = -((1 + eps_low) + s_high) / 2                           # mean over the 2 groups of their token means
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert m["eps_mean"] == pytest.approx((eps_low + eps_high) / 2, rel=1e-6)
    assert m["clip_frac"] == pytest.approx(0.5)
    loss.backward()
    # clipped tokens get no gradient; the others -(1/|τ|)(1/|y_τ|) A s_τ = -1/4 (eq. (1): s_τ ∇logp)
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -0.25, 0.0, -0.25]]), atol=1e-6)


def test_espo_with_one_group_and_no_clip_is_gspo():
    torch.manual_seed(0)
    logp0 = torch.randn(3, 5) * 0.1
    old = logp0 + torch.randn(3, 5) * 0.05
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    adv = over_tokens(torch.tensor([0.7, -1.2, 0.3]), mask)
    a = logp0.clone().requires_grad_(True)
    b = logp0.clone().requires_grad_(True)
    l_espo, _ = espo(a, old, adv, mask, entropy=torch.rand(3, 5), vocab_size=16, alpha=1e6, groups=1)
    l_gspo, _ = gspo(b, old, adv, mask, clip_eps=0.99, clip_eps_high=1e6)
    l_espo.backward()
    l_gspo.backward()
    assert l_espo.item() == pytest.approx(l_gspo.item(), rel=1e-5)
    assert torch.allclose(a.grad, b.grad, atol=1e-6)


def test_espo_at_ratio_one_is_minus_mean_advantage_and_checks_shapes():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    logp = torch.zeros(2, 3)
    loss, m = espo(logp, logp, over_tokens(torch.tensor([2.0, -1.0]), mask), mask, entropy=torch.ones(2, 3),
                   vocab_size=100)
    assert loss.item() == pytest.approx(-(2.0 - 1.0) / 2) and m["ratio_mean"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="espo"):
        espo(logp, logp, torch.tensor([1.0]), mask, entropy=torch.ones(2, 3), vocab_size=100)
    with pytest.raises(ValueError, match="vocab_size"):
        espo(logp, logp, over_tokens(torch.tensor([1.0, 1.0]), mask), mask, entropy=torch.ones(2, 3), vocab_size=1)


def test_rl_zvp_hand_computed_token_advantages():
    from compass.rl.advantages import rl_zvp
    # group 0 has spread (GRPO), group 1 all passed, group 2 all failed; N = 2, T = 3
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    entropy = torch.tensor([[.5, .5, .5], [.5, .5, .5],
                            [0.2, 0.8, 9.0], [1.0, 0.0, 0.0],       # 9.0 sits on a pad: ignored
                            [0.2, 0.8, 0.5], [1.0, 3.0, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]])
    a = rl_zvp(rewards, mask, entropy=entropy, eps=0.0, pass_threshold=0.5, alpha=0.5)
    g = 1 / (2 ** 0.5)                                               # (1 - .5) / std([1, 0]) = .5 / .7071
    expected = torch.tensor([[g, g, g], [-g, -g, -g],
                             [0.1, 0.4, 0.0], [0.5, 0.0, 0.0],      # +α·H
                             [-0.3, 0.0, -0.15], [-1.0, 0.0, 0.0]])  # -α·(max H - H), max over own tokens
    torch.testing.assert_close(a, expected)
    with pytest.raises(ValueError, match="G\\*N"):
        rl_zvp(rewards, mask[:4], entropy=entropy[:4])


def test_token_level_advantages_in_ppo_and_gspo():
    from compass.rl.losses import gspo, ppo_clip_token_mean
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
