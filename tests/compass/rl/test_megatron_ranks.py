"""The ``megatron`` trainer on two ranks: Ray actors in a placement group joined by gloo, megatron's tensor,
pipeline and expert parallelism each at 2 against one in-process rank (real Ray on loopback, real megatron-core,
a tiny Qwen3-MoE with 2 KV heads so that tensor parallelism can cut it). The same batch gives the same log-probs,
routes, gradients and updates; a state saved at one set of sizes resumes at another."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

from tests.compass.rl.test_fsdp_trainer import _own_process_group  # noqa: F401  (autouse)
from tests.compass.rl.test_ray import threads  # noqa: F401
# the tiny Qwen3-MoE of the one-rank tests: 4 heads over 2 KV heads, 4 experts top-2, 2 layers, vocabulary 300,
# weights drawn large (routing and log-probs far from uniform): every size here (2) divides what it cuts
from tests.compass.rl.test_trainer_megatron import hf_model, per_token, tok  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.ray, pytest.mark.slow]
warnings.filterwarnings("ignore", message=".*Transformer Engine.*")

# each rank one torch thread, the in-process rank too; two groups of 2 fit the loopback Ray's 2 CPUs
RANKS = {"kind": "megatron", "threads_per_rank": 1, "cpus_per_rank": 0.5}


@pytest.fixture(scope="module")
def batch(tok):
    """Five right-padded rows of different lengths (an odd width: tensor parallelism pads it; an odd row count:
    the data-parallel ranks get 3 and 2 rows)."""
    from compass.rl.trainer.batch import build_batch
    g = torch.Generator().manual_seed(1)
    lo = len(tok.all_special_ids)
    prefixes = [torch.randint(lo, len(tok), (n,), generator=g).tolist() for n in (5, 3, 7, 4, 6)]
    completions = [torch.randint(lo, len(tok), (n,), generator=g).tolist() for n in (6, 8, 2, 5, 4)]
    out = build_batch(prefixes, completions, tok.pad_token_id)
    assert out["input_ids"].shape[1] % 2 == 1
    return out


def cfg_for(**backend):
    from compass.rl.config import RLConfig
    return RLConfig(seed=0, trainer={"lr": 1e-3, "weight_decay": 0.01, "max_grad_norm": 1.0,
                                     "backend": {**RANKS, **backend}},
                    loss={"kind": "ppo_clip_token_mean"})


def run_all(model, batch, cfg, state=None, routed: bool = True):
    """On one trainer: log-probs, free routes, log-probs replaying them with the last 2 positions free (``routed``:
    a MoE model), the gradient, two updates, the weights and the state after them (``state``: loaded first)."""
    from compass.rl.trainer.megatron_trainer import MegatronTrainer
    tr = MegatronTrainer(copy.deepcopy(model), cfg)
    try:
        if state is not None:
            tr.load_state_dict(state)
        old, ent = tr.logprobs(batch)
        _, _, routes = tr.logprobs_with_routes(batch)
        partial = None
        if routed:
            partial = routes.clone()
            partial[:, -2:] = -1
        replayed, _ = tr.logprobs(batch, routes=partial)
        adv = per_token(torch.tensor([1.0, -0.5, 0.25, -1.0, 0.7])[:batch["input_ids"].shape[0]], batch)
        grads = tr.gradients(batch, adv, old + 0.05, cfg, routes=partial)
        metrics = [tr.update(batch, adv, old + 0.05, cfg, routes=partial) for _ in range(2)]
        held = tr.group.call("adam_held") if tr.group is not None else [tr._local.adam_held()]
        return {"old": old, "ent": ent, "routes": routes, "replayed": replayed, "grads": grads, "metrics": metrics,
                "weights": tr.hf_state_dict(), "state": tr.state_dict(), "steps": tr.steps, "held": held}
    finally:
        tr.close()


@pytest.fixture(scope="module")
def one_rank(hf_model, batch):
    with threads(1):
        return run_all(hf_model, batch, cfg_for(ranks=1))


def assert_same(a: dict, b: dict, start, batch, steps: int = 2):
    """Two runs agree: log-probs and entropies to 1e-5, routes exactly, gradients to 1e-5 of the largest
    entry, metrics to 1e-5 relative, weights after the steps to 1% of how far they moved from ``start`` (a
    model or its weights; all but 1e-4 of the elements, see below)."""
    valid = batch["attention_mask"][:, 1:].bool()
    for k in ("old", "ent", "replayed"):
        assert float((a[k] - b[k])[valid].abs().max()) <= 1e-5, k
    real = batch["attention_mask"].bool()
    if a["routes"] is not None:
        assert torch.equal(a["routes"].sort(-1).values[real], b["routes"].sort(-1).values[real])
    top = max(float(g.abs().max()) for g in a["grads"].values())
    assert top > 1e-3 and set(a["grads"]) == set(b["grads"])
    for k in a["grads"]:
        assert torch.allclose(a["grads"][k], b["grads"][k], rtol=0, atol=1e-5 * top), k
    for ma, mb in zip(a["metrics"], b["metrics"]):
        for k in ("loss", "entropy", "grad_norm", "updated", "clip_frac"):
            assert ma[k] == pytest.approx(mb[k], rel=1e-5, abs=1e-7), k
    start = start if isinstance(start, dict) else start.state_dict()
    moved = max(float((a["weights"][k] - start[k]).abs().max()) for k in start)
    assert moved > 1e-4
    # AdamW's step is ~lr * g / (|g| + eps): an element whose gradient is itself at rounding level (within the
    # gradients' own tolerance above, 1e-5 of the largest) moves by a rounding-dependent amount, which summing in
    # micro-batches and the CPU's kernels change (on a slower machine, tp2: one element 5.25% apart, its gradient
    # 8e-8 of the largest; every element above rounding level within 0.007%). So:
    # all but 1e-4 of the elements within 1% of how far the weights moved, none with a gradient above rounding
    # level beyond 5%, and the rounding-level ones no further apart than two such moves.
    diff = torch.cat([(a["weights"][k] - b["weights"][k]).abs().flatten() for k in start])
    rounding = torch.cat([(a["grads"][k].abs() <= 1e-5 * top).flatten() if k in a["grads"]
                          else torch.zeros(start[k].numel(), dtype=torch.bool) for k in start])
    assert float(diff[~rounding].max()) <= 0.05 * moved
    assert float(diff.max()) <= 2 * moved
    assert float((diff > 0.01 * moved).float().mean()) <= 1e-4
    assert a["steps"] == b["steps"] == steps


@pytest.mark.parametrize("sizes", [{"tensor_parallel": 2},
                                   {"expert_parallel": 2, "micro_batches": 2, "distributed_optimizer": True},
                                   {"pipeline_parallel": 2, "micro_batches": 3}],
                         ids=["tp2", "ep2-mb2-zero", "pp2-mb3"])
def test_two_ranks_compute_what_one_rank_computes(ray_up, hf_model, batch, one_rank, sizes):
    """Pipeline stages with 3 micro-batches run megatron's 1F1B schedule (6 rows: one zero-weighted padding row);
    the expert-parallel ranks split their 3 and 2 rows into 2 micro-batches each (4 rows, padded), with AdamW's
    state of the dense weights sharded over the two data-parallel ranks (each expert's has one owner anyway)."""
    with threads(1):
        two = run_all(hf_model, batch, cfg_for(ranks=2, **sizes))
    assert_same(one_rank, two, hf_model, batch)
    h0, h1 = two["held"]
    if sizes.get("distributed_optimizer"):      # each dense weight's moments on one of the two ranks only
        assert h0["params"] == h1["params"] and h0["params_held"] < h0["params"] and h1["params_held"] < h1["params"]
    else:
        assert h0["params_held"] == h0["params"] and h1["params_held"] == h1["params"]
    # the state is the full model's, whatever the sizes: the same names and shapes as one rank's
    s1, s2 = one_rank["state"], two["state"]
    assert {k: v.shape for k, v in s1["model"].items()} == {k: v.shape for k, v in s2["model"].items()}
    assert set(s1["adam"]["exp_avg"]) == set(s2["adam"]["exp_avg"])
    top = max(float(v.abs().max()) for v in s1["adam"]["exp_avg"].values())
    for k, v in s1["adam"]["exp_avg"].items():
        assert torch.allclose(v, s2["adam"]["exp_avg"][k], rtol=0, atol=0.02 * top), k


def test_a_state_saved_at_one_set_of_sizes_resumes_at_another(ray_up, hf_model, batch, one_rank):
    """Two steps on one rank, saved; two more steps from that state on tensor parallelism 2, on two data-parallel
    ranks with AdamW's state sharded over them (every moment kept by its owner only), and on one rank again: the
    same log-probs and weights (the Adam moments carried over, not restarted: a restart would move the weights
    differently)."""
    state = one_rank["state"]
    with threads(1):
        again = run_all(hf_model, batch, cfg_for(ranks=1), state=state)
        tp2 = run_all(hf_model, batch, cfg_for(ranks=2, tensor_parallel=2), state=state)
        zero = run_all(hf_model, batch, cfg_for(ranks=2, distributed_optimizer=True), state=state)
    assert again["steps"] == tp2["steps"] == zero["steps"] == 4
    valid = batch["attention_mask"][:, 1:].bool()
    assert float((again["old"] - one_rank["old"])[valid].abs().max()) > 1e-4       # it went on from the state
    assert float((again["old"] - tp2["old"])[valid].abs().max()) <= 1e-5
    assert float((again["old"] - zero["old"])[valid].abs().max()) <= 1e-5
    start = one_rank["weights"]
    moved = max(float((again["weights"][k] - start[k]).abs().max()) for k in start)
    for other in (tp2, zero):
        assert max(float((again["weights"][k] - other["weights"][k]).abs().max()) for k in start) <= 0.01 * moved
    # the sharded run's saved moments are whole: each gathered from its owner
    for k, v in again["state"]["adam"]["exp_avg"].items():
        assert torch.allclose(v, zero["state"]["adam"]["exp_avg"][k], rtol=0,
                              atol=1e-3 * float(v.abs().max()) + 1e-12), k
    fresh = run_all(hf_model, batch, cfg_for(ranks=1), state={**state, "adam": {k: {n: torch.zeros_like(t)
                                                                                     for n, t in v.items()}
                                                                                 for k, v in state["adam"].items()}})
    assert max(float((again["weights"][k] - fresh["weights"][k]).abs().max()) for k in start) > 0.1 * moved


def test_micro_batches_in_one_rank_compute_the_same_update(hf_model, batch, one_rank):
    with threads(1):
        split = run_all(hf_model, batch, cfg_for(ranks=1, micro_batches=2))
    assert_same(one_rank, split, hf_model, batch)


def test_sizes_the_model_or_world_cannot_take_are_refused(hf_model):
    from compass.lm.megatron_parallel import ParallelSizes
    from compass.rl.config import RLConfig
    with pytest.raises(ValueError, match="not a multiple of tensor_parallel x pipeline_parallel"):
        RLConfig(trainer={"backend": {"kind": "megatron", "ranks": 3, "tensor_parallel": 2}})
    # experts are cut over the tensor-parallel ranks too: 6 ranks cannot hold TP 2 x EP 2
    for ranks, ep in ((2, 4), (6, 2)):
        with pytest.raises(ValueError, match="not a multiple of tensor_parallel x expert_parallel x pipeline_parallel"):
            RLConfig(trainer={"backend": {"kind": "megatron", "ranks": ranks, "tensor_parallel": 2 if ranks == 6
                                          else 1, "expert_parallel": ep}})
        with pytest.raises(ValueError, match="not a multiple of tensor_parallel x expert_parallel"):
            ParallelSizes(tp=2 if ranks == 6 else 1, ep=ep).check(ranks, hf_model.config)
    with pytest.raises(ValueError, match="NCCL refuses two ranks on one GPU"):
        RLConfig(trainer={"backend": {"kind": "megatron", "ranks": 2, "gpus_per_rank": 0.5}})
    with pytest.raises(ValueError, match="does not divide the 2 KV heads"):
        ParallelSizes(tp=4).check(4, hf_model.config)
    with pytest.raises(ValueError, match="does not divide the 2 layers"):
        ParallelSizes(pp=4).check(4, hf_model.config)
    with pytest.raises(ValueError, match="does not divide moe_intermediate_size 32"):
        ParallelSizes(tp=64).check(64, hf_model.config)
    dense = copy.deepcopy(hf_model.config)
    dense.num_experts = 0
    with pytest.raises(ValueError, match="expert_parallel 2 on a dense model"):
        ParallelSizes(ep=2).check(2, dense)


def test_dense_qwen3_with_tied_embeddings_on_two_pipeline_stages(ray_up, tok):
    """A dense Qwen3 whose LM head is its embedding (as Qwen3's small models are): converted both ways exactly,
    and on two pipeline stages (the last one holds megatron's copy of the tied embedding) it computes what one
    rank computes."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from compass.lm.megatron_convert import hf_to_megatron, megatron_to_hf
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=128,
                      tie_word_embeddings=True, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg).eval()
    sd = model.state_dict()
    back = megatron_to_hf(hf_to_megatron(sd, cfg), cfg)
    assert set(back) == set(sd) and all(torch.equal(back[k], sd[k]) for k in sd)
    from compass.rl.trainer.batch import build_batch
    g = torch.Generator().manual_seed(2)
    lo = len(tok.all_special_ids)
    batch = build_batch([torch.randint(lo, len(tok), (n,), generator=g).tolist() for n in (4, 6, 3)],
                        [torch.randint(lo, len(tok), (n,), generator=g).tolist() for n in (5, 2, 7)], tok.pad_token_id)
    with threads(1):
        one = run_all(model, batch, cfg_for(ranks=1), routed=False)
        two = run_all(model, batch, cfg_for(ranks=2, pipeline_parallel=2), routed=False)
    assert one["routes"] is None and two["routes"] is None
    assert_same(one, two, model, batch)
    assert torch.equal(two["weights"]["lm_head.weight"], two["weights"]["model.embed_tokens.weight"])
    # the one-rank state resumes on the two stages (the last stage's copy of the embedding, moments included)
    with threads(1):
        again_one = run_all(model, batch, cfg_for(ranks=1), state=one["state"], routed=False)
        again_two = run_all(model, batch, cfg_for(ranks=2, pipeline_parallel=2), state=one["state"], routed=False)
    assert_same(again_one, again_two, one["weights"], batch, steps=4)


def test_the_engine_on_expert_parallel_ranks_and_a_rollout_worker_trains_as_one_process(ray_up, tok, hf_model):
    """Reasoning RL with the megatron trainer on two expert-parallel Ray ranks and the rollout in a Ray worker:
    the same samples, rewards and update metrics as one in-process rank with an in-process rollout."""
    import logging
    from compass.rl.engine import train
    from tests.compass.rl.test_fsdp_ranks import PROMPTS, RUN, _score
    runs = []
    for backend, workers in (({"ranks": 1}, 0), ({"ranks": 2, "expert_parallel": 2}, 1)):
        cfg = RUN.model_copy(deep=True)
        cfg.trainer.backend = cfg_for(**backend).trainer.backend
        cfg.rollout.workers = workers
        with threads(1):
            runs.append(train(copy.deepcopy(hf_model), tok, PROMPTS, cfg, score_fn=_score,
                              log=logging.getLogger("compass.rl.megatron_test")))
    one, two = runs
    assert [r["response"] for r in two.rollouts] == [r["response"] for r in one.rollouts]
    assert [r["reward"] for r in two.rollouts] == [r["reward"] for r in one.rollouts]
    assert any(m["updated"] == 1.0 for m in two.metrics)
    for a, b in zip(two.metrics, one.metrics):
        for k in ("reward_mean", "loss", "grad_norm", "entropy", "tokens"):
            assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-6), (a["step"], k)
