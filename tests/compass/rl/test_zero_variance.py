"""Zero-variance elimination: the Beta-binomial maths by hand, the pre-rollout skip (a skipped prompt comes
back), the group-size choice on known pass-rate distributions, and token accounting in the engine."""
from __future__ import annotations

import itertools
import json
import math

import pytest

from compass.rl.sampling import zero_variance as zv
from compass.rl.sampling.prompt_data import RLPrompt
from compass.rl.sampling.prompt_beliefs import PromptBeliefs


# -- the maths, by hand ---------------------------------------------------------------------------
def test_beta_moments_and_zero_variance_by_hand():
    assert zv.moment(2, 3, 2) == pytest.approx(2 / 5 * 3 / 6)
    # uniform belief: E[p^2] = 1/3, so P_zv(2) = 2/3 and pass@2 = 2/3; P_zv(4) = 2/5
    assert zv.zero_variance_prob((1, 1), 2) == pytest.approx(2 / 3)
    assert zv.pass_at((1, 1), 2) == pytest.approx(2 / 3)
    assert zv.zero_variance_prob((1, 1), 4) == pytest.approx(2 / 5)
    # a near-certain pass rate of 0.3: p^4 + 0.7^4
    sharp = (1 + 1e7 * 0.3, 1 + 1e7 * 0.7)
    assert zv.zero_variance_prob(sharp, 4) == pytest.approx(0.3 ** 4 + 0.7 ** 4, rel=1e-5)
    assert zv.pass_at(sharp, 3) == pytest.approx(1 - 0.7 ** 3, rel=1e-5)


def test_abs_advantage_per_sample_by_hand():
    # uniform belief, N = 2: k = 1 with probability 1/3, then sum |A| / N = 2 sqrt(1/4) = 1
    assert zv.abs_advantage_per_sample((1, 1), 2) == pytest.approx(1 / 3)
    # a sharp p: the binomial sum, written out with math.comb
    p, n = 0.3, 4
    expect = sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) * 2 * math.sqrt(k / n * (1 - k / n))
                 for k in range(1, n))
    assert zv.abs_advantage_per_sample((1 + 1e7 * p, 1 + 1e7 * (1 - p)), n) == pytest.approx(expect, rel=1e-4)
    assert sum(zv.beta_binomial_pmf(k, 6, 2.5, 1.5) for k in range(7)) == pytest.approx(1.0)


def test_prior_and_forgetting():
    assert zv.prior_belief(None, 4) == (0.5, 0.5)
    assert zv.prior_belief(0.25, 4) == (1.5, 3.5)
    # half of the old evidence (above the base 1/2) is kept, then 3 passes and 1 fail are added
    assert zv.update_belief((5.0, 3.0), 3, 1, 0.5) == (0.5 + 2.25 + 3, 0.5 + 1.25 + 1)


def _signal(p: float, n: int) -> float:
    return sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) * 2 * math.sqrt(k / n * (1 - k / n))
               for k in range(1, n))


@pytest.mark.parametrize("p", [0.5, 0.1, 0.03])
def test_group_size_is_the_knee_of_signal_per_sample(p):
    """Known pass rates: the choice is the smallest N within tol of the best signal per sample."""
    sharp = [(1 + 1e7 * p, 1 + 1e7 * (1 - p))] * 3
    cands = [2, 4, 8, 16, 32]
    n, rows = zv.choose_group_size(sharp, cands, tol=0.1)
    signal = {c: _signal(p, c) for c in cands}
    expect = min(c for c in cands if signal[c] >= 0.9 * max(signal.values()))
    assert n == expect
    assert [r["n"] for r in rows] == cands
    assert all(a["zero_variance"] >= b["zero_variance"] for a, b in zip(rows, rows[1:]))   # Fig. 3: falls with N
    assert all(a["pass_at_n"] <= b["pass_at_n"] for a, b in zip(rows, rows[1:]))           # pass@N grows


def test_harder_prompts_get_larger_groups():
    medium = [(1 + 1e4 * 0.5, 1 + 1e4 * 0.5)] * 4
    hard = [(1 + 1e4 * 0.03, 1 + 1e4 * 0.97)] * 4
    assert zv.choose_group_size(hard, [2, 4, 8, 16, 32], 0.1)[0] > zv.choose_group_size(medium, [2, 4, 8, 16, 32],
                                                                                          0.1)[0]


def test_with_the_skip_the_group_size_counts_only_what_is_generated():
    """A bimodal pool (near-certain and near-impossible prompts plus a few at p = 0.5). Alone, N grows to
    rescue the extremes from zero variance; with the pre-rollout skip those extremes are skipped at small N,
    so the signal per *generated* sample is the medium prompts' and a small N wins. Expected values by hand:
    P_zv = p^N + (1-p)^N, skip = min(max_skip, P_zv) when P_zv >= min_zero_variance."""
    pool = [0.02] * 6 + [0.98] * 3 + [0.5] * 3
    sharp = [(1 + 1e7 * p, 1 + 1e7 * (1 - p)) for p in pool]
    cands = [2, 4, 8, 16, 32]
    rule = dict(min_zero_variance=0.6, max_skip=0.95, decay=0.8)

    def gen(p, n):
        q = p ** n + (1 - p) ** n
        return 1.0 - (min(0.95, q) if q >= 0.6 else 0.0)

    weighted = {n: sum(gen(p, n) * _signal(p, n) for p in pool) / sum(gen(p, n) for p in pool) for n in cands}
    plain = {n: sum(_signal(p, n) for p in pool) / len(pool) for n in cands}
    expect = min(n for n in cands if weighted[n] >= 0.9 * max(weighted.values()))
    n_plain, _ = zv.choose_group_size(sharp, cands, 0.1)
    n_skip, rows = zv.choose_group_size(sharp, cands, 0.1, lambda i, q: zv.skip_probability(q, 0, **rule))
    assert n_plain == min(n for n in cands if plain[n] >= 0.9 * max(plain.values())) >= 16
    assert n_skip == expect == 4
    for r in rows:
        assert r["abs_adv_per_sample"] == pytest.approx(weighted[r["n"]], rel=1e-4)
        assert r["generated"] == pytest.approx(sum(gen(p, r["n"]) for p in pool) / len(pool), rel=1e-4)
    # fewer of the generated groups are predicted zero-variance at the chosen N than without the skip
    row = next(r for r in rows if r["n"] == n_skip)
    assert row["zero_variance_generated"] < row["zero_variance"]


def test_group_size_reads_each_prompts_skip_run_and_samples_large_pools():
    prompts = [RLPrompt(f"E{i}", "q", "r", "{}", pass_rate=0.0) for i in range(30)] + \
              [RLPrompt(f"M{i}", "q", "r", "{}", pass_rate=0.5) for i in range(10)]
    b = PromptBeliefs(prompts, prior_weight=64.0, forget=0.5, pass_threshold=0.5, seed=0)
    rule = dict(min_zero_variance=0.6, max_skip=0.95, decay=0.8)
    ids = [p.id for p in prompts]
    fresh = b.group_size(ids, [2, 4, 8], 0.1, rule)[1]
    for i in range(30):                       # every hard prompt skipped 10 times in a row: it must come back
        b.skips_in_a_row[f"E{i}"] = 10
    back = b.group_size(ids, [2, 4, 8], 0.1, rule)[1]
    assert back[0]["generated"] > fresh[0]["generated"]
    assert back[0]["generated"] == pytest.approx(
        (30 * (1 - min(0.95, b.p_zero_variance("E0", 2)) * 0.8 ** 10) + 10) / 40, rel=1e-6)
    # over ``limit`` prompts an evenly spaced sample stands in: 4 of 40 -> E0, E10, E20, M0
    sampled = b.group_size(ids, [2], 0.1, None, limit=4)[1][0]
    assert sampled["zero_variance"] == pytest.approx((3 * b.p_zero_variance("E0", 2)
                                                      + b.p_zero_variance("M0", 2)) / 4)


# -- the skip rule on hand-made histories --------------------------------------------------------
def test_skip_probability_decays_and_spares_informative_prompts():
    assert zv.skip_probability(0.3, 0, 0.6, 0.9, 0.5) == 0.0
    assert zv.skip_probability(0.99, 0, 0.6, 0.9, 0.5) == 0.9
    assert zv.skip_probability(0.99, 2, 0.6, 0.9, 0.5) == pytest.approx(0.9 * 0.25)


def test_a_skipped_prompt_comes_back_and_is_measured_again():
    prompts = [RLPrompt("always", "q", "r", "{}", pass_rate=0.0)]
    b = PromptBeliefs(prompts, prior_weight=4.0, forget=0.5, pass_threshold=0.5, seed=0)
    for _ in range(5):                                   # its history: all-fail, again and again
        b.observe("always", [0.0] * 4)
    # Beta(1/2, 1/2 + 8) at the fixed point: E[(1-p)^4] = 8.5/9 · 9.5/10 · 10.5/11 · 11.5/12 (+ a tiny E[p^4])
    assert b.p_zero_variance("always", 4) == pytest.approx(8.5 / 9 * 9.5 / 10 * 10.5 / 11 * 11.5 / 12, abs=2e-3)
    runs, run = [], 0
    for _ in range(2000):
        if b.should_skip("always", 4, min_zero_variance=0.6, max_skip=0.9, decay=0.5):
            run += 1
            continue
        runs.append(run)                                 # drawn: measured again (all-fail once more)
        b.observe("always", [0.0] * 4)
        run = 0
    assert runs and max(runs) <= 12                      # 0.9 * 0.5^k: never excluded for long
    assert sum(r > 0 for r in runs) > len(runs) / 2      # but mostly skipped at least once
    # a prompt that starts to be solved sometimes stops being skipped
    b.observe("always", [1.0, 0.0, 1.0, 0.0])
    b.observe("always", [1.0, 0.0, 0.0, 1.0])
    assert b.p_zero_variance("always", 4) < 0.6
    assert not any(b.should_skip("always", 4, min_zero_variance=0.6, max_skip=0.9, decay=0.5) for _ in range(50))


# -- the engine: skips charged nothing, every generated token charged once ---------------------------------
V = json.dumps({"type": "test"})


def planted():
    flip = itertools.cycle([1.0, 0.0])
    return lambda v, r, ref: {"pass": 1.0, "fail": 0.0}[ref] if ref != "mixed" else next(flip)


def test_engine_prefilter_and_auto_group_size(monkeypatch):
    from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
    from compass.rl.config import RLConfig
    from compass.rl.engine import train
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    tok = build_tokenizer("")
    prompts = ([RLPrompt(f"P{i}", f"{i}+1=?", "pass", V, "math", "a", pass_rate=1.0) for i in range(3)]
               + [RLPrompt(f"F{i}", f"{i}+2=?", "fail", V, "math", "a", pass_rate=0.0) for i in range(3)]
               + [RLPrompt(f"M{i}", f"{i}+3=?", "mixed", V, "math", "a", pass_rate=0.5) for i in range(3)])
    cfg = RLConfig(steps=6, sampling={"prompts_per_step": 3, "group_size": 4, "prefilter": {},
                                      "auto_group_size": {"candidates": [2, 4, 8], "tol": 0.1}},
                   rollout={"max_new_tokens": 4})
    res = train(build_model(ModelConfig(), tok, seed=1), tok, prompts, cfg, score_fn=planted())
    m = res.metrics
    assert sum(x["prompts_skipped"] for x in m) > 0
    assert all(x["group_size"] in (2, 4, 8) for x in m)
    # every generated token is charged exactly once; skipped prompts generated nothing
    assert m[-1]["rollout_tokens_total"] == sum(r["num_tokens"] for r in res.rollouts) == sum(x["tokens"] for x in m)
    for x in m:
        assert x["samples"] == x["groups"] * x["group_size"]
        share = x["zero_variance_token_share_all_pass"] + x["zero_variance_token_share_all_fail"]
        assert x["informative_token_share"] == pytest.approx(1 - share)
    # a skipped always-solved or never-solved prompt still comes back within the run
    generated = {r["prompt_id"] for r in res.rollouts}
    assert {"M0", "M1", "M2"} <= generated
    mixed_share = sum(r["prompt_id"].startswith("M") for r in res.rollouts) / len(res.rollouts)
    assert mixed_share > 1 / 3                          # more of the budget went to prompts with signal


def test_prefilter_state_resumes_exactly(tmp_path, monkeypatch):
    """Beliefs, skip runs, their RNG and the chosen N are part of the RL state: a run stopped after 2 steps
    and resumed for 2 more matches 4 uninterrupted steps."""
    from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
    from compass.rl.config import RLConfig
    from compass.rl.engine import train
    monkeypatch.setenv("COMPASS_PROGRESS", "0")
    tok = build_tokenizer("")
    prompts = ([RLPrompt(f"P{i}", f"{i}+1=?", "pass", V, "math", "a", pass_rate=1.0) for i in range(2)]
               + [RLPrompt(f"M{i}", f"{i}+3=?", "mixed", V, "math", "a", pass_rate=0.5) for i in range(2)])

    def cfg(steps):
        return RLConfig(steps=steps, checkpoint_every=2, rollout={"max_new_tokens": 4},
                        sampling={"prompts_per_step": 2, "group_size": 2, "prefilter": {},
                                  "auto_group_size": {"candidates": [2, 4]}})
    whole = train(build_model(ModelConfig(), tok, seed=1), tok, prompts, cfg(4), score_fn=planted())
    train(build_model(ModelConfig(), tok, seed=1), tok, prompts, cfg(2), score_fn=planted(), state_dir=tmp_path)
    resumed = train(build_model(ModelConfig(), tok, seed=1), tok, prompts, cfg(4), score_fn=planted(),
                    state_dir=tmp_path)
    keys = ("prompts_skipped", "group_size", "tokens", "reward_mean")
    assert [{k: m[k] for k in keys} for m in resumed.metrics] == [{k: m[k] for k in keys} for m in whole.metrics]
    table = resumed.prompt_stats.table().to_pylist()
    assert sum(r["n_skipped"] for r in table) <= sum(m["prompts_skipped"] for m in resumed.metrics)


def test_ungraded_prompts_borrow_their_tasks_pooled_pass_rate():
    prompts = [RLPrompt(f"s{i}", "q", "r", "{}", task="sums") for i in range(3)] + \
              [RLPrompt("t0", "q", "r", "{}", task="titles")]
    b = PromptBeliefs(prompts, prior_weight=4.0, forget=0.5, pass_threshold=0.5, seed=0)
    jeffreys = zv.zero_variance_prob((0.5, 0.5), 4)
    assert b.p_zero_variance("s2", 4) == pytest.approx(jeffreys)
    b.observe("s0", [0.0] * 4)
    b.observe("s1", [0.0] * 4)
    # s2 was never drawn: its task failed 8 of 8, so p ~ (0 + 1/2) / (8 + 1) worth 4 samples
    p = 0.5 / 9
    assert b.belief("s2") == pytest.approx((0.5 + 4 * p, 0.5 + 4 * (1 - p)))
    assert b.p_zero_variance("s2", 4) > jeffreys
    assert b.p_zero_variance("t0", 4) == pytest.approx(jeffreys)     # another task borrows nothing
    b.observe("s2", [1.0, 0.0, 1.0, 1.0])                            # its own evidence replaces the borrowed prior
    assert b.belief("s2")[0] > b.belief("s2")[1]
