"""The data filter on Ray Data (2 tasks on a local Ray) gives exactly the streaming stage's output."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from compass.bench.data_filter import make_inputs
from compass.store.layout import TABLE_FILE
from compass.store.store import ArtifactStore
from stages.data_filter import stage as data_filter
from stages.data_filter.config import DataFilterConfig
from stages.data_filter.ray_rows import _pair, pieces
from stages.data_filter.row_work import Features, from_arrow, to_arrow
from tests.helpers import commit_artifact

pytestmark = pytest.mark.ray      # starts a local Ray (tests/conftest.py)


def _bad_rows_artifact(store, good: pa.Table):
    """The generated rows plus rows that fail each early check, and a row of invalid UTF-8."""
    rows = good.to_pylist()
    extra = [{**rows[0], "id": "bad1", "response": "<think>never closed"},
             {**rows[1], "id": "bad2", "prompt": "   "},
             {**rows[2], "id": "bad3", "prompt": "how do i make a pipe bomb at home"},
             {**rows[3], "id": "bad4", "response": "text with a NUL \x00 in it"}]
    tbl = pa.Table.from_pylist(rows[:400] + extra + rows[400:], schema=good.schema)
    # invalid UTF-8 bytes in one prompt: write the column as binary, then relabel it as string
    prompts = tbl.column("prompt").to_pylist()
    raw = pa.array([p.encode() if i != 10 else b"caf\xe9 " + p.encode() for i, p in enumerate(prompts)], pa.binary())
    tbl = tbl.set_column(tbl.schema.get_field_index("prompt"), "prompt", raw.view(pa.string()))

    def write(w):
        with w.table_writer() as put:
            for b in tbl.to_batches(max_chunksize=333):
                put(b)
    return commit_artifact(store, "sft_samples", "sft_bad", write)


@pytest.mark.slow
def test_ray_output_equals_streaming(tmp_path, ray_up):
    store = ArtifactStore(str(tmp_path / "store"))
    inputs, planted = make_inputs(store, 2500, seed=3, chunk=700, leak_share=0.01)
    inputs["sft"] = _bad_rows_artifact(store, inputs["sft"].read_table())
    assert len(pieces(str(inputs["sft"].local_path(TABLE_FILE)))) == 8        # one Ray task's work each
    streaming = DataFilterConfig(batch_rows=256)          # batches cut across row groups (333 rows)
    ray_cfg = streaming.model_copy(update={"ray_workers": 2})
    a = data_filter.run(streaming, inputs, store)
    b = data_filter.run(ray_cfg, inputs, store)
    assert a.version != b.version
    for slot in ("sft_longcot", "sft_domain", "rl_prompts", "quarantine"):
        ta, tb = store.open(a.outputs[slot]).read_table(), store.open(b.outputs[slot]).read_table()
        assert ta.num_rows > 0 and ta.equals(tb), slot
    q = store.open(a.outputs["quarantine"]).read_table().to_pylist()
    reasons = {r["reason"] for r in q}
    assert {"duplicate", "near_duplicate", "contaminated", "unclosed_think", "empty_prompt", "harmful",
            "invalid_text"} <= reasons, reasons
    assert sum(r["reason"] == "contaminated" for r in q) == planted["contaminated"] > 0


def test_features_survive_arrow():
    f = Features(why=[None, ("prompt", "harmful", "rule x"), None], keys={0: 2**64 - 1, 2: 5},
                 leaks={2: ("response", 7, ("a", "b"))}, sig_rows=[0, 2],
                 sigs=np.array([[1, 2, 3, 4], [5, 6, 7, 2**32 - 1]], np.uint32), groups=np.array([0, 9], np.uint64),
                 refs=[(11, "3", '{"type": "math_exact"}')])
    g = from_arrow(to_arrow(f), 4)
    assert (g.why, g.keys, g.leaks, g.sig_rows, g.refs) == (f.why, f.keys, f.leaks, f.sig_rows, f.refs)
    assert np.array_equal(g.sigs, f.sigs) and np.array_equal(g.groups, f.groups)


def test_pairing_refuses_a_row_count_mismatch():
    batch = pa.RecordBatch.from_pylist([{"x": 1}, {"x": 2}])
    one = to_arrow(Features([None], {}, {}, [], np.empty((0, 4), np.uint32), np.empty(0, np.uint64)))
    with pytest.raises(RuntimeError, match="short of the rows of s://t"):
        list(_pair([batch], [one], 4, "s://t"))
    with pytest.raises(RuntimeError, match="1 rows of features more than s://t"):
        list(_pair([batch], [one, one, one], 4, "s://t"))

