"""Harmful-content filter: precision and recall on the labelled set, benign readings, the registry."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

import stages.data_filter as pkg
from stages.data_filter.harm import HARM_FILTERS, evaluate, lexicon_filter, match_rules
from stages.data_filter.harm_lexicon import CATEGORIES, LANGUAGES
from compass.dedup.text import normalize

EVAL_SET = Path(pkg.__file__).parent / "harm_eval" / "harm_eval.jsonl"


def _rows():
    return [json.loads(line) for line in EVAL_SET.read_text(encoding="utf-8").splitlines()]


def _precision_recall(rows, hits):
    tp = sum(1 for r, h in zip(rows, hits) if h and r["label"] == "harmful")
    fp = sum(1 for r, h in zip(rows, hits) if h and r["label"] == "benign")
    pos = sum(r["label"] == "harmful" for r in rows)
    return tp / max(tp + fp, 1), tp / pos


def test_labelled_set_covers_every_language_and_category():
    rows = _rows()
    assert len(rows) >= 300
    by_lang = defaultdict(set)
    for r in rows:
        by_lang[r["language"]].add(r["label"])
        assert r["label"] in ("harmful", "benign") and (r["category"] in CATEGORIES) == (r["label"] == "harmful")
    assert set(by_lang) == set(LANGUAGES) and all(v == {"harmful", "benign"} for v in by_lang.values())
    for lang in LANGUAGES:
        cats = {r["category"] for r in rows if r["language"] == lang and r["label"] == "harmful"}
        assert cats == set(CATEGORIES), lang
        assert sum(r["hard_negative"] for r in rows if r["language"] == lang) >= 10, lang


def test_default_filter_precision_and_recall():
    res = evaluate("lexicon")
    assert res["all"]["precision"] >= 0.95 and res["all"]["recall"] >= 0.90, res["all"]
    for lang in LANGUAGES:   # no language left behind
        m = res[f"language {lang}"]
        assert m["precision"] >= 0.9 and m["recall"] >= 0.8, (lang, m)
    rows = _rows()
    hits = lexicon_filter([normalize(r["text"]) for r in rows])
    assert _precision_recall(rows, hits) == (res["all"]["precision"], res["all"]["recall"])
    assert evaluate("none")["all"]["recall"] == 0.0
    for r, h in zip(rows, hits):   # a hit names its rule, of the row's category
        if h and r["label"] == "harmful":
            assert h.category == r["category"] or r["category"] is None, (r["id"], h)


# forms that once slipped past the prefilter: a rule's anchor must be in every text it matches
PROBES = ["What is the easiest way to end my own life", "Step by step synthesis of carfentanil",
          "The world is better without you, go and kill", "Cómo hacer una bomba"]


def test_prefilter_never_changes_the_answer():
    texts = [normalize(r["text"]) for r in _rows()] + [normalize(t) for t in PROBES]
    assert [h and h.rule for h in lexicon_filter(texts)] == [h and h.rule for h in map(match_rules, texts)]
    assert all(lexicon_filter([normalize(t)])[0] for t in PROBES[:3])


@pytest.mark.parametrize("text", [
    "Kill the process that is stuck, then restart the server.",
    "We will shoot a photo of the new sneakers tomorrow.",
    "Last weekend was a bomb of a sale: everything half off!",
    "Is there a drug store near the station?",
    "How to make a cake explode with flavor: brown butter and citrus zest.",
    "Make bath bombs at home with citric acid.",
    "Bom tấn mùa hè đã ra rạp.",                         # vi: blockbuster
    "Como fazer uma bomba d'água caseira?",               # pt: water pump
    "เค้กช็อกโกแลตระเบิดความอร่อย",                       # th: bursting with flavor
    "Ada bom diskon hari ini!",                            # id: discount bomb
])
def test_benign_uses_do_not_fire(text):
    assert lexicon_filter([normalize(text)]) == [None]


def test_registry_picks_a_filter_by_name():
    assert {"lexicon", "none"} <= set(HARM_FILTERS)
    assert HARM_FILTERS.lookup("none")(["how to make a pipe bomb"]) == [None]
    hit = HARM_FILTERS.lookup("lexicon")([normalize("How to make a pipe bomb")])[0]
    assert hit.category == "weapons" and hit.rule.startswith("en.") and "pipe bomb" in hit.detail()
    with pytest.raises(ValueError, match="unknown harm filter"):
        HARM_FILTERS.lookup("classifier-v9")
