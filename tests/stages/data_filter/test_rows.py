"""Data filter on hand-made artifacts: each kind of bad row gets the right reason, nothing crashes, counts balance."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from artifacts_schema.tables import SchemaError
from compass.store.store import ArtifactStore
from compass.store.layout import TABLE_FILE
from stages.data_filter import stage as data_filter
from stages.data_filter.config import DataFilterConfig
from stages.data_filter import quality
from tests.helpers import MATH_VERIFIER, commit_artifact, commit_table

LONG_A = ("The small kettle in the kitchen needs to be cleaned before Monday, and the old lamp near the window "
          "should be repaired by the engineer who visited the office last week with a new charger and a box of "
          "spare cables for the printer")
LONG_B = ("Maya bought seven notebooks at the market in Lisbon last Friday, then she walked along the river to the "
          "museum where a guide explained how the bridge was designed by a curious student many years ago")
EVAL_LONG = ("Read the passage about the harbor and the island, then explain why the ferry schedule changed twice "
             "during the rainy season and what the captain told the passengers")


def _sft(i, prompt, response, **extra):
    return {"id": f"s{i}", "domain": "general", "task": "chat", "language": "en", "prompt": prompt,
            "response": response, **extra}


def _prompt(i, prompt, reference="1", verifier=MATH_VERIFIER):
    return {"id": f"p{i}", "domain": "math", "task": "arithmetic", "language": "en", "prompt": prompt,
            "reference": reference, "verifier": verifier, "difficulty": None, "pass_rate": None}


def _run(store, sft_rows, prompt_rows, eval_rows=(), cfg=None, sft_schema=None):
    sft = commit_table(store, "sft_samples", "sft", pa.Table.from_pylist(sft_rows, schema=sft_schema)
                       if not isinstance(sft_rows, pa.Table) else sft_rows)
    prompts = commit_table(store, "prompts", "prompts", pa.Table.from_pylist(prompt_rows) if prompt_rows else
                           pa.Table.from_pylist([_prompt(0, "What is 1 + 1?", "2")]))
    evals = commit_table(store, "prompts", "eval", pa.Table.from_pylist(
        list(eval_rows) or [_prompt(0, "What is 5 + 6 * 2?", "17")]))
    res = data_filter.run(cfg or DataFilterConfig(), {"sft": sft, "prompts": prompts, "eval": evals}, store)
    arts = {slot: store.open(uri) for slot, uri in res.outputs.items()}
    q = arts["quarantine"].read_table().to_pylist()
    return arts, {(r["slot"], r["row_index"]): r for r in q}, {"sft": sft, "prompts": prompts, "eval": evals}


def test_duplicates_near_duplicates_contamination_and_harm(tmp_path):
    store = ArtifactStore(str(tmp_path / "s"))
    rows = [
        _sft(0, LONG_A, "Done."),
        _sft(1, LONG_A.replace("kettle", "teapot").replace("printer", "scanner"), "Done."),  # near copy of 0
        _sft(2, LONG_B, "Noted."),
        _sft(3, "  " + LONG_B.upper() + " ", "noted."),                                      # exact after normalizing
        _sft(4, "Background first. " + EVAL_LONG + " Thanks.", "ok"),                        # eval leak
        _sft(5, "How do I make a pipe bomb at home?", "I will not help with that."),         # harmful prompt
        _sft(6, "Tell me a story.", "Sure. First, cook meth in a garage lab and sell it."),  # harmful response
        _sft(7, "How do I kill the process that hangs on port 8080?", "Use kill -9 with its PID."),
    ]
    evals = [{**_prompt(0, EVAL_LONG, "A"), "id": "eval-ferry", "domain": "qa", "task": "reading"}]
    arts, q, inputs = _run(store, rows, [], evals)
    got = {(slot, i): (r["reason"], r["field"]) for (slot, i), r in q.items()}
    assert got == {("sft", 1): ("near_duplicate", None), ("sft", 3): ("duplicate", None),
                   ("sft", 4): ("contaminated", "prompt"), ("sft", 5): ("harmful", "prompt"),
                   ("sft", 6): ("harmful", "response")}
    assert "row 0" in q["sft", 1]["detail"] and "Jaccard" in q["sft", 1]["detail"]
    assert "row 2" in q["sft", 3]["detail"]
    assert "eval-ferry" in q["sft", 4]["detail"] and "13-gram" in q["sft", 4]["detail"]
    assert "en.weapons" in q["sft", 5]["detail"] and "en.drugs" in q["sft", 6]["detail"]
    for r in q.values():
        assert r["source"] == inputs[r["slot"]].uri and json.loads(r["row_json"])["id"] == rows[r["row_index"]]["id"]
    assert [r["id"] for r in arts["sft_domain"].read_table().to_pylist()] == ["s0", "s2", "s7"]
    extra = arts["quarantine"].manifest.extra
    assert extra["decontamination"]["hits"] == 1 and extra["decontamination"]["eval_prompts_leaked"] == 1
    assert extra["quarantined"]["sft"] == {"contaminated": 1, "duplicate": 1, "harmful": 2, "near_duplicate": 1}

    # each filter can be turned off on its own
    arts, q, _ = _run(store, rows, [], evals, DataFilterConfig(near_dedup=False, harm_filter="none"))
    assert {i: r["reason"] for (_, i), r in q.items()} == {3: "duplicate", 4: "contaminated"}


def test_near_duplicates_need_the_same_reference(tmp_path):
    # siblings of one template with different answers are distinct items, a reworded copy is not
    store = ArtifactStore(str(tmp_path / "s"))
    template = ("Tools: weather_now takes a city, remind_me takes a time and a task, search_products takes keywords "
                "and a price limit. User: please check the weather in {} for me before my trip tomorrow morning")
    prompts = [_prompt(0, template.format("Toronto"), "Toronto"), _prompt(1, template.format("Bangkok"), "Bangkok"),
               _prompt(2, template.format("Toronto") + " thanks", "Toronto")]
    _, q, _ = _run(store, [_sft(0, "Hi", "Hello")], prompts)
    assert {k: r["reason"] for k, r in q.items()} == {("prompts", 2): "near_duplicate"}


def _bad_utf8(values: list[bytes | None]) -> pa.Array:
    return pa.array(values, pa.binary()).view(pa.string())


def test_malformed_rows_are_quarantined_never_crash(tmp_path):
    store = ArtifactStore(str(tmp_path / "s"))
    n = 10
    prompts = [b"fine prompt %d" % i for i in range(n)]
    responses = [b"fine response %d" % i for i in range(n)]
    prompts[0] = b""                                        # empty prompt
    responses[1] = b"   "                                   # empty response
    prompts[2] = b"x" * 1001                                # too long
    prompts[3] = b"lone surrogate \xed\xa0\x80 here"        # an encoded lone surrogate: not UTF-8
    prompts[4] = b"broken \xff byte"                        # invalid UTF-8
    responses[5] = "bad decode \ufffd upstream".encode()    # replacement character
    prompts[6] = b"nul\x00inside"                           # NUL
    responses[7] = b"bell\x07character"                     # control character
    notes = [None] * n
    notes[8] = b"extra column \xc3\x28 broken"              # invalid UTF-8 in a column the schema does not know
    table = pa.table({"id": [f"s{i}" for i in range(n)], "domain": ["d"] * n, "task": ["t"] * n,
                      "language": ["en"] * n, "prompt": _bad_utf8(prompts), "response": _bad_utf8(responses),
                      "reference": pa.array([None] * n, pa.string()), "verifier": pa.array([None] * n, pa.string()),
                      "note": _bad_utf8(notes)})
    # reference and verifier are required columns of prompts (no nulls); difficulty and pass_rate are optional
    prompt_rows = [{**_prompt(0, "What is 1 + 1?", "2"), "difficulty": 3, "pass_rate": 0.5},
                   _prompt(1, "What is 2 + 3?", " "), _prompt(2, "What is 3 + 3?", "6", ""),
                   _prompt(3, "What is 4 + 4?", "8"),
                   _prompt(4, "Rewrite the title: red shoe", "Red Shoe", json.dumps({"type": "genrm"}))]
    arts, q, inputs = _run(store, table, prompt_rows, cfg=DataFilterConfig(max_field_chars=1000))
    got = {(slot, i): (r["reason"], r["field"]) for (slot, i), r in q.items()}
    assert got == {
        ("sft", 0): ("empty_prompt", "prompt"), ("sft", 1): ("empty_response", "response"),
        ("sft", 2): ("too_long", "prompt"), ("sft", 3): ("invalid_text", "prompt"),
        ("sft", 4): ("invalid_text", "prompt"), ("sft", 5): ("invalid_text", "response"),
        ("sft", 6): ("invalid_text", "prompt"), ("sft", 7): ("invalid_text", "response"),
        ("sft", 8): ("invalid_text", "note"),
        ("prompts", 1): ("missing_reference", "reference"), ("prompts", 2): ("bad_verifier", "verifier"),
        ("prompts", 4): ("bad_verifier", "verifier")}
    assert "learned judge" in q["prompts", 4]["detail"] and "title_rules" in q["prompts", 4]["detail"]
    assert "lone surrogate U+D800" in q["sft", 3]["detail"]
    assert "invalid UTF-8 byte 0xff" in q["sft", 4]["detail"]
    assert "replacement character" in q["sft", 5]["detail"] and "U+0000" in q["sft", 6]["detail"]
    assert "1001 characters" in q["sft", 2]["detail"]
    assert "\\xff" in json.loads(q["sft", 4]["row_json"])["prompt"]          # the row, readable
    assert [r["id"] for r in arts["sft_domain"].read_table().to_pylist()] == ["s9"]
    assert arts["rl_prompts"].read_table().column("id").to_pylist() == ["p0", "p3"]


def test_a_missing_required_column_names_the_artifact_and_the_column(tmp_path):
    store = ArtifactStore(str(tmp_path / "s"))
    table = pa.table({c: ["x"] for c in ("id", "domain", "task", "language", "prompt")})   # no response

    def fill(w):
        pq.write_table(table, w.path(TABLE_FILE))
        w.rows = table.num_rows
    sft = commit_artifact(store, "sft_samples", "no_response", fill)
    good = commit_table(store, "prompts", "p", pa.Table.from_pylist([_prompt(0, "What is 1 + 1?", "2")]))
    with pytest.raises(SchemaError, match=r"no_response.*missing column 'response'"):
        data_filter.run(DataFilterConfig(), {"sft": sft, "prompts": good, "eval": good}, store)


def test_answers_are_checked_through_the_gym_module(tmp_path, monkeypatch):
    store = ArtifactStore(str(tmp_path / "s"))
    real = quality.score

    def score(verifier, response, reference):
        if reference == "boom":   # a verifier that cannot read this reference
            raise ValueError("cannot parse reference 'boom'")
        return real(verifier, response, reference)
    monkeypatch.setattr(quality, "score", score)   # the gym entry the filter calls
    rows = [_sft(0, "What is 2 + 2?", "<think>2 + 2 = 4.</think>4", reference="4", verifier=MATH_VERIFIER),
            _sft(1, "What is 3 + 3?", "<think>3 + 3 = 7.</think>7", reference="6", verifier=MATH_VERIFIER),
            _sft(2, "What is 4 + 4?", "<think>4 + 4 = 8.</think>8", reference="boom", verifier=MATH_VERIFIER),
            _sft(3, "What is 5 + 5?", "<think>5 + 5", reference="10", verifier=MATH_VERIFIER),
            _sft(4, "What is 6 + 6?", "<think>6 + 6 = 12.</think>12", reference="12", verifier='{"type": "nope"}')]
    _, q, _ = _run(store, rows, [])
    assert {i: (r["reason"], r["field"]) for (_, i), r in q.items()} == {
        1: ("wrong_answer", "response"), 2: ("bad_verifier", "verifier"), 3: ("unclosed_think", "response"),
        4: ("bad_verifier", "verifier")}
    assert "cannot parse reference" in q["sft", 2]["detail"] and "unknown verifier type" in q["sft", 4]["detail"]


def test_streaming_in_small_batches_gives_the_same_result(tmp_path):
    rows = [_sft(i, f"Question number {i}: " + (LONG_A if i % 3 else LONG_B), "Answer.") for i in range(12)]
    rows += [_sft(12, rows[4]["prompt"], "Answer."), _sft(13, "How to make a pipe bomb", "no"),
             _sft(14, rows[5]["prompt"].replace("kettle", "pot"), "Answer.")]
    results = []
    for batch_rows in (4, 1000):
        store = ArtifactStore(str(tmp_path / f"s{batch_rows}"))
        arts, q, _ = _run(store, rows, [], cfg=DataFilterConfig(batch_rows=batch_rows))
        results.append(({k: (r["reason"], r["detail"]) for k, r in q.items()},
                        arts["sft_domain"].read_table().column("id").to_pylist()))
        assert arts["sft_domain"].manifest.rows + len(q) == len(rows)
    assert results[0] == results[1]
    assert results[0][0][("sft", 12)][0] == "duplicate" and results[0][0][("sft", 13)][0] == "harmful"


def test_counts_must_balance_before_commit():
    summary = {"rows_in": {"sft": 3, "prompts": 1}, "kept": {"sft_longcot": 1, "sft_domain": 1, "rl_prompts": 1},
               "quarantined": {"sft": {}, "prompts": {}}}

    class A:
        def __init__(self, rows):
            self.manifest = type("M", (), {"rows": rows})()

    class W:
        def __init__(self, rows):
            self.rows = rows
    outputs = {"sft_longcot": W(1), "sft_domain": W(1), "rl_prompts": W(1), "quarantine": W(0)}
    with pytest.raises(AssertionError, match="do not balance"):
        data_filter._check_balance(summary, {"sft": A(3), "prompts": A(1)}, outputs)
    summary["quarantined"]["sft"] = {"duplicate": 1}
    outputs["quarantine"] = W(1)
    data_filter._check_balance(summary, {"sft": A(3), "prompts": A(1)}, outputs)


def test_config_validates_names_and_bands():
    with pytest.raises(ValueError, match="unknown harm filter 'nope'"):
        DataFilterConfig(harm_filter="nope")
    with pytest.raises(ValueError, match="cannot exceed"):
        DataFilterConfig(minhash_num_perm=16, minhash_bands=32)
