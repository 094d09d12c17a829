"""A Ray rollout actor killed (SIGKILL of its process) mid-step: the samples it had not returned go to the live
actor, the step ends with every (prompt, sample) exactly once, and the pool replaces the dead actor for the
next step. With no live actor left the call is one retryable InfraError line (the stage task's retry resumes
from the saved RL state)."""
from __future__ import annotations

import os
import signal
import threading

import pytest

from compass.lm.chat import chat_prefix
from compass.rl.rollout.base import SamplingParams
from compass.rl.rollout.ray_pool import RayRolloutPool
from compass.runtime.runner import is_infra_error
from tests.compass.rl.test_ray import model, tok  # noqa: F401  (the tiny model)

import ray  # noqa: I001  (after compass.rl.ray_cluster, which sets Ray's environment)

pytestmark = [pytest.mark.slow, pytest.mark.ray]

TEXTS = ["1+1=?", "What is 12 times 7?", "Sort 3, 1, 2.", "hi", "Name a prime number."] * 40
LONG = SamplingParams(max_new_tokens=400, temperature=1.0, seed=3)   # long enough to be caught generating


def _ids(tok):
    return [tok(chat_prefix(tok, t), add_special_tokens=False)["input_ids"] for t in TEXTS]


def _kill_when_busy(pool, victims: list[int], after_s: float = 0.5):
    """SIGKILL the ``victims`` actors' processes ``after_s`` into the call (mid-generation: the work below
    takes each actor several seconds); returns the timer and the actors' pids."""
    pids = ray.get([a.pid.remote() for a in pool.actors])
    timer = threading.Timer(after_s, lambda: [os.kill(pids[k], signal.SIGKILL) for k in victims])
    timer.start()
    return timer, pids


def test_killed_actor_samples_resent_each_exactly_once(ray_up, model, tok):
    ids = _ids(tok)
    n = 2
    pool = RayRolloutPool("native", model, tok, workers=2)
    try:
        timer, pids = _kill_when_busy(pool, [1])
        got: list[tuple[int, int]] = []
        texts = {}
        for done in pool.generate_samples(ids, n, LONG):
            got.extend((i, s) for i, s, _ in done)
            texts.update({(i, s): c.ids for i, s, c in done})
        timer.join()
        assert len(got) == len(ids) * n and len(set(got)) == len(got)           # none missing, none twice
        assert set(got) == {(i, s) for i in range(len(ids)) for s in range(n)}
        sched = pool.last_schedule
        assert sched["actors_lost"] == 1 and sched["resent_samples"] > 0, sched
        new_pid = ray.get(pool.actors[1].pid.remote())                           # replaced, and it works
        assert new_pid != pids[1]
        # the re-sent samples are the very ones the dead actor would have made (per-sample random streams)
        again = pool.generate(ids, n, LONG)
        assert all(again[i][s].ids == texts[(i, s)] for i, s in got)
        out = pool.generate(ids[:6], 2, SamplingParams(max_new_tokens=4, seed=1))
        assert all(len(g) == 2 and all(c is not None for c in g) for g in out)
        assert pool.last_schedule["actors_lost"] == 0
    finally:
        pool.close()


def _error_of_a_killed_call(model, tok, victims: list[int], **pool_options) -> Exception:
    """The error of one long ``generate`` whose ``victims`` actors are SIGKILLed mid-call; the pool closed."""
    pool = RayRolloutPool("native", model, tok, workers=2, **pool_options)
    timer, _ = _kill_when_busy(pool, victims)
    try:
        with pytest.raises(Exception) as e:
            pool.generate(_ids(tok), 2, LONG)
    finally:
        timer.join()
        pool.close()
    assert pool.actors == []
    return e.value


def test_no_live_actor_left_is_one_infra_error_line(ray_up, model, tok):
    err = _error_of_a_killed_call(model, tok, [0, 1])
    msg = str(err)
    assert "\n" not in msg and "rollout pool (native)" in msg and "no actor is left" in msg, msg
    assert is_infra_error(err)


def test_restarts_spent_is_one_infra_error_line(ray_up, model, tok):
    err = _error_of_a_killed_call(model, tok, [1], max_actor_restarts=0)
    msg = str(err)
    assert "\n" not in msg and "restarts are spent" in msg and is_infra_error(err), msg
