"""The RL engine: advantage and loss maths against hand-computed values, the update step, the loop."""
from __future__ import annotations

import itertools
import json
import math

import pytest
import torch

from artifacts_schema import conform
from compass.config import ConfigError, validate
from compass.lm.chat import chat_prefix
from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
from compass.gym.score import score
from compass.rl.algos import advantages as adv_mod
from compass.lm.policy_forward import token_logprobs
from compass.rl.algos.advantages import ADVANTAGES, grpo, group_normalized, over_tokens, register_advantage
from compass.rl.trainer.batch import build_batch
from compass.rl.config import RLConfig
from compass.rl.sampling.prompt_data import PromptSampler, RLPrompt, is_reasoning_prompt
from compass.rl.engine import rollouts_table, train
from compass.rl.algos.losses import (ADVANTAGE_SHAPES, POLICY_LOSSES, policy_loss, ppo_clip_token_mean,
                                     register_policy_loss)
from compass.rl.step_metrics import group_stats
from compass.rl.trainer.torch_trainer import policy_step

# -- advantages -----------------------------------------------------------------

def test_grpo_matches_hand_computed_values():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0],      # mean .25, unbiased std .5
                            [1.0, 1.0, 1.0, 1.0],      # zero variance: all pass
                            [0.0, 0.0, 0.0, 0.0],      # zero variance: all fail
                            [0.5, 1.0, 0.0, 0.5]])     # mean .5, std sqrt(.5/3)
    a = group_normalized(rewards, eps=0.0)
    s = math.sqrt(0.5 / 3)
    expected = torch.tensor([[1.5, -0.5, -0.5, -0.5], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0.5 / s, -0.5 / s, 0]])
    assert a.shape == rewards.shape
    torch.testing.assert_close(a, expected)
    # eps is added to the std: [0, 1] has std 1/sqrt(2)
    torch.testing.assert_close(group_normalized(torch.tensor([[0.0, 1.0]]), eps=0.5),
                               torch.tensor([[-0.5, 0.5]]) / (1 / math.sqrt(2) + 0.5))
    # each group normalised on its own: sums to 0, unit (unbiased) std
    assert torch.allclose(a[0].sum(), torch.tensor(0.0), atol=1e-6)
    assert torch.allclose(a[3].std(), torch.tensor(1.0), atol=1e-5)
    # the registered estimator: the same values over each completion's tokens, [G*N, T], 0 off the mask
    mask = torch.tensor([[1, 1, 0]] * 8 + [[1, 0, 0]] * 8, dtype=torch.bool)
    tok = grpo(rewards, mask, eps=0.0)
    assert tok.shape == mask.shape
    torch.testing.assert_close(tok, expected.reshape(-1, 1) * mask)


def test_grpo_zero_variance_is_exactly_zero_even_with_rounding():
    # 0.1 * 3 / 3 is not exactly 0.1 in float: without the guard, noise / eps would be a large advantage
    r = torch.full((3, 5), 0.1, dtype=torch.float64)
    r[1] = 0.7
    assert torch.equal(group_normalized(r, eps=1e-12), torch.zeros_like(r))
    assert group_normalized(torch.tensor([[1, 0]]), eps=1e-6).dtype.is_floating_point   # int rewards are accepted


def test_grpo_rejects_bad_shapes_and_registry_refuses_duplicates():
    with pytest.raises(ValueError, match="num_groups"):
        grpo(torch.tensor([1.0, 0.0]), torch.ones(2, 1))
    with pytest.raises(ValueError, match="group_size>=2"):
        grpo(torch.tensor([[1.0]]), torch.ones(1, 1))
    assert ADVANTAGES["grpo"] is grpo and "ppo_clip_token_mean" in POLICY_LOSSES
    with pytest.raises(ValueError, match="twice"):
        register_advantage("grpo")(lambda r, eps: r)
    assert adv_mod.ADVANTAGES["grpo"] is grpo


def test_config_rejects_unknown_algorithm_kinds():
    with pytest.raises(ConfigError, match="advantage: .*'gpro'.*expected tags: 'grpo', 'dr_grpo', 'rl_zvp'"):
        validate(RLConfig, {"advantage": {"kind": "gpro"}})
    with pytest.raises(ConfigError, match="loss: .*'nope'.*expected tags: 'ppo_clip_token_mean', 'gspo', 'espo'"):
        validate(RLConfig, {"loss": {"kind": "nope"}})


# -- losses ---------------------------------------------------------------------

def test_ppo_clip_token_mean_at_ratio_one_is_minus_token_mean_advantage():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -9.0, -9.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    adv = over_tokens(torch.tensor([1.0, -0.5]), mask)
    loss, m = ppo_clip_token_mean(logp, logp.detach(), adv, mask, clip_eps=0.2)
    # 3 completion tokens: A = 1, 1, -0.5 -> loss = -(1 + 1 - 0.5) / 3
    assert loss.item() == pytest.approx(-0.5)
    assert m["clip_frac"] == 0.0 and m["ratio_mean"] == pytest.approx(1.0) and m["approx_kl"] == pytest.approx(0.0)
    loss.backward()
    # d loss / d logp = -A * ratio / n_tokens on completion tokens, 0 elsewhere
    torch.testing.assert_close(logp.grad, torch.tensor([[-1 / 3, -1 / 3, 0.0], [0.5 / 3, 0.0, 0.0]]))


def test_ppo_clip_binds_only_where_the_clip_removes_the_incentive():
    # ratios 1.5, 1.5, 0.5, 0.5 with A = +1, -1, -1, +1 and eps 0.2
    old = torch.zeros(4, 1)
    logp = torch.log(torch.tensor([[1.5], [1.5], [0.5], [0.5]])).requires_grad_(True)
    mask = torch.ones(4, 1, dtype=torch.bool)
    adv = over_tokens(torch.tensor([1.0, -1.0, -1.0, 1.0]), mask)
    loss, m = ppo_clip_token_mean(logp, old, adv, mask, clip_eps=0.2)
    # per token: max(-A r, -A clip(r)) = [-1.2 (clipped), 1.5, 0.8 (clipped), -0.5]
    assert loss.item() == pytest.approx((-1.2 + 1.5 + 0.8 - 0.5) / 4)
    assert m["clip_frac"] == pytest.approx(0.5)
    assert m["ratio_mean"] == pytest.approx(1.0)
    assert m["approx_kl"] == pytest.approx(-(math.log(1.5) * 2 + math.log(0.5) * 2) / 4)
    loss.backward()
    # clipped tokens get no gradient; others -A * r / 4
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0], [1.5 / 4], [0.0], [-0.5 / 4]]))


def test_ppo_clip_higher_and_mask_ignores_padding():
    logp = torch.log(torch.tensor([[1.25, 50.0]]))
    mask = torch.tensor([[1, 0]], dtype=torch.bool)
    old = torch.zeros(1, 2)
    adv = over_tokens(torch.tensor([2.0]), mask)
    sym, m_sym = ppo_clip_token_mean(logp, old, adv, mask, clip_eps=0.2)
    hi, m_hi = ppo_clip_token_mean(logp, old, adv, mask, clip_eps=0.2, clip_eps_high=0.28)
    assert sym.item() == pytest.approx(-2 * 1.2) and m_sym["clip_frac"] == 1.0
    assert hi.item() == pytest.approx(-2 * 1.25) and m_hi["clip_frac"] == 0.0
    with pytest.raises(ValueError, match="shapes"):
        ppo_clip_token_mean(logp, old, torch.tensor([1.0, 2.0]), mask)
    # an empty mask gives 0, not NaN
    z, _ = ppo_clip_token_mean(logp, old, adv, torch.zeros(1, 2, dtype=torch.bool))
    # a loss registered for one advantage per completion gets each completion's mean [B], for every trainer
    # alike; the shape is declared at registration, never found by catching an error
    seen = []

    def seq_only(logp, old_logp, advantages, mask, **settings):
        if advantages.dim() != 1:
            raise ValueError("seq_only: advantages must be [B]")
        seen.append(advantages)
        return ppo_clip_token_mean(logp, old_logp, over_tokens(advantages, mask), mask, **settings)

    register_policy_loss("seq_only_test", advantages="completion")(seq_only)
    try:
        tok_adv = torch.tensor([[3.0, 1.0]]) * mask
        loss, _, took_tokens = policy_loss("seq_only_test", logp, old, tok_adv, mask, entropy=None, vocab_size=None,
                                           settings={"clip_eps": 0.2})
        assert took_tokens == 0.0 and seen[-1].tolist() == [3.0] and loss.item() == pytest.approx(-3 * 1.2)
        with pytest.raises(ValueError, match="shapes"):        # a token loss given the wrong shape: no retry
            policy_loss("ppo_clip_token_mean", logp, old, torch.ones(1, 3), mask, entropy=None, vocab_size=None,
                        settings={})
    finally:
        del POLICY_LOSSES["seq_only_test"], ADVANTAGE_SHAPES["seq_only_test"]
    assert z.item() == 0.0


# -- zero-variance accounting, batching, log-probs ----------------------------------

def test_group_stats_counts_planted_all_pass_and_all_fail_groups():
    r = torch.tensor([[1.0, 1, 1, 1], [0.0, 0, 0, 0], [0.0, 0, 0, 0], [1.0, 0, 1, 0], [0.3, 0.3, 0.3, 0.3]])
    assert group_stats(r, 0.5) == {"groups": 5, "zero_variance": 4, "all_pass": 1, "all_fail": 3}
    assert group_stats(r, 0.2) == {"groups": 5, "zero_variance": 4, "all_pass": 2, "all_fail": 2}


@pytest.fixture(scope="module")
def tiny():
    tok = build_tokenizer("")
    model = build_model(ModelConfig(), tok, seed=0)
    return model, tok


def test_build_batch_and_token_logprobs_match_unpadded_forward(tiny):
    model, tok = tiny
    model.eval()
    prefixes = [[5, 6, 7], [5, 6]]
    completions = [[40, 41], [42, 43, 44, 2]]
    b = build_batch(prefixes, completions, tok.pad_token_id)
    assert b["input_ids"].tolist() == [[5, 6, 7, 40, 41, 0], [5, 6, 42, 43, 44, 2]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 0], [1] * 6]
    assert b["completion_mask"].tolist() == [[False, False, False, True, True, False],
                                             [False, False, True, True, True, True]]
    with torch.no_grad():
        logp, ent = token_logprobs(model, b["input_ids"], b["attention_mask"])
        assert logp.shape == ent.shape == (2, 5)
        for i, (p, c) in enumerate(zip(prefixes, completions)):
            ids = torch.tensor([p + c])
            ref = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            want = ref.gather(-1, ids[0, 1:, None]).squeeze(-1)
            n = len(p) + len(c) - 1
            torch.testing.assert_close(logp[i, :n], want, atol=1e-5, rtol=1e-5)
        assert (ent > 0).all() and (ent <= math.log(len(tok)) + 1e-4).all()


def _params(model):
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def test_policy_step_moves_weights_toward_positive_advantage(tiny):
    _, tok = tiny
    model = build_model(ModelConfig(), tok, seed=1)
    cfg = RLConfig(trainer={"lr": 1e-3})
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.trainer.lr, weight_decay=0.0)
    prefix = tok(chat_prefix(tok, "2+2=?"), add_special_tokens=False)["input_ids"]
    comps = [tok("4", add_special_tokens=False)["input_ids"] + [tok.eos_token_id],
             tok("7", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]]
    batch = build_batch([prefix, prefix], comps, tok.pad_token_id)
    mask = batch["completion_mask"][:, 1:]
    with torch.no_grad():
        before_lp, _ = token_logprobs(model, batch["input_ids"], batch["attention_mask"])

    # all-zero advantages: no step, weights unchanged
    p0 = _params(model)
    m = policy_step(model, opt, batch, torch.zeros(mask.shape), cfg)
    assert m["updated"] == 0.0 and m["grad_norm"] == 0.0 and m["loss"] == 0.0
    assert all(torch.equal(p0[k], v) for k, v in model.named_parameters())

    m = policy_step(model, opt, batch, over_tokens(torch.tensor([1.0, -1.0]), mask), cfg)
    assert m["updated"] == 1.0 and m["grad_norm"] > 0 and m["clip_frac"] == 0.0 and m["entropy"] > 0
    assert m["adv_abs_token_mean"] == pytest.approx(1.0)
    changed = [k for k, v in model.named_parameters() if not torch.equal(p0[k], v)]
    assert changed, "no weight changed after a step with non-zero advantages"
    with torch.no_grad():
        after_lp, _ = token_logprobs(model, batch["input_ids"], batch["attention_mask"])
    seq = lambda lp: (lp * mask).sum(-1)  # noqa: E731
    assert seq(after_lp)[0] > seq(before_lp)[0], "the rewarded completion did not become likelier"
    assert seq(after_lp)[1] < seq(before_lp)[1], "the penalised completion did not become less likely"


# -- prompts ------------------------------------------------------------------------

def test_prompt_sampler_covers_each_epoch_without_repeats_in_a_step():
    ps = [RLPrompt(id=f"p{i}", prompt="x", reference="1", verifier="{}") for i in range(5)]
    s = PromptSampler(ps, seed=3)
    steps = [[p.id for p in s.take(3)] for _ in range(10)]
    assert all(len(set(st)) == 3 for st in steps)
    flat = list(itertools.chain(*steps))
    assert set(flat[:5]) == {f"p{i}" for i in range(5)}          # first epoch covers all
    assert [p.id for p in PromptSampler(ps, 0).take(9)].__len__() == 5
    with pytest.raises(ValueError, match="empty"):
        PromptSampler([], 0)


def test_reasoning_split():
    math_ = RLPrompt("a", "q", "1", json.dumps({"type": "math_exact"}), domain="math")
    by_verifier = RLPrompt("b", "q", "1", json.dumps({"type": "math_exact"}), domain="ecommerce")
    mcq = RLPrompt("c", "q", "B", json.dumps({"type": "mcq"}), domain="ecommerce")
    bad = RLPrompt("d", "q", "B", "not json", domain="qa")
    assert [is_reasoning_prompt(p) for p in (math_, by_verifier, mcq, bad)] == [True, True, False, False]


# -- the loop -----------------------------------------------------------------------

def _planted_scorer():
    """reference 'pass' -> 1, 'fail' -> 0, 'mixed' -> alternating 1, 0, 1, 0 over calls."""
    flip = itertools.cycle([1.0, 0.0])

    def score(verifier, response, reference):
        assert json.loads(verifier)["type"] == "test"
        return {"pass": 1.0, "fail": 0.0}.get(reference) if reference != "mixed" else next(flip)
    return score


def test_train_loop_metrics_prompt_stats_and_rollouts(tiny, monkeypatch):
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    _, tok = tiny
    model = build_model(ModelConfig(), tok, seed=2)
    v = json.dumps({"type": "test"})
    prompts = [RLPrompt("P", "1+1=?", "pass", v, "math", "arith"),
               RLPrompt("F", "2+2=?", "fail", v, "math", "arith"),
               RLPrompt("M", "3+3=?", "mixed", v, "math", "arith")]
    cfg = RLConfig(steps=2, sampling={"prompts_per_step": 3, "group_size": 4}, rollout={"max_new_tokens": 8},
                   trainer={"lr": 1e-3})
    p0 = _params(model)
    res = train(model, tok, prompts, cfg, score_fn=_planted_scorer())

    assert len(res.metrics) == 2
    for m in res.metrics:
        assert (m["groups"], m["samples"]) == (3, 12)
        assert (m["zero_variance_all_pass"], m["zero_variance_all_fail"]) == (1, 1)
        assert m["zero_variance_rate"] == pytest.approx(2 / 3)
        assert m["zero_variance_all_pass_rate"] == pytest.approx(1 / 3)
        assert m["reward_mean"] == pytest.approx(6 / 12) and m["pass_rate"] == pytest.approx(0.5)
        # only the mixed group has signal: |A| = 0.866 (2 pass, 2 fail, unbiased std) on 4 of 12 rollouts
        assert m["adv_abs_mean"] == pytest.approx(4 * 0.5 / math.sqrt(1 / 3) / 12, rel=1e-4)
        assert m["updated"] == 1.0 and m["entropy"] > 0 and m["tokens"] > 0
        assert m["clip_frac"] == 0.0   # one update per batch: ratio 1
        assert min(m["time_rollout_s"], m["time_reward_s"], m["time_train_s"]) >= 0
    assert any(not torch.equal(p0[k], v) for k, v in model.named_parameters())

    stats = {r["prompt_id"]: r for r in res.prompt_stats.rows()}
    assert stats["P"]["pass_rate"] == 1.0 and stats["P"]["zero_variance"] and stats["P"]["n_samples"] == 8
    assert stats["F"]["pass_rate"] == 0.0 and stats["F"]["zero_variance"] and stats["F"]["mean_reward"] == 0.0
    assert stats["M"]["pass_rate"] == 0.5 and not stats["M"]["zero_variance"] and stats["M"]["n_groups"] == 2
    conform(res.prompt_stats.table(), "prompt_stats", "test")
    ro = conform(rollouts_table(res.rollouts), "rollouts", "test")
    assert ro.num_rows == 24
    assert sorted(set(ro.column("sample_idx").to_pylist())) == [0, 1, 2, 3]
    assert sum(ro.column("num_tokens").to_pylist()) == sum(m["tokens"] for m in res.metrics)
    by_prompt = {}
    for r in res.rollouts:
        by_prompt.setdefault(r["prompt_id"], []).append(r["advantage"])
    assert set(by_prompt["P"]) == {0.0} and set(by_prompt["F"]) == {0.0} and set(by_prompt["M"]) != {0.0}
    s = res.summary()
    assert s["steps"] == 2 and s["samples"] == 24 and s["zero_variance_rate"] == pytest.approx(2 / 3)


def test_train_survives_all_zero_rewards(tiny, monkeypatch):
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    _, tok = tiny
    model = build_model(ModelConfig(), tok, seed=3)
    prompts = [RLPrompt(f"p{i}", f"{i}+1=?", "5", json.dumps({"type": "math_exact"}), "math", "arith")
               for i in range(3)]
    p0 = _params(model)
    cfg = RLConfig(steps=1, sampling={"prompts_per_step": 3, "group_size": 2}, rollout={"max_new_tokens": 6})
    res = train(model, tok, prompts, cfg, score_fn=lambda v, r, ref: 0.0)
    m = res.metrics[0]
    assert m["updated"] == 0.0 and m["zero_variance_all_fail"] == 3 and m["adv_abs_mean"] == 0.0
    assert math.isfinite(m["loss"]) and math.isfinite(m["entropy"])
    assert all(torch.equal(p0[k], v) for k, v in model.named_parameters())


def test_rewards_through_the_reward_service_equal_inline_scoring(tiny, monkeypatch):
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    _, tok = tiny
    words = json.dumps({"type": "ifeval", "instruction_id_list": ["length_constraints:number_words"],
                        "kwargs": [{"num_words": 4, "relation": "less than"}]})       # some samples pass
    prompts = [RLPrompt(f"p{i}", f"{i}+1=?", str(i + 1), json.dumps({"type": "math_exact"}), "math", "arith")
               for i in range(2)] + [RLPrompt("w", "Say hi.", "", words, "instruction", "ifeval"),
                                     RLPrompt("bad", "?", "1", json.dumps({"type": "no-such"}), "math", "arith")]
    runs = {}
    for workers in (0, 2):
        model = build_model(ModelConfig(), tok, seed=4)
        cfg = RLConfig(steps=1, sampling={"prompts_per_step": 4, "group_size": 2}, rollout={"max_new_tokens": 6},
                       reward={"workers": workers})
        score_fn = None if workers else (lambda v, r, ref: 0.0 if "no-such" in v else score(v, r, ref))
        runs[workers] = train(model, tok, prompts, cfg, score_fn=score_fn)
    inline, served = runs[0], runs[2]
    assert [r["reward"] for r in served.rollouts] == [r["reward"] for r in inline.rollouts]
    assert any(r["reward"] > 0 for r in served.rollouts)
    assert [r["response"] for r in served.rollouts] == [r["response"] for r in inline.rollouts]
    assert served.metrics[0]["reward_failures"] == 2          # the unknown spec's group: scored 0, counted
    assert inline.metrics[0]["reward_failures"] == 0


@pytest.mark.parametrize("advantage,loss", [("dr_grpo", "espo"), ("grpo", "gspo")])
def test_engine_runs_the_sequence_and_entropy_group_losses(tiny, monkeypatch, advantage, loss):
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    _, tok = tiny
    model = build_model(ModelConfig(), tok, seed=5)
    v = json.dumps({"type": "test"})
    prompts = [RLPrompt("M", "3+3=?", "mixed", v, "math", "arith")]
    p0 = _params(model)
    cfg = RLConfig(steps=1, sampling={"prompts_per_step": 1, "group_size": 4}, rollout={"max_new_tokens": 8},
                   trainer={"lr": 1e-3}, advantage={"kind": advantage}, loss={"kind": loss})
    res = train(model, tok, prompts, cfg, score_fn=_planted_scorer())
    m = res.metrics[0]
    assert m["updated"] == 1.0 and math.isfinite(m["loss"]) and "ratio_mean" in m
    assert m["ratio_mean"] == pytest.approx(1.0)            # one update per batch: old = current policy
    if loss == "espo":
        assert m["eps_mean"] > 0
    assert any(not torch.equal(p0[k], v) for k, v in model.named_parameters())
