"""The megatron SFT backend on two ranks (Ray actors in a placement group, gloo; the tiny Qwen3-MoE): data-parallel
(packed rows, AdamW's state sharded over the two ranks) and tensor-parallel (padded rows, with sequence
parallelism) train as the one-process megatron backend does — per-step losses, held-out losses, weights — and the
two ranks' state resumes in one process, ending where an uninterrupted one-process run ends."""
from __future__ import annotations

import copy
import logging
import warnings

import pytest

from compass.config import MegatronParallelSettings, RankSettings
from compass.lm.model_factory import ModelConfig, build_model
from compass.lm.sft.train import train_sft
from tests.compass.lm.sft.test_sft_ranks import _train as train_on, _weights_agree
from tests.compass.rl.test_ray import tok  # noqa: F401
from tests.helpers import sum_sft_samples

pytestmark = [pytest.mark.ray, pytest.mark.slow]
warnings.filterwarnings("ignore", message=".*Transformer Engine.*")
log = logging.getLogger("test.sft_megatron_ranks")


class Ranks(MegatronParallelSettings, RankSettings):
    """The SFT stage's rank keys (stages/sft/config.SFTConfig has both)."""


@pytest.fixture(scope="module")
def model(tok):
    """The tiny Qwen3-MoE with 4 heads over 2 KV heads, so that tensor_parallel 2 divides them."""
    return build_model(ModelConfig(num_heads=4, num_kv_heads=2), tok, seed=5)


def _train(model, tok, samples, heldout, ranks, **kw):
    return train_on(model, tok, samples, heldout, ranks, **{"steps": 4, "backend": "megatron", **kw})


# The weights are compared as test_sft_ranks compares them, to 1e-2 of their move, not 1e-3: measured here, ~1e-5 of
# the move for all but a few elements, up to 1.2e-3 for one (a query weight). AdamW divides by the root of the
# squared-gradient average, so an element whose gradient is near zero moves by up to the learning rate in a
# direction float rounding can tip.


@pytest.mark.parametrize("sizes,packing", [({"distributed_optimizer": True}, True), ({"tensor_parallel": 2}, False)],
                         ids=["dp2-zero-packed", "tp2"])
def test_two_megatron_ranks_train_as_one_process_and_resume_in_one(ray_up, tok, model, tmp_path, sizes, packing):
    """Two ranks, 4 steps with a state saved at step 2, against the one-process megatron backend: the same losses
    and weights; then a one-process run resumes from the ranks' step-2 state (sharded weights and AdamW moments
    gathered to the full model's names) and ends where the uninterrupted one-process run ends."""
    samples, heldout = sum_sft_samples(tok, 40, seed=1), sum_sft_samples(tok, 7, seed=2)
    ranks = Ranks(ranks=2, threads_per_rank=1, cpus_per_rank=0.5, **sizes)
    one, m1 = _train(model, tok, samples, heldout, None, packing=packing)
    two, m2 = _train(model, tok, samples, heldout, ranks, packing=packing, state_dir=tmp_path, checkpoint_every=2)
    assert (m1["ranks"], m2["ranks"], m2["backend"]) == (1, 2, "megatron")
    assert m2["mode"] == m1["mode"] == ("packed" if packing else "padded")
    assert m2["losses"] == pytest.approx(m1["losses"], rel=1e-5)
    assert [h["step"] for h in m2["heldout"]] == [0, 2, 4]
    assert [h["loss"] for h in m2["heldout"]] == pytest.approx([h["loss"] for h in m1["heldout"]], rel=1e-5)
    assert (m2["tokens"], m2["supervised_tokens"], m2["padded_tokens"]) == \
        (m1["tokens"], m1["supervised_tokens"], m1["padded_tokens"])
    assert _weights_agree(two, one, model) < 1e-2
    # the state file the ranks left at step 2, read by one process
    resumed, mr = _train(model, tok, samples, heldout, None, packing=packing, state_dir=tmp_path, checkpoint_every=2)
    assert mr["resumed_from_step"] == 2
    assert mr["losses"] == pytest.approx(m1["losses"], rel=1e-5)
    assert _weights_agree(resumed, one, model) < 1e-2


def test_megatron_sizes_the_model_cannot_take_fail_before_any_rank_starts(tok, model):
    """Sizes the model does not divide (4 pipeline stages of a 2-layer model): one error naming the problem, raised
    before Ray is asked for anything (no ``ray_up`` here)."""
    with pytest.raises(ValueError, match="pipeline_parallel 4 does not divide the 2 layers"):
        train_sft(copy.deepcopy(model), tok, sum_sft_samples(tok, 4), steps=1, batch_size=2, lr=1e-3, warmup_steps=0,
                  weight_decay=0.0, grad_clip=1.0, seed=0, log_every=1, logger=log, backend="megatron",
                  ranks=Ranks(ranks=4, pipeline_parallel=4, cpus_per_rank=0.5))
