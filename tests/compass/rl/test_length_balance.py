"""The rollout split by predicted length (paper §3.1.1): partitioners, ordering, schedule metrics, and the
length predictor, checked by hand and against brute force."""
from __future__ import annotations

import itertools
import random

import pytest

from compass.rl.sampling.length_balance import (PARTITIONERS, get_partitioner, karmarkar_karp, longest_first, lpt,
                                       round_robin, schedule_metrics, split_quality)
from compass.rl.sampling.length_predict import LengthPredictor, prediction_error


def _best_makespan(work, workers):
    best = float("inf")
    for assign in itertools.product(range(workers), repeat=len(work)):
        loads = [0.0] * workers
        for i, k in enumerate(assign):
            loads[k] += work[i]
        best = min(best, max(loads))
    return best


@pytest.mark.parametrize("name", sorted(PARTITIONERS))
def test_every_partitioner_assigns_each_prompt_once(name):
    rng = random.Random(0)
    for workers in (1, 2, 3, 5):
        for size in (0, 1, 4, 17):
            work = [rng.expovariate(0.01) for _ in range(size)]
            shards = get_partitioner(name)(work, workers)
            assert len(shards) == workers
            assert sorted(i for s in shards for i in s) == list(range(size))


def test_round_robin_lpt_and_kk_by_hand():
    assert round_robin([1, 1, 1, 1, 1], 2) == [[0, 2, 4], [1, 3]]
    # LPT: 8 -> w0, 7 -> w1, 6 -> w1 (7 < 8), 5 -> w0, 4 -> w0 (13 = 13: lower worker)
    assert lpt([5, 8, 4, 7, 6], 2) == [[0, 1, 2], [3, 4]]
    # 8 7 6 5 4 into two (optimum 15 | 15): LPT ends 17 | 13; differencing 8-7, 6-5, 4-1, 3-1 ends 16 | 14
    w = [8, 7, 6, 5, 4]
    assert max(sum(w[i] for i in s) for s in lpt(w, 2)) == 17
    assert max(sum(w[i] for i in s) for s in karmarkar_karp(w, 2)) == 16


def test_lpt_and_kk_within_their_bounds_of_the_optimum():
    rng = random.Random(1)
    for _ in range(30):
        work = [rng.choice([rng.randint(1, 20), rng.randint(50, 400)]) for _ in range(rng.randint(3, 9))]
        for workers in (2, 3):
            best = _best_makespan(work, workers)
            for fn in (lpt, karmarkar_karp):
                span = max(sum(work[i] for i in s) for s in fn(work, workers))
                assert span <= (4 / 3 - 1 / (3 * workers)) * best + 1e-9 or fn is karmarkar_karp, (work, workers)
                assert span >= best


def test_bad_work_is_refused_naming_the_entry():
    with pytest.raises(ValueError, match=r"work\[1\]"):
        lpt([1.0, float("nan")], 2)
    with pytest.raises(ValueError, match="workers"):
        karmarkar_karp([1.0], 0)
    with pytest.raises(ValueError, match="unknown rollout partitioner 'nope'"):
        get_partitioner("nope")


def test_longest_first_and_metrics():
    assert longest_first([0, 1, 2, 3], [1, 9, 9, 4]) == [1, 2, 3, 0]
    m = schedule_metrics([2.0, 1.0, 1.5])
    assert m["makespan_s"] == 2.0 and m["idle_share_per_worker"] == [0.0, 0.5, 0.25]
    assert m["idle_share"] == pytest.approx(0.25)
    q = split_quality([[0], [1, 2]], [10.0, 4.0, 2.0])
    assert q["ideal_tokens"] == 10.0 and q["makespan_over_ideal"] == 1.0       # the largest item bounds it
    q = split_quality([[0, 1], [2]], [4.0, 4.0, 4.0])
    assert q["makespan_over_ideal"] == pytest.approx(8.0 / 6.0)


def test_predictor_sources_in_order_and_state_round_trip():
    p = LengthPredictor(100, decay=0.5, draft_tokens=8)
    assert p.predict("a", "math") == (100.0, "budget") and p.needs_draft("a")
    assert p.predict("a", "math", draft=(5, True)) == (5.0, "draft")
    assert p.predict("a", "math", draft=(8, False)) == (100.0, "draft")         # past the cap, nothing seen yet
    p.observe("a", "math", [10, 30])
    assert p.predict("a", "math") == (20.0, "history") and not p.needs_draft("a")
    assert p.predict("b", "math") == (20.0, "task")
    assert p.predict("c", "code") == (20.0, "run")
    assert p.predict("c", "code", draft=(8, False)) == (20.0, "draft")          # the mean of samples past the cap
    p.observe("a", "math", [40, 40])
    assert p.predict("a", "math")[0] == pytest.approx(30.0)                     # 0.5 * 20 + 0.5 * 40
    q = LengthPredictor(100, draft_tokens=8)
    q.load_state(p.state())
    assert q.predict("a", "math") == p.predict("a", "math") and q.predict("z", "code") == p.predict("z", "code")


def test_prediction_error():
    e = prediction_error([10.0, 30.0], [20.0, 20.0])
    assert e["length_pred_mae_tokens"] == 10.0 and e["length_pred_rel_error"] == 0.5
    assert prediction_error([], [])["length_pred_rel_error"] == 0.0
