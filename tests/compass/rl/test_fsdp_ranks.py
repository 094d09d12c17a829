"""The ``fsdp`` trainer on two ranks: Ray actors in a placement group joined by gloo (real Ray on loopback, the
tiny Qwen3-MoE). Two ranks compute what one rank computes (gradients, losses, weights after steps), a state
saved on one rank count resumes on another, the RL engine runs with two ranks beside Ray rollout workers, and
a rank killed mid-run ends in one retryable line inside the engine, which builds a new group and resumes."""
from __future__ import annotations

import copy
import json
import logging
import os
import signal

import pytest
import torch

from compass.lm.model_factory import ModelConfig, build_model
from compass.rl.config import RLConfig
from compass.rl.engine import train
from compass.rl.sampling.prompt_data import RLPrompt
from compass.rl.trainer import fsdp_trainer
from compass.rl.trainer.fsdp_trainer import FsdpTrainer
from compass.runtime.runner import is_infra_error
from tests.compass.rl.test_fsdp_trainer import _own_process_group, cfg_for, make_batch  # noqa: F401  (autouse)
from tests.compass.rl.test_ray import TEXTS, threads, tok  # noqa: F401

pytestmark = [pytest.mark.ray, pytest.mark.slow]

# each rank one torch thread, the in-process rank too: sums then run in the same order where they can
TWO = {"kind": "fsdp", "ranks": 2, "threads_per_rank": 1, "cpus_per_rank": 0.5}   # two groups fit 2 CPUs


@pytest.fixture(scope="module")
def model(tok):
    return build_model(ModelConfig(), tok, seed=4)


def test_two_ranks_compute_what_one_rank_computes(ray_up, tok, model):
    """Same batch, same weights: the gradient (to 1e-5 of its largest entry: each rank sums its rows, then the
    ranks' sums are added), two updates' losses and norms (1e-5 relative), and the weights after them (to 1% of
    how far the steps moved them). The cap of 18 tokens gives the ranks different numbers of micro-batches, so
    the zero-weighted padding micro-batch runs too; a one-row batch leaves rank 1 with no rows at all."""
    from compass.rl.trainer.torch_trainer import token_micro_batches
    batch, mask, adv = make_batch(tok)
    halves = batch["attention_mask"].tensor_split(2)
    assert len(token_micro_batches(halves[0], 18)) != len(token_micro_batches(halves[1], 18))     # padding runs
    one = {k: v[:1] for k, v in batch.items()}
    out = {}
    with threads(1):
        for ranks in (1, 2):
            cfg = cfg_for({**TWO, "ranks": ranks, "micro_batch_tokens": 18})
            trainer = FsdpTrainer(copy.deepcopy(model), cfg)
            try:
                old, _ = trainer.logprobs(batch)
                grads = trainer.gradients(batch, adv, old + 0.05 * mask, cfg)
                metrics = [trainer.update(batch, adv, old + 0.05 * mask, cfg) for _ in range(2)]
                metrics.append(trainer.update(one, adv[:1], old[:1], cfg))      # rank 1: no rows, padding only
                out[ranks] = (old, grads, metrics, trainer.hf_state_dict())
                ref = trainer.hf_state_dict_ref()            # for rollout actors: rank 0's weights, left in Ray
                if ranks == 1:
                    assert ref is None
                else:
                    import ray
                    assert isinstance(ref, ray.ObjectRef)
                    assert all(torch.equal(v, out[2][3][k]) for k, v in ray.get(ref).items())
            finally:
                trainer.close()
    (o1, g1, m1, w1), (o2, g2, m2, w2) = out[1], out[2]
    assert torch.allclose(o1, o2, atol=1e-6)
    top = max(float(g.abs().max()) for g in g1.values())
    assert top > 1e-3 and set(g1) == set(g2)
    for k in g1:
        assert torch.allclose(g1[k], g2[k], rtol=0, atol=1e-5 * top), k
    for a, b in zip(m1, m2):
        for k in ("loss", "entropy", "grad_norm", "updated"):
            assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-7), k
    start = model.state_dict()
    moved = max(float((w1[k] - start[k]).abs().max()) for k in w1)
    assert moved > 1e-3
    assert max(float((w1[k] - w2[k]).abs().max()) for k in w1) <= 0.01 * moved


def test_a_state_saved_on_two_ranks_resumes_on_one_and_back(ray_up, tok, model):
    """Gathered checkpoints: a state from two ranks, loaded into a fresh one-rank trainer, and that trainer's next
    state loaded into a fresh two-rank group: each next update is the uninterrupted run's (to float rounding)."""
    batch, mask, adv = make_batch(tok, seed=1)
    with threads(1):
        two = FsdpTrainer(copy.deepcopy(model), cfg_for(TWO))
        one = FsdpTrainer(copy.deepcopy(model), cfg_for({**TWO, "ranks": 1}))
        again = None
        try:
            cfg = cfg_for(TWO)
            old, _ = two.logprobs(batch)
            two.update(batch, adv, old, cfg)
            state = two.state_dict()
            assert state["ranks"] == 2 and state["steps"] == 1
            one.load_state_dict(state)
            m_two, m_one = two.update(batch, adv, old, cfg), one.update(batch, adv, old, cfg)
            assert m_one["loss"] == pytest.approx(m_two["loss"], rel=1e-6)
            assert m_one["grad_norm"] == pytest.approx(m_two["grad_norm"], rel=1e-5)
            again = FsdpTrainer(copy.deepcopy(model), cfg)
            again.load_state_dict(one.state_dict())
            assert again.steps == 2
            m_two, m_again = two.update(batch, adv, old, cfg), again.update(batch, adv, old, cfg)
            assert m_again["grad_norm"] == pytest.approx(m_two["grad_norm"], rel=1e-5)
            w2, wa, w1 = two.hf_state_dict(), again.hf_state_dict(), model.state_dict()
            moved = max(float((w2[k] - w1[k]).abs().max()) for k in w2)
            assert max(float((w2[k] - wa[k]).abs().max()) for k in w2) <= 0.01 * moved
        finally:
            for t in (two, one, again):
                if t is not None:
                    t.close()


# -- the engine on two ranks ----------------------------------------------------------------------------------

PROMPTS = [RLPrompt(f"p{i}", t, "x", json.dumps({"type": "test"}), "math", "a") for i, t in enumerate(TEXTS)]
RUN = RLConfig(steps=3, checkpoint_every=0, sampling={"prompts_per_step": 3, "group_size": 2},
               rollout={"max_new_tokens": 6}, trainer={"lr": 1e-2, "backend": {"kind": "fsdp", "ranks": 1}})
LOG = "compass.rl.fsdp_test"


def _score(verifier, response, reference):
    return float(len(response) % 3 == 0)


def _run(tok, cfg, state_dir=None, kill_after=None):
    """``train`` on the tiny model; with ``kill_after``, SIGKILL of rank 1's process in that step's callback."""
    made, killed = [], []

    class Recording(FsdpTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    def on_step(step, row, model):
        if step == kill_after and not killed:
            pid = made[0].rank_pids()[1]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    with pytest.MonkeyPatch.context() as mp, threads(1):
        mp.setitem(fsdp_trainer.TRAINER_BACKENDS, "fsdp", Recording)
        res = train(build_model(ModelConfig(), tok, seed=8), tok, PROMPTS, cfg, score_fn=_score, state_dir=state_dir,
                    on_step=on_step if kill_after is not None else None, log=logging.getLogger(LOG))
    return res, killed, made


@pytest.fixture(scope="module")
def one_process(ray_up, tok):
    return _run(tok, RUN)[0]


def test_a_rank_killed_mid_run_restarts_the_group_and_resumes(ray_up, tok, tmp_path, caplog, one_process):
    """Reasoning RL with the trainer on two Ray ranks and the rollout in a Ray worker (one worker keeps the
    sampling seed), and SIGKILL of rank 1 after step 1's callback: the next collective cannot finish, so the group
    is ended with one retryable line naming the rank and the call; the engine builds a new group from the first
    weights, restores the state saved after step 1 and goes on. The run gives the same samples, rewards and
    update metrics as one in-process rank with an in-process rollout, the steps before the kill and after it."""
    cfg = RUN.model_copy(deep=True)
    cfg.trainer.backend = cfg_for(TWO).trainer.backend
    cfg.rollout.workers = 1
    cfg.checkpoint_every = 1
    with caplog.at_level(logging.WARNING, logger=LOG):
        res, killed, made = _run(tok, cfg, state_dir=tmp_path / "state", kill_after=1)
    assert made[0].on_ray and made[0].ranks == 2
    assert len(killed) == 1 and made[0].restarts == 1 and res.summary()["trainer_restarts"] == 1
    assert [m["step"] for m in res.metrics] == [0, 1, 2]
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == LOG]
    assert "\n" not in line and "fsdp trainer (2 ranks): rank 1 of 2 died during " in line, line
    assert "resumed at step 2 of 3" in line, line
    assert [r["response"] for r in res.rollouts] == [r["response"] for r in one_process.rollouts]
    assert [r["reward"] for r in res.rollouts] == [r["reward"] for r in one_process.rollouts]
    assert any(m["updated"] == 1.0 for m in res.metrics)
    for a, b in zip(res.metrics, one_process.metrics):
        for k in ("reward_mean", "loss", "grad_norm", "entropy", "tokens"):
            assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-6), (a["step"], k)


def test_a_killed_rank_outside_the_engine_is_one_retryable_line(ray_up, tok, model):
    batch, mask, adv = make_batch(tok)
    trainer = FsdpTrainer(copy.deepcopy(model), cfg_for(TWO))
    try:
        first = trainer.logprobs(batch)
        os.kill(trainer.rank_pids()[0], signal.SIGKILL)
        with pytest.raises(Exception) as e:
            trainer.logprobs(batch)
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith("fsdp trainer (2 ranks): rank 0 of 2 died during logprobs"), msg
        assert is_infra_error(e.value)
        with pytest.raises(RuntimeError, match="the group is closed"):
            trainer.logprobs(batch)
        trainer.restart()
        assert trainer.restarts == 1
        assert torch.equal(trainer.logprobs(batch)[0], first[0])         # a fresh group from the first weights
    finally:
        trainer.close()


def test_a_group_the_cluster_cannot_place_says_what_is_missing(ray_up, caplog, monkeypatch):
    """Bundles larger than the cluster: a warning line while it waits, then one error naming the bundles, the
    strategy and what the cluster has free (without Ray's bookkeeping entries)."""
    from compass.dist import rank_group
    monkeypatch.setattr(rank_group, "WAIT_LOG_S", 1.0)
    with caplog.at_level(logging.WARNING, logger="compass.dist"), \
            pytest.raises(RuntimeError, match=r"ranks: 2 bundle\(s\) of \{'CPU': 64.0\} \(PACK\) could not be placed "
                                              r"in 3 s; the cluster has free \{") as e:
        rank_group.RankGroup(dict, (), world_size=2, bundle={"CPU": 64}, ready_timeout_s=3.0)
    assert "bundle_group_" not in str(e.value) and "node:" not in str(e.value)
    waits = [r.getMessage() for r in caplog.records if r.name == "compass.dist"]
    assert waits and all(w.startswith("ranks: waiting ") for w in waits)
