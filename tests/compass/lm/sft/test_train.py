"""SFT trainer parts: packing (no cross-contamination), schedule, held-out split, gradient accumulation."""
from __future__ import annotations

import logging
import math

import pytest
import torch

from compass.lm.model_factory import ModelConfig, build_model, build_tokenizer
from compass.lm.holdout import is_held_out, split_holdout
from compass.lm.sft.packing import IGNORE, efficiency, pack_samples, segment_mask, to_tensors
from compass.lm.sft.schedule import lr_at
from compass.lm.sft.train import packed_loss_sum, padded_loss_sum, supervised_count, train_sft
from tests.helpers import sum_sft_samples

log = logging.getLogger("test.sft")


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer("")


_samples = sum_sft_samples


# -- packing -----------------------------------------------------------------------------------------

def test_pack_first_fit_decreasing_is_deterministic_and_complete():
    samples = [([1] * n, [IGNORE] * (n // 2) + [7] * (n - n // 2)) for n in (5, 9, 3, 7, 2, 10, 4)]
    rows = pack_samples(samples, 12)
    assert rows == pack_samples(samples, 12)
    assert sorted(i for r in rows for i in r.samples) == list(range(len(samples)))
    assert all(len(r) <= 12 for r in rows)
    assert len(rows) == math.ceil(sum(len(s[0]) for s in samples) / 12)       # 40 tokens: FFD finds 4 rows
    assert [r.samples for r in rows][0] == [5, 4]                               # longest first, then first fit
    for r in rows:
        starts = [p for p, pos in enumerate(r.positions) if pos == 0]
        assert len(starts) == len(r.samples)                                     # positions restart per sample
        for seg, i in enumerate(r.samples):
            n = len(samples[i][0])
            at = r.segments.index(seg)
            assert r.positions[at:at + n] == list(range(n)) and r.labels[at:at + n] == samples[i][1]
            assert r.targets[at:at + n] == samples[i][1][1:] + [IGNORE]          # never predicts across samples
    with pytest.raises(ValueError, match="pack_len"):
        pack_samples([([1] * 13, [1] * 13)], 12)
    assert 0.8 < efficiency(rows) <= 1.0


def test_segment_mask_is_causal_and_within_a_sample():
    t = to_tensors(pack_samples([([1, 2, 3], [IGNORE, 5, 6]), ([4, 5], [IGNORE, 7])], 8), pad_id=0)
    m = segment_mask(t["segments"])[0, 0]
    seg = t["segments"][0].tolist()
    for i in range(len(seg)):
        for j in range(len(seg)):
            assert bool(m[i, j]) == (j <= i and seg[i] == seg[j])
        assert m[i].any()                                                        # no all-masked query (NaN)


def test_packed_loss_and_gradients_equal_per_sample_transformers(tok):
    model = build_model(ModelConfig(), tok, seed=3)
    samples = _samples(tok, 12)
    n = supervised_count(samples)
    packed, info = packed_loss_sum(model, samples, tok.pad_token_id, pack_len=96)
    assert info["rows"] < len(samples)                                           # really packed
    (packed / n).backward()
    g_packed = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    ref = sum(padded_loss_sum(model, [s], tok.pad_token_id)[0] for s in samples)   # one sample, no padding
    (ref / n).backward()
    g_ref = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    assert float(packed.detach() / n) == pytest.approx(float(ref.detach() / n), abs=1e-5)
    assert g_packed.keys() == g_ref.keys() and g_ref
    for k in g_ref:
        assert torch.allclose(g_packed[k], g_ref[k], atol=1e-6, rtol=1e-4), k
    # ... and the padded batch (every sample in its own right-padded row) agrees too
    model.zero_grad()
    padded, pinfo = padded_loss_sum(model, samples, tok.pad_token_id)
    assert float(padded.detach() / n) == pytest.approx(float(ref.detach() / n), abs=1e-5)
    assert pinfo["tokens"] == info["tokens"] and pinfo["padded_tokens"] > info["padded_tokens"]


def test_packed_gradients_are_the_same_every_time_on_two_threads(tok):
    """The embedding's gradient is summed in one order: indexing the table (``embed[ids]``) accumulated its
    backward in a thread-dependent order, so one seed gave other weights in every process (the world's
    pretrained base differed between two runs of the same config; docs/benchmarks.md, "A seed was not a run")."""
    model = build_model(ModelConfig(), tok, seed=3)
    samples = _samples(tok, 64)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)        # the race needs two threads; a test worker may run on one
    try:
        seen = set()
        for _ in range(8):
            model.zero_grad(set_to_none=True)
            packed_loss_sum(model, samples, tok.pad_token_id, pack_len=128)[0].backward()
            seen.add(model.get_input_embeddings().weight.grad.numpy().tobytes())
    finally:
        torch.set_num_threads(threads)
    assert len(seen) == 1


def test_packing_falls_back_to_padded_rows_for_an_unsupported_model(tok, caplog):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                         pad_token_id=tok.pad_token_id))
    with caplog.at_level(logging.WARNING, logger="test.sft"):
        m = train_sft(model, tok, _samples(tok, 8), steps=2, batch_size=4, lr=1e-3, warmup_steps=0,
                      weight_decay=0.0, grad_clip=1.0, seed=0, log_every=1, logger=log, packing=True)
    assert m["mode"] == "padded" and "llama" in m["fallback_reason"]
    assert any("packing off" in r.message for r in caplog.records)


# -- schedule ----------------------------------------------------------------------------------------

def test_warmup_then_cosine_to_the_floor():
    kw = dict(lr=1.0, warmup_steps=4, total_steps=104, min_lr_ratio=0.1)
    lrs = [lr_at(s, **kw) for s in range(104)]
    assert lrs[:4] == pytest.approx([0.2, 0.4, 0.6, 0.8]) and lrs[4] == 1.0
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))                         # decays monotonically
    assert lrs[54] == pytest.approx(0.55)                                         # half-way: the mean of lr and floor
    assert 0.1 < lrs[-1] < 0.1003 and lr_at(104, **kw) == pytest.approx(0.1)
    assert [lr_at(s, lr=2.0, warmup_steps=0, total_steps=10, min_lr_ratio=1.0) for s in range(10)] == [2.0] * 10


# -- held-out split ----------------------------------------------------------------------------------

def test_holdout_is_by_id_hash_and_stable():
    ids = [f"row{i}" for i in range(4000)]
    flags = split_holdout(ids, 0.05, 4)
    assert flags == [is_held_out(i, 0.05) for i in ids]                          # the hash alone decides
    assert 0.04 < sum(flags) / len(ids) < 0.06
    rev = split_holdout(ids[::-1], 0.05, 4)[::-1]
    assert rev == flags                                                           # order does not matter
    assert sum(split_holdout(ids[:20], 0.05, 4)) == 4                             # topped up on small tables
    assert sum(split_holdout(ids[:3], 0.5, 10)) == 2                              # one row always trains
    assert not any(split_holdout(ids, 0.0, 4))


# -- gradient accumulation ---------------------------------------------------------------------------

@pytest.mark.parametrize("packing", [True, False])
def test_accumulation_equals_one_big_batch(tok, packing):
    samples = _samples(tok, 24, seed=1)
    kw = dict(steps=2, lr=1e-3, warmup_steps=0, weight_decay=0.0, grad_clip=1e9, seed=0, log_every=10,
              logger=log, packing=packing, pack_len=128)
    base = build_model(ModelConfig(), tok, seed=4)
    start = {k: v.clone() for k, v in base.state_dict().items()}
    a, b = build_model(ModelConfig(), tok, seed=4), build_model(ModelConfig(), tok, seed=4)
    ma = train_sft(a, tok, samples, batch_size=3, grad_accum_steps=4, **kw)
    mb = train_sft(b, tok, samples, batch_size=12, grad_accum_steps=1, **kw)
    assert ma["losses"] == pytest.approx(mb["losses"], abs=1e-5)
    assert ma["supervised_tokens"] == mb["supervised_tokens"] and ma["tokens"] == mb["tokens"]
    moved = diff = 0.0
    for k, v in a.state_dict().items():
        moved += float((v - start[k]).pow(2).sum())
        diff += float((v - b.state_dict()[k]).pow(2).sum())
    assert moved > 0 and math.sqrt(diff / moved) < 1e-3                         # the same update


# -- held-out suites ---------------------------------------------------------------------------------

def test_eval_rows_by_domain_capped_per_suite_in_table_order():
    from stages.sft.suites import select_eval_rows
    rows = [{"id": f"{d}{i}", "domain": d} for d, n in (("math", 10), ("code", 3), ("qa", 5)) for i in range(n)]
    rows.append({"id": "x", "domain": "math", "suite": "math_word"})             # a suite column wins over domain
    sel = select_eval_rows(rows, ["math", "code"], 4)
    assert sel == select_eval_rows(rows, ["math", "code"], 4)
    assert [r["domain"] for r in sel].count("math") == 5 and [r["domain"] for r in sel].count("code") == 3
    assert [rows.index(r) for r in sel] == sorted(rows.index(r) for r in sel)
    assert len(select_eval_rows(rows, None, None)) == len(rows)
