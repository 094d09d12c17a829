"""Ray actors of the RL engine killed for real (SIGKILL of the actor's process).

The trainer's actor killed between two calls: the next call raises one clear, retryable line naming the trainer
and the call (the Prefect task retries infrastructure errors, and an RL stage re-run resumes from its saved state).
Inside an RL run with a saved state the engine restarts the actor and resumes from that state itself, so the run
ends as an uninterrupted one does. (A killed rollout actor: ``test_rollout_actor_redispatch.py``.)"""
from __future__ import annotations

import collections
import json
import logging
import os
import signal

import pytest
import torch

from compass.lm.model_factory import ModelConfig, build_model
from compass.rl.trainer import ray_actor as trainer_ray
from compass.rl.algos.advantages import over_tokens
from compass.rl.config import RLConfig
from compass.rl.sampling.prompt_data import RLPrompt
from compass.rl.engine import train
from compass.runtime.runner import is_infra_error
from compass.rl.trainer.ray_actor import RayTrainer
from tests.compass.rl.test_ray import CFG, TEXTS as RL_TEXTS, _batch, threads  # noqa: F401
from tests.compass.rl.test_ray import model, prompts, tok  # noqa: F401  (the tiny model)

import ray  # noqa: I001  (after compass.rl.ray_cluster, which sets Ray's environment)

pytestmark = [pytest.mark.slow, pytest.mark.ray]


def test_trainer_actor_killed(ray_up, model, tok, prompts):
    """The RL trainer's Ray actor SIGKILLed between two calls: the next call raises one retryable line
    naming the trainer and the call, and the trainer is closed. ``restart()`` brings a fresh actor with the
    weights the trainer was built from; loading a saved state into it gives the trained trainer back."""
    remote = RayTrainer("torch", model, CFG, threads=1)
    try:
        batch = _batch(tok, prompts)
        first = remote.logprobs(batch)                      # alive: it answers
        adv = over_tokens(torch.tensor([1.0, -1.0, 0.5, -0.5]), batch["completion_mask"][:, 1:])
        remote.update(batch, adv, None, CFG)
        saved, trained = remote.state_dict(), remote.logprobs(batch)
        pid = remote.actor_pid()
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(Exception) as e:
            remote.logprobs(batch)
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith("trainer (torch): its Ray actor died during logprobs"), msg
        assert is_infra_error(e.value) and isinstance(e.value, trainer_ray.TrainerActorDied)
        with pytest.raises(RuntimeError, match="closed"):
            remote.logprobs(batch)
        remote.restart()
        assert remote.actor_pid() != pid and remote.restarts == 1
        assert all(torch.equal(a, b) for a, b in zip(remote.logprobs(batch), first))     # the first weights
        remote.load_state_dict(saved)
        assert all(torch.equal(a, b) for a, b in zip(remote.logprobs(batch), trained))
    finally:
        remote.close()
    with pytest.raises(RuntimeError, match="not restartable"):
        remote.restart()


# -- the trainer actor killed inside an RL run -----------------------------------------------------------

RL_PROMPTS = [RLPrompt(f"p{i}", t, "x", json.dumps({"type": "test"}), "math", "a") for i, t in enumerate(RL_TEXTS)]
# one rollout actor (its weights come from the trainer actor by reference) and the trainer in an actor; the
# rollout's length history is part of the saved RL state, so the resumed run splits as the uninterrupted one
RUN = RLConfig(steps=4, sampling={"prompts_per_step": 3, "group_size": 2}, trainer={"lr": 1e-2, "actor": True},
               rollout={"max_new_tokens": 6, "workers": 1})
LOG = "compass.rl.fault_test"


def _score(verifier, response, reference):
    return float(len(response) % 3 == 0)


def _run(tok, cfg, *, state_dir=None, kill_after=()):
    """``train`` on the tiny model, SIGKILLing the trainer's actor (its real process) in the ``on_step``
    callback of each step in ``kill_after`` (once per step, though a resumed run calls it again);
    returns the result and the killed pids."""
    made, killed = [], []

    class Recording(RayTrainer):            # the engine's trainer, so the test can find its actor
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    def on_step(step, row, model):
        if step in kill_after and step not in [s for s, _ in killed]:
            pid = made[0].actor_pid()
            os.kill(pid, signal.SIGKILL)
            killed.append((step, pid))
    with pytest.MonkeyPatch.context() as mp, threads(1):     # one thread: runs compare bit for bit
        mp.setattr(trainer_ray, "RayTrainer", Recording)
        res = train(build_model(ModelConfig(), tok, seed=8), tok, RL_PROMPTS, cfg, score_fn=_score,
                    state_dir=state_dir, on_step=on_step if kill_after else None, log=logging.getLogger(LOG))
    return res, killed, made


@pytest.fixture(scope="module")
def uninterrupted(ray_up, tok):
    res, _, _ = _run(tok, RUN.model_copy(update={"checkpoint_every": 0}))
    return res


@pytest.mark.parametrize("every,kill_after", [(1, 1), (2, 2)], ids=["saved-every-step", "row-logged-not-saved"])
def test_trainer_actor_killed_mid_run_resumes_from_the_saved_state(ray_up, tok, tmp_path, caplog, uninterrupted,
                                                                   every, kill_after):
    """SIGKILL of the trainer actor after step ``kill_after``'s callback: the next step's update meets the dead
    actor, the engine starts a fresh one from the first weights, restores the last saved RL state and goes on.
    With ``checkpoint_every=2`` the killed step's row was logged but not saved: the restore drops it, and the
    step is run again. The run ends as the uninterrupted one did, one metrics row and one set of rollouts a step."""
    cfg = RUN.model_copy(update={"checkpoint_every": every})
    with caplog.at_level(logging.WARNING, logger=LOG):
        res, killed, made = _run(tok, cfg, state_dir=tmp_path / "state", kill_after={kill_after})
    assert len(killed) == 1
    assert [m["step"] for m in res.metrics] == [0, 1, 2, 3]                 # no gap, no duplicate
    per_step = collections.Counter(r["step"] for r in res.rollouts)
    assert per_step == {s: 3 * 2 for s in range(4)}
    assert len({(r["step"], r["prompt_id"], r["sample_idx"]) for r in res.rollouts}) == len(res.rollouts)
    assert res.summary()["trainer_restarts"] == 1 and made[0].restarts == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == LOG]
    resumed_at = (kill_after + 1) // every * every                        # the last save before the death
    assert len(warnings) == 1, warnings
    (line,) = warnings
    assert "\n" not in line
    assert line.startswith("rl: trainer (torch): its Ray actor died during ") and f"(at step {kill_after + 1})" in line
    assert f"trainer actor restarted (1 of at most 2), resumed at step {resumed_at} of 4" in line, line
    # the resumed run is the uninterrupted one: same samples, rewards and update metrics
    assert [r["response"] for r in res.rollouts] == [r["response"] for r in uninterrupted.rollouts]
    assert [r["reward"] for r in res.rollouts] == [r["reward"] for r in uninterrupted.rollouts]
    for a, b in zip(res.metrics, uninterrupted.metrics):
        for k in ("reward_mean", "loss", "grad_norm", "tokens"):
            assert a[k] == pytest.approx(b[k], rel=1e-6, abs=1e-7), (a["step"], k)


@pytest.mark.parametrize("with_state", [False, True], ids=["no-state-dir", "max-restarts-0"])
def test_trainer_actor_killed_without_a_state_or_restarts_ends_the_run(ray_up, tok, tmp_path, with_state):
    """Without a saved state (no ``state_dir``) or with ``trainer.max_restarts: 0`` the death ends the run with
    the one retryable line (the stage task's retry resumes from the saved state)."""
    cfg = RUN.model_copy(update={"checkpoint_every": 1, "steps": 3})
    if with_state:
        cfg = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"max_restarts": 0})})
    with pytest.raises(Exception) as e:
        _run(tok, cfg, state_dir=tmp_path / "state" if with_state else None, kill_after={0})
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("trainer (torch): its Ray actor died during "), msg
    assert is_infra_error(e.value)
    assert ("trainer.max_restarts=0 used up" in msg) == with_state
