"""RL-ZVP (arXiv 2509.21880 eq. 5-6) and ESPO (arXiv 2512.00499; seed paper §2.4.2 eq. (1)-(3)) against
numbers worked out by hand: every expected value below is plain arithmetic on the inputs, never a call to
the code under test."""
from __future__ import annotations

import json
import math

import pytest
import torch

from compass.rl.algos.advantages import grpo, over_tokens, rl_zvp
from compass.rl.algos.losses import ESPO_TOP_FRACTION, entropy_groups, espo, gspo, ppo_clip_token_mean

R3 = math.sqrt(3.0)
LOG_V = math.log(2048)          # the tiny world's |V| (configs/tiny.yaml tokenizer.vocab_size)


# -- RL-ZVP ---------------------------------------------------------------------------------

def _zvp_batch():
    """G = 3 groups of N = 3, T = 4: all passed, all failed, mixed (rewards 1, 0, 0)."""
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    nan, inf = float("nan"), float("inf")
    entropy = torch.tensor([
        [2.0, 0.5, 1.5, 9.9],       # group 0 (all passed)
        [0.0, 3.0, 0.0, 0.0],
        [1.0, 1.0, 1.0, 1.0],
        [2.0, 0.5, 1.5, 9.9],       # group 1 (all failed): 9.9 is on a pad, so max_k H = 2.0
        [0.4, 3.0, 0.0, 7.0],
        [0.3, nan, inf, nan],       # one token; pads hold garbage
        [5.0, 6.0, 7.0, 8.0],       # group 2 (mixed): entropy unused
        [5.0, 6.0, 7.0, 8.0],
        [5.0, 6.0, 7.0, 8.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1],
                         [1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0],
                         [1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    return rewards, entropy, mask


def test_rl_zvp_all_pass_all_fail_and_mixed_groups_by_hand():
    rewards, entropy, mask = _zvp_batch()
    a = rl_zvp(rewards, mask, entropy=entropy, eps=0.0, pass_threshold=0.5, alpha=0.1)
    # mixed group [1, 0, 0]: mean 1/3, unbiased std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = 1/sqrt(3)
    hi, lo = (2 / 3) * R3, -(1 / 3) * R3                 # 2/sqrt(3) and -1/sqrt(3)
    expected = torch.tensor([
        [0.2, 0.05, 0.15, 0.0],                          # +α H on the completion's tokens
        [0.0, 0.3, 0.0, 0.0],
        [0.1, 0.1, 0.1, 0.1],
        [-0.1 * (2.0 - 2.0), -0.1 * (2.0 - 0.5), -0.1 * (2.0 - 1.5), 0.0],   # -α (max_k H - H_t)
        [-0.1 * (7.0 - 0.4), -0.1 * (7.0 - 3.0), -0.1 * (7.0 - 0.0), -0.1 * (7.0 - 7.0)],
        [0.0, 0.0, 0.0, 0.0],                            # a single token is its own max: 0
        [hi, hi, 0.0, 0.0],                              # GRPO, eq. 1
        [lo, lo, lo, lo],
        [0.0, 0.0, 0.0, 0.0]])                           # no completion tokens
    torch.testing.assert_close(a, expected)
    assert a.dtype == torch.float32 and torch.isfinite(a).all()


def test_rl_zvp_leaves_mixed_groups_as_grpo_and_zero_variance_groups_nonzero():
    rewards = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0]])
    mask = torch.ones(8, 3)
    entropy = torch.rand(8, 3) * 5
    torch.testing.assert_close(rl_zvp(rewards, mask, entropy=entropy, alpha=0.3), grpo(rewards, mask))
    # GRPO gives a zero-variance group exactly 0; RL-ZVP gives it a signed signal (eq. 7 vs eq. 6)
    zv = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    m = torch.ones(4, 2)
    h = torch.tensor([[1.0, 2.0], [0.5, 0.5], [1.0, 2.0], [0.5, 1.5]])
    assert grpo(zv, m).abs().sum() == 0
    torch.testing.assert_close(rl_zvp(zv, m, entropy=h, alpha=0.1),
                               torch.tensor([[0.1, 0.2], [0.05, 0.05], [-0.1, 0.0], [-0.1, 0.0]]))


def test_rl_zvp_pass_split_is_the_papers_r_above_zero_for_binary_rewards():
    """Eq. 5 splits on R_i > 0. A shared partial score 0.3: failed at the default threshold 0.5, passed at 0."""
    rewards = torch.tensor([[0.3, 0.3]])
    mask = torch.ones(2, 2)
    h = torch.tensor([[1.0, 3.0], [2.0, 2.0]])
    torch.testing.assert_close(rl_zvp(rewards, mask, entropy=h, alpha=0.1, pass_threshold=0.5),
                               torch.tensor([[-0.2, 0.0], [0.0, 0.0]]))
    torch.testing.assert_close(rl_zvp(rewards, mask, entropy=h, alpha=0.1, pass_threshold=0.0),
                               torch.tensor([[0.1, 0.3], [0.2, 0.2]]))
    binary = torch.tensor([[1.0, 1.0], [0.0, 0.0]])      # binary rewards: every threshold in [0, 1) agrees
    hh = torch.cat([h, h])
    m4 = torch.ones(4, 2)
    for t in (0.0, 0.5, 0.99):
        torch.testing.assert_close(rl_zvp(binary, m4, entropy=hh, pass_threshold=t),
                                   rl_zvp(binary, m4, entropy=hh, pass_threshold=0.0))


def test_rl_zvp_entropy_is_a_constant_and_the_policy_gradient_is_minus_a_over_tokens():
    """Footnote 3: H is detached. Through the token-mean loss at ratio 1, d loss / d logp_t = -A_t / n."""
    rewards = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]])
    h = torch.tensor([[2.0, 4.0, 0.0], [1.0, 0.0, 0.0], [1.0, 3.0, 2.0], [0.5, 1.5, 0.0]], requires_grad=True)
    a = rl_zvp(rewards, mask, entropy=h, alpha=0.1)
    assert not a.requires_grad
    want = torch.tensor([[0.2, 0.4, 0.0], [0.1, 0.0, 0.0], [-0.2, 0.0, -0.1], [-0.1, 0.0, 0.0]])
    torch.testing.assert_close(a, want)
    logp = torch.zeros(4, 3, requires_grad=True)
    loss, _ = ppo_clip_token_mean(logp, logp.detach(), a, mask)
    assert loss.item() == pytest.approx(-(0.2 + 0.4 + 0.1 - 0.2 + 0.0 - 0.1 - 0.1 + 0.0) / 8)
    loss.backward()
    torch.testing.assert_close(logp.grad, -want / 8)


def test_rl_zvp_checks_shapes():
    with pytest.raises(ValueError, match="G\\*N"):
        rl_zvp(torch.ones(2, 2), torch.ones(3, 2), entropy=torch.ones(3, 2))
    with pytest.raises(ValueError, match="entropy"):
        rl_zvp(torch.ones(2, 2), torch.ones(4, 2), entropy=None)


# -- ESPO: entropy groups -------------------------------------------------------------------

def _espo_batch():
    """3 sequences, T = 4, 10 completion tokens. Sorted entropies 0.1 0.1 0.2 0.2 0.3 0.3 0.4 0.5 | 2.0 3.0:
    the top 20% (2 tokens) are seq 0's 2.0 and seq 1's 3.0; seq 2 has no high-entropy token (K_2 = 1)."""
    entropy = torch.tensor([[0.1, 2.0, 0.3, 0.2],
                            [0.4, 0.1, 3.0, 0.2],
                            [0.5, 0.3, 9.0, 9.0]])      # 9.0 on pads: would be the top range if counted
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]])
    return entropy, mask


def test_entropy_groups_are_ranges_shared_by_the_batch():
    entropy, mask = _espo_batch()
    assert ESPO_TOP_FRACTION == 0.2
    assert entropy_groups(entropy, mask, 2).tolist() == [[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, -1, -1]]
    # 3 ranges: top 2 tokens, the other 8 split 4 | 4 at the 5th smallest (0.3, and its tie goes up)
    assert entropy_groups(entropy, mask, 3).tolist() == [[0, 2, 1, 0], [1, 0, 2, 0], [1, 1, -1, -1]]
    # equal-count ranges (top_frac None): halves cut at the 6th smallest (0.3)
    assert entropy_groups(entropy, mask, 2, top_frac=None).tolist() == [[0, 1, 1, 0], [1, 0, 1, 0],
                                                                          [1, 1, -1, -1]]
    assert entropy_groups(entropy, mask, 1).tolist() == [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, -1, -1]]
    # equal entropies share a range: every token in the top one
    assert entropy_groups(torch.ones(2, 3), torch.ones(2, 3), 2).tolist() == [[1, 1, 1], [1, 1, 1]]
    # fewer than 5 tokens: still one top token (the highest)
    assert entropy_groups(torch.tensor([[0.5, 0.7, 0.1]]), torch.ones(1, 3), 2).tolist() == [[0, 1, 0]]
    assert entropy_groups(entropy, torch.zeros(3, 4), 2).tolist() == [[-1] * 4] * 3
    with pytest.raises(ValueError, match="n_groups"):
        entropy_groups(entropy, mask, 0)
    with pytest.raises(ValueError, match="top_frac"):
        entropy_groups(entropy, mask, 2, top_frac=1.0)


# -- ESPO: the loss -------------------------------------------------------------------------

def test_espo_on_policy_is_a_token_loss_weighted_per_entropy_group():
    """Ratio 1 (one update per rollout batch): no clip binds and loss = -1/G Σ_i 1/K_i Σ_τ mean_{t∈τ} A_t;
    token t's gradient is -A_t / (G K_i |y_τ|)."""
    entropy, mask = _espo_batch()
    adv = torch.tensor([[0.2, 0.4, 0.1, 0.6], [-1.0, -1.0, -1.0, -1.0], [0.5, 0.3, 0.0, 0.0]])
    logp = torch.tensor([[-1.0, -2.0, -0.5, -0.1], [-0.3, -0.2, -4.0, -1.0], [-0.7, -0.9, 0.0, 0.0]],
                        requires_grad=True)
    loss, m = espo(logp, logp.detach(), adv, mask, entropy=entropy, vocab_size=2048, alpha=0.02, groups=2)
    seq0 = ((0.2 + 0.1 + 0.6) / 3 + 0.4 / 1) / 2            # low {t0, t2, t3}, top {t1}
    seq1 = ((-1.0 - 1.0 - 1.0) / 3 + -1.0 / 1) / 2           # low {t0, t1, t3}, top {t2}
    seq2 = (0.5 + 0.3) / 2 / 1                               # one group
    assert loss.item() == pytest.approx(-(seq0 + seq1 + seq2) / 3, rel=1e-6)
    loss.backward()
    w = torch.tensor([[1 / 18, 1 / 6, 1 / 18, 1 / 18],         # 1 / (G K_i |y_τ|): 1/(3*2*3), 1/(3*2*1)
                      [1 / 18, 1 / 18, 1 / 6, 1 / 18],
                      [1 / 6, 1 / 6, 0.0, 0.0]])              # 1/(3*1*2)
    torch.testing.assert_close(logp.grad, -adv * w)
    assert m["clip_frac"] == 0.0 and m["ratio_mean"] == pytest.approx(1.0)
    eps = [0.02 * e / LOG_V for e in ((0.1 + 0.3 + 0.2) / 3, 2.0, (0.4 + 0.1 + 0.2) / 3, 3.0, (0.5 + 0.3) / 2)]
    assert m["eps_mean"] == pytest.approx(sum(eps) / 5, rel=1e-5)
    assert m["eps_top"] == pytest.approx((eps[1] + eps[3]) / 2, rel=1e-5)


def test_espo_on_policy_with_one_group_is_grpo_sample_level_mean():
    """One group per sequence at ratio 1: -1/G Σ_i 1/|o_i| Σ_t A_t, GRPO's eq. (2) normalisation (RL-ZVP paper)."""
    entropy, mask = _espo_batch()
    adv = over_tokens(torch.tensor([1.0, -0.5, 2.0]), mask)
    logp = torch.zeros(3, 4, requires_grad=True)
    loss, _ = espo(logp, logp.detach(), adv, mask, entropy=entropy, vocab_size=2048, groups=1)
    assert loss.item() == pytest.approx(-(1.0 - 0.5 + 2.0) / 3)
    loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1 / 12] * 4, [0.5 / 12] * 4, [-1 / 3, -1 / 3, 0, 0]]))


def test_espo_later_mini_batch_ratios_and_clips_by_hand():
    """π ≠ π_old (a later update on the same rollout batch): each group's ratio is the geometric mean of
    its tokens' ratios (eq. (2)), its clip ε_τ = α mean(e) / log|V| (eq. (3)), and a token's gradient is
    s_τ A_t / (G K_i |y_τ|) unless the clip binds (eq. (1): s_τ, not s_τ π_θ/π_old). The four PPO cases:
    A > 0 above 1+ε (clipped), A > 0 below 1-ε (kept), A < 0 above 1+ε (kept), A < 0 below 1-ε (clipped)."""
    entropy, mask = _espo_batch()
    adv = over_tokens(torch.tensor([1.0, -1.0, 0.5]), mask)
    old = torch.tensor([[-1.0, -2.0, -0.5, -0.1], [-0.3, -0.2, -4.0, -1.0], [-0.7, -0.9, 0.0, 0.0]])
    delta = torch.tensor([[0.01, 0.001, 0.02, 0.03],          # seq 0: low {t0, t2, t3}, top {t1}
                          [0.01, 0.02, -0.05, 0.03],          # seq 1: low {t0, t1, t3}, top {t2}
                          [-0.01, -0.03, 0.0, 0.0]])          # seq 2: one group
    logp = (old + delta).requires_grad_(True)
    alpha = 0.02
    loss, m = espo(logp, old, adv, mask, entropy=entropy, vocab_size=2048, alpha=alpha, groups=2)
    eps0l, eps0t = alpha * 0.2 / LOG_V, alpha * 2.0 / LOG_V                   # mean e: (0.1+0.3+0.2)/3, 2.0
    eps1l, eps1t = alpha * (0.7 / 3) / LOG_V, alpha * 3.0 / LOG_V
    eps2 = alpha * 0.4 / LOG_V
    s0l, s0t = math.exp(0.06 / 3), math.exp(0.001)                            # exp of the mean log-ratio
    s1l, s1t = math.exp(0.06 / 3), math.exp(-0.05)
    s2 = math.exp(-0.04 / 2)
    assert s0l > 1 + eps0l and 1 - eps0t < s0t < 1 + eps0t                    # A = +1: clipped | inside
    assert s1l > 1 + eps1l and s1t < 1 - eps1t                                # A = -1: kept (min) | clipped
    assert s2 < 1 - eps2                                                      # A = +0.5: kept (min)
    j0 = ((1 + eps0l) * 1.0 + s0t * 1.0) / 2
    j1 = (s1l * -1.0 + (1 - eps1t) * -1.0) / 2
    j2 = s2 * 0.5
    assert loss.item() == pytest.approx(-(j0 + j1 + j2) / 3, rel=1e-6)
    loss.backward()
    want = torch.tensor([[0.0, -s0t * 1.0 / 6, 0.0, 0.0],                   # -s A / (3 * 2 * |y_τ|)
                         [s1l / 18, s1l / 18, 0.0, s1l / 18],
                         [-s2 * 0.5 / 6, -s2 * 0.5 / 6, 0.0, 0.0]])
    torch.testing.assert_close(logp.grad, want)
    assert m["clip_frac"] == pytest.approx(4 / 10)                           # seq 0's 3 low tokens, seq 1's top
    assert m["ratio_mean"] == pytest.approx((s0l + s0t + s1l + s1t + s2) / 5, rel=1e-6)
    assert m["eps_top"] == pytest.approx((eps0t + eps1t) / 2, rel=1e-5)


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


def test_espo_ignores_pads_and_checks_its_inputs():
    entropy, mask = _espo_batch()
    logp = torch.zeros(3, 4)
    adv = over_tokens(torch.tensor([1.0, 1.0, 1.0]), mask)
    garbage = entropy.clone()
    garbage[2, 2:] = float("nan")
    clean, m_clean = espo(logp, logp, adv, mask, entropy=entropy, vocab_size=2048)
    dirty, m_dirty = espo(logp, logp, adv, mask, entropy=garbage, vocab_size=2048)
    assert clean.item() == dirty.item() == pytest.approx(-1.0) and m_clean == m_dirty
    with pytest.raises(ValueError, match="espo"):
        espo(logp, logp, torch.tensor([1.0]), mask, entropy=entropy, vocab_size=2048)
    with pytest.raises(ValueError, match="vocab_size"):
        espo(logp, logp, adv, mask, entropy=entropy, vocab_size=1)


# -- α for another tokenizer and entropy scale (docs/rl.md, "α for this project") ----------------

def test_alpha_rules_keep_the_papers_zero_variance_advantage_and_top_clip():
    from compass.rl.algos.entropy_scale import espo_alpha, zvp_alpha
    assert zvp_alpha(6.0) == pytest.approx(0.10)             # the papers' own scale gives the papers' α
    assert espo_alpha(6.0, 151_936) == pytest.approx(0.02)
    assert zvp_alpha(1.5) == pytest.approx(0.4)              # 0.4 * 1.5 = 0.10 * 6
    h, v = 1.5, 2048                                         # ε_top = α h / log v must equal 0.02 * 6 / log 151936
    assert espo_alpha(h, v) * h / math.log(v) == pytest.approx(0.02 * 6 / math.log(151_936))
    assert espo_alpha(h, v) == pytest.approx(0.02 * 4 * math.log(2048) / math.log(151_936))


def test_entropy_stats_by_hand():
    from compass.rl.algos.entropy_scale import entropy_stats
    ents = [[0.0, 1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0, 9.0], []]
    s = entropy_stats([torch.tensor(e).numpy() for e in ents], vocab_size=2048)
    assert (s["completions"], s["tokens"], s["vocab_size"]) == (3, 10, 2048)
    assert s["entropy_top"]["n"] == 2 and s["entropy_top"]["mean"] == pytest.approx(8.5)   # {8, 9}
    assert s["entropy_top"]["p10"] == pytest.approx(8.1) and s["top_threshold"] == 8.0
    assert s["entropy_rest"]["mean"] == pytest.approx(3.5) and s["entropy_all"]["mean"] == pytest.approx(4.5)
    assert s["max_per_completion"] == pytest.approx((4.0 + 9.0) / 2)                      # the empty one skipped
    assert s["rl_zvp"]["alpha"] == pytest.approx(0.1 * 6 / 8.5)
    assert s["rl_zvp"]["alpha_range"] == pytest.approx([0.1 * 2 / 8.5, 0.1 * 10 / 8.5])
    assert s["espo"]["eps_top_at_0.02"] == pytest.approx(0.02 * 8.5 / math.log(2048))
    assert s["espo"]["eps_rest_at_0.02"] == pytest.approx(0.02 * 3.5 / math.log(2048))


def test_bench_entropy_scale_prints_a_table_and_a_json_line(monkeypatch, capsys):
    from compass.bench import entropy_scale as bench
    from compass.lm.model_config import ModelConfig
    from compass.lm.model_factory import build_model, build_tokenizer
    from compass.rl.sampling.prompt_data import RLPrompt
    tok = build_tokenizer("")
    model = build_model(ModelConfig(), tok, seed=0)
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    verifier = json.dumps({"type": "math_exact"})
    rows = [RLPrompt(f"p{i}", f"{i}+1=?", str(i + 1), verifier, "math", "a") for i in range(3)]
    monkeypatch.setattr(bench, "_pipeline_start", lambda *a: (model, tok, rows, "file:///tiny"))
    assert bench.main(["--start", "pipeline", "--groups", "2", "--group-size", "2", "--max-new-tokens", "4",
                       "--check", "0.1:2.0", "--check-steps", "2", "--check-seeds", "0"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    s = json.loads(out[-1])
    assert s["bench"] == "entropy-scale" and s["completions"] == 4 and s["vocab_size"] == len(tok)
    assert s["source"]["groups"] == 2 and s["source"]["max_new_tokens"] == 4
    assert any(line.startswith("top 20% (batch)") for line in out)
    (check,) = s["check"]
    assert (check["zvp_alpha"], check["espo_alpha"], check["seed"], check["steps"]) == (0.1, 2.0, 0, 2)
    assert len(check["eps_top"]) == 2 and math.isfinite(check["reward_all"])


def test_a_later_mini_batch_clips_by_the_sampling_policys_entropy():
    """ESPO's ε_τ is set by the sampling policy's entropy (its eq. (6)). A later mini-batch meets a moved
    policy, so the trainer takes the entropy the engine measured before the update: with every token's
    entropy c, every group's ε is α·c/log|V|, whatever the moved policy's own entropy is."""
    from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
    from compass.rl.trainer.batch import build_batch
    from compass.rl.config import RLConfig
    from compass.rl.trainer.torch_trainer import policy_step
    tok = build_tokenizer("")
    model = build_model(ModelConfig(), tok, seed=3)
    lo = len(tok.all_special_ids)
    g = torch.Generator().manual_seed(0)
    batch = build_batch([torch.randint(lo, len(tok), (4,), generator=g).tolist() for _ in range(4)],
                        [torch.randint(lo, len(tok), (n,), generator=g).tolist() for n in (5, 3, 6, 2)],
                        tok.pad_token_id)
    mask = batch["completion_mask"][:, 1:]
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])[:, None] * mask
    cfg = RLConfig(loss={"kind": "espo", "alpha": 0.1})
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    c = 0.7
    m = policy_step(model, opt, batch, adv, cfg, old_entropy=torch.full(mask.shape, c))
    assert m["eps_mean"] == pytest.approx(0.1 * c / math.log(model.config.vocab_size), rel=1e-5)
    own = policy_step(model, opt, batch, adv, cfg)
    assert own["eps_mean"] != pytest.approx(m["eps_mean"], rel=1e-3)
