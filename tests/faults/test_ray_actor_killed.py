"""A Ray rollout actor killed (SIGKILL of its process) while it generates: the pool raises one clear,
retryable error naming the actor (the Prefect task retries infrastructure errors, and an RL stage re-run
resumes from its saved state), closing the pool still works, and a new pool generates again. The
evaluation's sampler (``compass.rl.rollout_sampler.open_sampler`` with workers) generates through this
same pool, so the same holds there."""
from __future__ import annotations

import os
import signal
import threading

import pytest

from compass.lm.chat import chat_prefix
from compass.rl.rollout import SamplingParams
from compass.rl.rollout_ray import RayRolloutPool
from compass.runtime.runner import is_infra_error
from compass.rl.trainer_ray import RayTrainer
from tests.compass.rl.test_ray import CFG, _batch, model, prompts, ray_up, tok  # noqa: F401  (a loopback Ray, the tiny model)

import ray  # noqa: I001  (after compass.rl.ray_cluster, which sets Ray's environment)

pytestmark = pytest.mark.slow

# Enough work that each actor is still generating when the kill lands 1 s in, on a quiet machine too
# (the pool raises at the first dead actor and kills the other: the size costs nothing after that).
TEXTS = ["1+1=?", "What is 12 times 7?", "Sort 3, 1, 2.", "hi", "Name a prime number."] * 40
LONG = SamplingParams(max_new_tokens=200, temperature=1.0, seed=3)   # long enough to be caught generating


def _kill_when_busy(pid: int) -> threading.Timer:
    t = threading.Timer(1.0, os.kill, (pid, signal.SIGKILL))
    t.start()
    return t


def test_rollout_actor_killed_mid_generation(ray_up, model, tok):
    ids = [tok(chat_prefix(tok, t), add_special_tokens=False)["input_ids"] for t in TEXTS]
    pool = RayRolloutPool("hf", model, tok, workers=2)
    pids = ray.get([a.ready.remote() for a in pool.actors])
    timer = _kill_when_busy(pids[1])
    try:
        with pytest.raises(Exception) as e:
            pool.generate(ids, 2, LONG)
    finally:
        timer.join()
        pool.close()                              # a dead actor does not stop the close
    msg = str(e.value)
    assert "\n" not in msg and "rollout pool (hf)" in msg and "actor 1 of 2 died" in msg, msg
    assert is_infra_error(e.value)                # retried by flows/stage_task.py
    assert pool.actors == []
    again = RayRolloutPool("hf", model, tok, workers=2)    # Ray itself is fine: a new pool works
    try:
        out = again.generate(ids[:3], 1, SamplingParams(max_new_tokens=4, temperature=1.0, seed=0))
        assert len(out) == 3 and all(len(g) == 1 for g in out)
    finally:
        again.close()


def test_trainer_actor_killed(ray_up, model, tok, prompts):
    """The RL trainer's Ray actor SIGKILLed between two calls: the next call raises one retryable line
    naming the trainer and the call, and the trainer is closed."""
    remote = RayTrainer("torch", model, CFG, threads=1)
    try:
        batch = _batch(tok, prompts)
        remote.logprobs(batch)                              # alive: it answers
        os.kill(ray.get(remote._actor.pid.remote()), signal.SIGKILL)
        with pytest.raises(Exception) as e:
            remote.logprobs(batch)
    finally:
        remote.close()
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("trainer (torch): its Ray actor died during logprobs"), msg
    assert is_infra_error(e.value)
    with pytest.raises(RuntimeError, match="closed"):
        remote.logprobs(batch)
