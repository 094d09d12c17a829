"""The data filter (the stage that reads outside tables: imported raw_sft / raw_prompts) over fuzzed rows
that pass the table contract: it never crashes, and every input row ends up kept or quarantined, once."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings, strategies as st

from compass.store.store import ArtifactStore
from stages.data_filter import stage as data_filter
from stages.data_filter.config import DataFilterConfig
from tests.helpers import commit_table

texts = st.one_of(
    st.text(max_size=40), st.sampled_from(["", "   ", "What is 2 + 2?", "<think>x</think>4", "\x00\x07", "x" * 600]),
    st.binary(max_size=20))                    # bytes: stored unvalidated, as a foreign tool might
verifiers = st.one_of(st.sampled_from(['{"type": "math_exact"}', '{"type": "nope"}', "not json", "[]", "",
                                       '{"type": "code", "tests": 5}', '{"type": "mcq"}']), st.text(max_size=15))


def _strings(values) -> pa.Array:
    raw = [v if isinstance(v, bytes) else v.encode("utf-8", "surrogatepass") for v in values]
    return pa.array(raw, pa.binary()).view(pa.string())


def _sft(rows) -> pa.Table:
    n = len(rows)
    return pa.table({"id": [f"s{i}" for i in range(n)], "domain": _strings([r[0] for r in rows]),
                     "task": ["t"] * n, "language": ["en"] * n, "prompt": _strings([r[1] for r in rows]),
                     "response": _strings([r[2] for r in rows])})


def _prompts(rows) -> pa.Table:
    n = len(rows)
    return pa.table({"id": [f"p{i}" for i in range(n)], "domain": ["math"] * n, "task": ["t"] * n,
                     "language": ["en"] * n, "prompt": _strings([r[0] for r in rows]),
                     "reference": _strings([r[1] for r in rows]), "verifier": _strings([r[2] for r in rows]),
                     "difficulty": pa.array([None] * n, pa.int32()), "pass_rate": pa.array([None] * n, pa.float64())})


@settings(max_examples=8)
@given(sft=st.lists(st.tuples(st.sampled_from(["math", "general", "", "ecommerce"]), texts, texts), min_size=1,
                    max_size=8),
       prompts=st.lists(st.tuples(texts, texts, verifiers), min_size=1, max_size=8))
def test_data_filter_keeps_or_quarantines_every_row(sft, prompts):
    with tempfile.TemporaryDirectory() as d:
        store = ArtifactStore(str(Path(d) / "s"), cache_dir=Path(d) / "cache")
        inputs = {"sft": commit_table(store, "sft_samples", "sft", _sft(sft)),
                  "prompts": commit_table(store, "prompts", "prompts", _prompts(prompts)),
                  "eval": commit_table(store, "prompts", "eval", _prompts([("What is 5 + 6?", "11",
                                                                            '{"type": "math_exact"}')]))}
        res = data_filter.run(DataFilterConfig(max_field_chars=500), inputs, store)
        arts = {slot: store.open(uri) for slot, uri in res.outputs.items()}
        q = arts["quarantine"].read_table().to_pylist()
        assert all(r["reason"] and "\n" not in r["reason"] for r in q)
        json.dumps(q)                                         # the evidence is readable text
        for slot, n, kept_ids in (("sft", len(sft), [i for a in ("sft_longcot", "sft_domain")
                                                       for i in arts[a].read_table().column("id").to_pylist()]),
                                  ("prompts", len(prompts), arts["rl_prompts"].read_table().column("id").to_pylist())):
            prefix = slot[0]
            bad = sorted(r["row_index"] for r in q if r["slot"] == slot)
            kept = sorted(int(i[1:]) for i in kept_ids)
            assert sorted(bad + kept) == list(range(n)), (slot, bad, kept)   # each row once, none lost
            assert all(i.startswith(prefix) for i in kept_ids)
