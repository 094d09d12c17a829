"""The RL prompt pool graded by the starting policy (compass.rl.sampling.pool): draw, grade, select, report."""
from __future__ import annotations

import pytest

from compass.rl.config import PoolConfig
from compass.rl.sampling.pool import Graded, build_pool, draw_candidates, grade, pool_table, report, select
from compass.rl.sampling.prompt_data import RLPrompt
from tests.helpers import MATH_VERIFIER


def prompts(n: int, domain: str = "math") -> list[RLPrompt]:
    return [RLPrompt(id=f"p{i}", prompt=f"{i}+1=?", reference=str(i + 1), verifier=MATH_VERIFIER, domain=domain,
                     task="arith") for i in range(n)]


def test_draw_is_seeded_distinct_and_bounded():
    ps = prompts(50)
    a, b, c = draw_candidates(ps, 20, seed=3), draw_candidates(ps, 20, seed=3), draw_candidates(ps, 20, seed=4)
    assert [p.id for p in a] == [p.id for p in b] != [p.id for p in c]
    assert len({p.id for p in a}) == 20
    assert len(draw_candidates(ps, 500, seed=0)) == 50


def test_grade_counts_passes_above_the_threshold_and_tokens_with_the_gym_verifier():
    """A generator that answers prompt i correctly on its first i % 5 samples (of 4): passes are exactly
    min(i % 5, 4), scored by the real math verifier; every batch gets its own seed."""
    ps = prompts(12)
    seeds = []

    def generate(texts, *, n, max_new_tokens, temperature, seed):
        seeds.append(seed)
        out = []
        for t in texts:
            i = int(t.split("+")[0])
            out.append([{"text": f"\\boxed{{{i + 1 if s < i % 5 else -7}}}", "ids": [1] * (s + 1)}
                        for s in range(n)])
        return out

    def score_group(p, texts):
        from compass.gym.score import score
        return [score(p.verifier, t, p.reference) for t in texts]

    g = grade(ps, generate, score_group, k=4, max_new_tokens=8, temperature=1.0, pass_threshold=0.5, seed=100,
              batch_size=5)
    assert [x.passes for x in g] == [min(i % 5, 4) for i in range(12)]
    assert all(x.tokens == 1 + 2 + 3 + 4 for x in g) and seeds == [100, 101, 102]
    assert g[2].pass_rate == 0.5


def _graded(passes: list[int], k: int = 4) -> list[Graded]:
    return [Graded(p, n, k, 10 * k) for p, n in zip(prompts(len(passes)), passes)]


def test_select_drops_always_and_never_solved_keeps_size_in_order_and_sets_the_measured_pass_rate():
    g = _graded([4, 0, 1, 2, 4, 3, 0, 2])
    kept, why = select(g, size=3, drop_always_solved=True, drop_never_solved=True)
    assert [p.id for p in kept] == ["p2", "p3", "p5"] and [p.pass_rate for p in kept] == [0.25, 0.5, 0.75]
    assert why == ["always_solved", "never_solved", "kept", "kept", "always_solved", "kept", "never_solved",
                   "over_size"]
    kept, why = select(g, size=100, drop_always_solved=False, drop_never_solved=False)
    assert len(kept) == 8 and set(why) == {"kept"}


def test_report_and_table_say_what_was_graded_and_what_became_of_it():
    g = _graded([4, 0, 1, 2, 4, 3, 0, 2])
    kept, why = select(g, size=3, drop_always_solved=True, drop_never_solved=False)
    rep = report(g, why, 1.234)
    assert rep["pool_graded"] == 8 and rep["pool_tokens"] == 8 * 40 and rep["pool_grading_s"] == 1.2
    assert rep["pool_all_pass_share"] == 0.25 and rep["pool_all_fail_share"] == 0.25
    assert rep["pool_dropped_always_solved"] == 2 and rep["pool_dropped_never_solved"] == 0
    assert rep["pool_kept"] == 3 and rep["pool_over_size"] == 3
    assert rep["pool_kept_mean_pass_rate"] == pytest.approx((0 + 0.25 + 0.5) / 3)
    assert rep["pool_kept_by_domain"] == {"math": 3}
    t = pool_table(g, why)
    assert t.num_rows == 8 and t.column("outcome").to_pylist() == why
    assert t.column("passes").to_pylist() == [4, 0, 1, 2, 4, 3, 0, 2]


def test_build_pool_grades_with_a_real_model_and_its_rollout_backend():
    """The default world's random model through the native decoder: the grades it measures are what the table
    says, the kept prompts carry them as pass rates, and the drops act on them."""
    from compass.gym.score import judge
    from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
    tok = build_tokenizer("")
    model = build_model(ModelConfig(), tok, seed=0)
    kw = dict(rollout_backend="auto", temperature=1.0, max_new_tokens=6, pass_threshold=0.5, score_fn=judge, seed=0)
    kept, table, rep = build_pool(model, tok, prompts(10), PoolConfig(size=4, candidates=6, k=2), **kw)
    rows = table.to_pylist()
    assert rep["pool_graded"] == 6 == len(rows) and 6 * 2 <= rep["pool_tokens"] <= 6 * 2 * 6
    assert rep["pool_tokens"] == sum(r["tokens"] for r in rows)
    want = [r for r in rows if r["outcome"] == "kept"]
    assert [p.id for p in kept] == [r["prompt_id"] for r in want][:4]
    assert [p.pass_rate for p in kept] == [r["passes"] / 2 for r in want]
    assert rep["pool_all_fail_share"] == sum(r["passes"] == 0 for r in rows) / 6
    assert {r["outcome"] for r in rows if r["passes"] == 2} <= {"always_solved"}
    assert model.training                            # left as it was found
    again, t2, rep2 = build_pool(model, tok, prompts(10), PoolConfig(size=4, candidates=6, k=2,
                                                                     drop_never_solved=True), **kw)
    assert t2.column("passes").to_pylist() == table.column("passes").to_pylist()      # seeded: the same grades
    assert rep2["pool_dropped_never_solved"] == sum(r["passes"] == 0 for r in rows)
    assert all(p.pass_rate > 0 for p in again)
