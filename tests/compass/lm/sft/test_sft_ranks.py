"""The SFT loop on two data-parallel ranks (Ray actors in a placement group, gloo, FSDP2; the tiny Qwen3-MoE):
it trains as one process does (per-step losses, held-out losses, weights), with uneven shares and uneven piece
counts across ranks; a rank killed mid-run is one retryable line, and the two ranks' state resumes in one process;
the SFT stage runs on two ranks (the megatron backend's ranks: test_megatron_ranks.py)."""
from __future__ import annotations

import copy
import logging

import pytest

from compass.config import RankSettings
from compass.lm.model_factory import ModelConfig, build_model
from compass.lm.sft.train import train_sft
from tests.compass.rl.test_ray import threads, tok  # noqa: F401
from tests.helpers import sum_sft_samples

pytestmark = [pytest.mark.ray, pytest.mark.slow]

log = logging.getLogger("test.sft_ranks")
# each rank one torch thread, the one-process reference too: float sums then run in the same order where they can
TWO = RankSettings(ranks=2, threads_per_rank=1, cpus_per_rank=0.5)


@pytest.fixture(scope="module")
def model(tok):
    return build_model(ModelConfig(), tok, seed=4)


def _train(model, tok, samples, heldout, ranks, **kw):
    m = copy.deepcopy(model)
    args = dict(steps=3, batch_size=5, lr=3e-3, warmup_steps=1, weight_decay=0.0, grad_clip=1.0, seed=7,
                log_every=10, logger=log, grad_accum_steps=2, heldout=heldout, eval_every=2, device="cpu")
    with threads(1):
        out = train_sft(m, tok, samples, ranks=ranks, **{**args, **kw})
    return m, out


def _weights_agree(a, b, start) -> float:
    """Largest difference between ``a``'s and ``b``'s weights, as a share of the largest move from ``start``."""
    sa, sb, s0 = a.state_dict(), b.state_dict(), start.state_dict()
    moved = max(float((sa[k] - s0[k]).abs().max()) for k in sa)
    assert moved > 1e-4                                 # training moved the weights: the comparison means something
    return max(float((sa[k] - sb[k]).abs().max()) for k in sa) / moved


@pytest.mark.parametrize("packing,micro_batch_tokens", [(True, None), (False, 90)], ids=["packed", "padded-pieces"])
def test_two_ranks_train_as_one_process(ray_up, tok, model, packing, micro_batch_tokens):
    """Micro-batches of 5 samples split 3 + 2 over the ranks; with ``micro_batch_tokens`` the ranks cut their
    shares into different numbers of pieces (the one with fewer runs zero-weighted ones). Packed: the whole
    model one FSDP unit; padded: each decoder layer one."""
    samples, heldout = sum_sft_samples(tok, 40, seed=1), sum_sft_samples(tok, 7, seed=2)
    one, m1 = _train(model, tok, samples, heldout, None, packing=packing, micro_batch_tokens=micro_batch_tokens)
    two, m2 = _train(model, tok, samples, heldout, TWO, packing=packing, micro_batch_tokens=micro_batch_tokens)
    assert m2["ranks"] == 2 and m1["ranks"] == 1
    assert m2["mode"] == m1["mode"] == ("packed" if packing else "padded")
    assert m2["losses"] == pytest.approx(m1["losses"], rel=1e-5)
    assert [h["step"] for h in m2["heldout"]] == [0, 2, 3]
    assert [h["loss"] for h in m2["heldout"]] == pytest.approx([h["loss"] for h in m1["heldout"]], rel=1e-5)
    assert (m2["tokens"], m2["supervised_tokens"]) == (m1["tokens"], m1["supervised_tokens"])
    assert m2["padded_tokens"] >= m2["tokens"]          # each rank pads its own share: not one process's count
    assert _weights_agree(two, one, model) < 1e-3


def test_a_rank_killed_mid_run_is_one_retryable_line_and_the_run_resumes_in_one_process(ray_up, tok, model, tmp_path,
                                                                                         monkeypatch):
    """Rank 1 SIGKILLed after step 3 of 4 on two ranks (state saved at step 2): step 4 ends in one retryable line
    naming the rank, and the run goes on in one process from the two ranks' state, ending where an
    uninterrupted one-process run ends."""
    import os
    import signal

    from compass.lm.sft import train as train_module
    from compass.runtime.runner import is_infra_error
    samples = sum_sft_samples(tok, 30, seed=3)
    made = []

    class Recorded(train_module.SFTRanks):        # the real ranks; the test only keeps a handle to kill one
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    monkeypatch.setattr(train_module, "SFTRanks", Recorded)

    def kill_after_3(done):
        if done == 3:
            os.kill(made[0].pids()[1], signal.SIGKILL)

    with pytest.raises(Exception) as e:
        _train(model, tok, samples, None, TWO, steps=4, state_dir=tmp_path, checkpoint_every=2, on_step=kill_after_3,
               packing=True)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("sft (2 ranks): rank 1 of 2 died during step"), msg
    assert is_infra_error(e.value)
    resumed, mr = _train(model, tok, samples, None, None, steps=4, state_dir=tmp_path, checkpoint_every=2,
                         packing=True)
    whole, mw = _train(model, tok, samples, None, None, steps=4, packing=True)
    assert mr["resumed_from_step"] == 2 and mw["resumed_from_step"] is None
    assert mr["losses"] == pytest.approx(mw["losses"], rel=1e-5)
    assert _weights_agree(resumed, whole, model) < 1e-3


def test_the_sft_stage_on_two_ranks(ray_up, tok, model, tmp_path, monkeypatch):
    """``ranks: 2`` in the stage's config: the stage trains on two ranks and saves the trained checkpoint."""
    import pyarrow as pa
    from compass.lm.model_factory import load_checkpoint
    from compass.store.store import ArtifactStore
    from stages.sft import stage as sft
    from stages.sft.config import SFTConfig
    from tests.helpers import commit_checkpoint, commit_table
    monkeypatch.setenv("COMPASS_STATE_DIR", str(tmp_path / "state"))
    store = ArtifactStore(str(tmp_path / "a"))
    rows = [{"id": f"m{i}", "domain": "math", "task": "arith", "language": "en", "prompt": f"{i}+1=?",
             "response": f"<think>{i}+1</think>{i + 1}"} for i in range(24)]
    inputs = {"base": commit_checkpoint(store, "base_ckpt", model, tok),
              "data": commit_table(store, "sft_samples", "sft_data", pa.Table.from_pylist(rows))}
    cfg = SFTConfig(steps=3, batch_size=4, ranks=2, cpus_per_rank=0.5, threads_per_rank=1, device="cpu")
    res = sft.run(cfg, inputs, store, output_names={"checkpoint": "sft_ckpt"})
    assert res.status == "ran"
    out = store.open(res.outputs["checkpoint"])
    assert out.manifest.extra["ranks"] == 2 and out.manifest.extra["steps"] == 3
    trained, _ = load_checkpoint(out.local_dir())
    moved = max(float((v - model.state_dict()[k]).abs().max()) for k, v in trained.state_dict().items())
    assert moved > 1e-4
    assert SFTConfig(ranks=2, tensor_parallel=2, backend="megatron").tensor_parallel == 2
    with pytest.raises(ValueError, match="tensor_parallel: 2 needs backend: megatron"):
        SFTConfig(ranks=2, tensor_parallel=2)
    with pytest.raises(ValueError, match="distributed_optimizer: true needs backend: megatron"):
        SFTConfig(ranks=2, distributed_optimizer=True)
