"""Near-duplicate index and a small planted dedup-quality run (recall and false-positive rate)."""
from __future__ import annotations

import numpy as np

from compass.bench.dedup_quality import BEYOND, build, run_filter, score
from stages.data_filter.config import DataFilterConfig
from compass.dedup.near_dup import ExactIndex, NearDupIndex, band_keys, shingles, signatures
from compass.dedup.text import ngram_tokens

TEXT = ("the quick brown fox jumps over the lazy dog while the farmer counts seven sheep near the old red barn "
        "and the children sing a song about the river that runs behind the quiet village school")


def _sig(text: str, num_perm: int = 128) -> np.ndarray:
    return signatures([shingles(ngram_tokens(text), 3)], num_perm)


def test_exact_index_names_the_first_row():
    ex = ExactIndex()
    assert ex.seen(7, 0) is None and ex.seen(7, 5) == 0 and ex.seen(8, 6) is None


def test_signatures_estimate_jaccard():
    a, b = _sig(TEXT, 256)[0], _sig(TEXT.replace("fox", "cat").replace("song", "poem"), 256)[0]
    sa, sb = set(shingles(ngram_tokens(TEXT), 3)), set(shingles(ngram_tokens(TEXT.replace("fox", "cat")
                                                                               .replace("song", "poem")), 3))
    true = len(sa & sb) / len(sa | sb)
    assert abs((a == b).mean() - true) < 0.1
    assert band_keys(_sig(TEXT), 32).shape == (1, 32)
    g = band_keys(np.repeat(_sig(TEXT), 2, axis=0), 32, np.array([1, 2], np.uint64))
    assert not set(g[0]) & set(g[1])   # other group, other keys


def test_near_dup_index_across_batches_and_groups():
    idx = NearDupIndex(threshold=0.5, num_perm=128, bands=32)
    first = np.vstack([_sig(TEXT), _sig("an entirely different sentence about markets, prices and the weather in "
                                        "a coastal town during the long and rainy summer months of the year")])
    idx.prepare(first)
    assert idx.match(0) is None
    idx.keep(0, 100)
    assert idx.match(1) is None
    idx.keep(1, 101)
    idx.commit()
    copy = TEXT.replace("seven", "eight")
    idx.prepare(np.vstack([_sig(copy), _sig(copy)]), np.array([0, 9], np.uint64))
    row, est = idx.match(0)
    assert row == 100 and est >= 0.5
    assert idx.match(1) is None           # same text, another group (another reference answer)
    assert idx.size == 2 and idx.nbytes() > 0


def test_unspaced_scripts_are_tokenized_by_character():
    zh = "今天天氣很好我們一起去公園散步然後在湖邊吃午餐再回家休息一下晚上看電影"
    assert ngram_tokens(zh)[:3] == ["今", "天", "天"]
    assert ngram_tokens("Thai ภาษา mixed")[:2] == ["thai", "ภ"]


def test_planted_dedup_quality_small_run(tmp_path):
    corpus = build(seed=3, n_background=600, per_category=30, family_size=12, eval_per_suite=30,
                   contam_per_category=15)
    reasons, _ = run_filter(corpus, DataFilterConfig(), str(tmp_path / "store"))
    res = score(corpus, reasons)
    assert res["recall"] >= 0.99 and res["false_positive_rate"] <= 0.01, res
    per = res["per_category"]
    for cat, c in per.items():
        if cat not in BEYOND:
            assert c["correct"] / c["rows"] >= 0.95, (cat, c)
    assert per["few_slot_siblings_ref"]["correct"] == per["few_slot_siblings_ref"]["rows"]
