"""Data filter: planted bad rows quarantined with the right reason, counts balance, routing, decontamination."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from compass.store.store import ArtifactStore
from stages.data_filter import stage as data_filter
from stages.data_filter.config import DataFilterConfig
from compass.dedup.decontam import Decontaminator
from compass.dedup.text import ngram_tokens, text_hash
from compass.gym.score import parse_verifier
from tests.helpers import commit_table

# planted kind (world) -> reason (data_filter)
EXPECTED_REASON = {"duplicate": "duplicate", "truncated": "unclosed_think", "empty": "empty_response",
                   "wrong_answer": "wrong_answer", "contaminated": "contaminated",
                   "no_reference": "missing_reference"}


@pytest.fixture(scope="module")
def filtered(world_arts, tmp_path_factory):
    store = ArtifactStore(str(tmp_path_factory.mktemp("data_filter") / "store"))
    inputs = {"sft": world_arts["raw_sft"], "prompts": world_arts["raw_prompts"], "eval": world_arts["eval_prompts"]}
    result = data_filter.run(DataFilterConfig(), inputs, store)
    return store, inputs, result, {s: store.open(u) for s, u in result.outputs.items()}


def test_outputs_have_declared_kinds(filtered):
    _, _, result, arts = filtered
    assert result.status == "ran"
    assert {s: a.kind for s, a in arts.items()} == {"sft_longcot": "sft_samples", "sft_domain": "sft_samples",
                                                     "rl_prompts": "prompts", "quarantine": "quarantine"}
    for a in arts.values():
        assert a.read_table().num_rows == a.manifest.rows


def test_exactly_the_planted_rows_are_quarantined_with_the_right_reason(filtered):
    _, inputs, _, arts = filtered
    q = arts["quarantine"].read_table().to_pylist()
    for slot in ("sft", "prompts"):
        planted = inputs[slot].manifest.extra["planted"]
        expected = {i: EXPECTED_REASON[kind] for kind, idx in planted.items() for i in idx}
        got = {r["row_index"]: r["reason"] for r in q if r["slot"] == slot}
        assert got == expected, slot
        rows = inputs[slot].read_table().to_pylist()
        for r in q:
            if r["slot"] == slot:
                assert r["source"] == inputs[slot].uri
                assert json.loads(r["row_json"]) == rows[r["row_index"]]
    assert {r["reason"] for r in q} == set(EXPECTED_REASON.values())


def test_counts_balance(filtered):
    _, inputs, _, arts = filtered
    n_sft, n_prompts = inputs["sft"].manifest.rows, inputs["prompts"].manifest.rows
    q = arts["quarantine"].read_table()
    q_slot = q.column("slot").to_pylist()
    assert n_sft == arts["sft_longcot"].manifest.rows + arts["sft_domain"].manifest.rows + q_slot.count("sft")
    assert n_prompts == arts["rl_prompts"].manifest.rows + q_slot.count("prompts")
    extra = arts["quarantine"].manifest.extra
    assert extra["rows_in"] == {"sft": n_sft, "prompts": n_prompts}
    for slot, n in extra["rows_in"].items():
        kept = (extra["kept"]["sft_longcot"] + extra["kept"]["sft_domain"]) if slot == "sft" \
            else extra["kept"]["rl_prompts"]
        assert kept + sum(extra["quarantined"][slot].values()) == n
    assert arts["rl_prompts"].manifest.extra == extra


def test_routing_and_kept_rows_are_clean(filtered):
    _, inputs, _, arts = filtered
    longcot = arts["sft_longcot"].read_table().to_pylist()
    domain = arts["sft_domain"].read_table().to_pylist()
    assert longcot and domain
    assert all(r["response"].startswith("<think>") and "</think>" in r["response"] for r in longcot)
    assert all("<think>" not in r["response"] and r["response"].strip() for r in domain)
    assert {r["domain"] for r in longcot} == {"math"} and {r["domain"] for r in domain} == {"ecommerce"}
    eval_prompts = set(inputs["eval"].read_table().column("prompt").to_pylist())
    rl = arts["rl_prompts"].read_table().to_pylist()
    assert rl and all(r["reference"] and parse_verifier(r["verifier"]) for r in rl)
    assert not {r["prompt"] for r in rl + longcot + domain} & eval_prompts
    assert len({text_hash(r["prompt"]) for r in rl}) == len(rl)
    assert {r["difficulty"] for r in rl if r["domain"] == "math"} == {1, 2, 3, 4, 5}


def test_second_run_reuses(filtered):
    store, inputs, result, _ = filtered
    again = data_filter.run(DataFilterConfig(), inputs, store)
    assert again.status == "reused" and again.outputs == result.outputs


# -- the checks on hand-made rows ------------------------------------------------
def _commit(store, kind, name, rows, schema=None):
    return commit_table(store, kind, name, pa.Table.from_pylist(rows, schema=schema))


def _sft(i, prompt, response, **extra):
    return {"id": f"s{i}", "domain": "math", "task": "arithmetic", "language": "en", "prompt": prompt,
            "response": response, **extra}


def _prompt(i, prompt, reference="1", verifier='{"type": "math_exact"}'):
    return {"id": f"p{i}", "domain": "math", "task": "arithmetic", "language": "en", "prompt": prompt,
            "reference": reference, "verifier": verifier, "difficulty": 1, "pass_rate": None}


def test_hand_made_rows(tmp_path):
    store = ArtifactStore(str(tmp_path / "s"))
    sft = _commit(store, "sft_samples", "sft", [
        _sft(0, "What is 1 + 1?", "<think>1 + 1 = 2.</think>2"),          # kept: reference via prompts table
        _sft(1, "What is 2 + 2?", "<think>2 + 2 = 5.</think>5"),          # wrong, reference via prompts table
        _sft(2, "What is 3 + 3?", "2 + 2 = 4.</think>6"),                 # stray </think>
        _sft(3, "What is 4 + 4?", "<think>4 + 4 = 8.</think>  "),         # no final answer
        _sft(4, "   ", "<think>x</think>1"),                              # empty prompt
        _sft(5, "what is 1 +  1? ", "<think>1 + 1 = 2.</think>2 "),       # duplicate after normalization
        _sft(6, "Name a colour.", "Blue"),                                # no reference: kept, domain route
    ])
    prompts = _commit(store, "prompts", "prompts", [
        _prompt(0, "What is 1 + 1?", "2"), _prompt(1, "What is 2 + 2?", "4"),
        _prompt(2, "What is 9 + 9?", "18", verifier='{"type": "nope"}'),   # bad verifier
        _prompt(3, "What is 7 + 7?", "14", verifier="not json"),          # bad verifier
        _prompt(4, "WHAT IS 1 + 1?", "2"),                                # duplicate of row 0
        _prompt(5, "Quick: what is 5 + 6 * 2?", "17"),                    # contains a whole eval prompt
        _prompt(6, "What is 5 + 6 * 2 - 1?", "16"),                       # starts like it but is another question
    ])
    evals = _commit(store, "prompts", "eval", [_prompt(0, "What is 5 + 6 * 2?", "17")])
    res = data_filter.run(DataFilterConfig(), {"sft": sft, "prompts": prompts, "eval": evals}, store)
    q = store.open(res.outputs["quarantine"]).read_table().to_pylist()
    got = {(r["slot"], r["row_index"]): (r["reason"], r["field"]) for r in q}
    assert got == {
        ("sft", 1): ("wrong_answer", "response"), ("sft", 2): ("stray_think_close", "response"),
        ("sft", 3): ("empty_answer", "response"), ("sft", 4): ("empty_prompt", "prompt"),
        ("sft", 5): ("duplicate", None),
        ("prompts", 2): ("bad_verifier", "verifier"), ("prompts", 3): ("bad_verifier", "verifier"),
        ("prompts", 4): ("duplicate", None), ("prompts", 5): ("contaminated", "prompt"),
    }
    assert [r["id"] for r in store.open(res.outputs["sft_longcot"]).read_table().to_pylist()] == ["s0"]
    assert [r["id"] for r in store.open(res.outputs["sft_domain"]).read_table().to_pylist()] == ["s6"]
    assert [r["id"] for r in store.open(res.outputs["rl_prompts"]).read_table().to_pylist()] == ["p0", "p1", "p6"]

    # answers are not checked when asked not to; the wrong trace is then kept
    res2 = data_filter.run(DataFilterConfig(check_answers=False), {"sft": sft, "prompts": prompts, "eval": evals},
                           store)
    assert "s1" in store.open(res2.outputs["sft_longcot"]).read_table().column("id").to_pylist()


def _decon(evals, **kw):
    return Decontaminator([ngram_tokens(t) for t in evals], **kw)


def test_decontamination_ngrams():
    long_eval = "Product: Lumio Premium Wireless Earbuds X2\nCategory?\nA. Electronics\nB. Toys\nC. Books\nD. Pets"
    d = _decon(["What is 3 + 4?", long_eval], n=13, max_hits=10)
    hit = lambda text: d.hit(ngram_tokens(text))  # noqa: E731
    assert hit("What is 3 + 4?") and hit("Please: what is 3 + 4 ?")
    assert not hit("What is 3 + 4 * 2?") and not hit("What is 13 + 4?") and not hit("What is 3 - 4?")
    swapped = long_eval.replace("Lumio", "Zenta")
    assert hit(swapped)                                   # 13-grams after the brand are shared
    other = long_eval.replace("Earbuds X2", "Keyboard Pro")
    assert not hit(other)                                  # same template, another product
    assert len(ngram_tokens("Category?\nA. Electronics\nB. Toys\nC. Books\nD. Pets")) < 13


def test_decontamination_ignores_template_text_of_an_eval_suite():
    # smaller n: the suite's template is shared by its items and must not count as a leak
    template = "Product: {}\nCategory?\nA. Electronics\nB. Toys\nC. Books\nD. Pets"
    evals = [template.format(f"Gadget Model {i} Deluxe Edition") for i in range(10)]
    d = _decon(evals, n=6, max_hits=50, template_share=0.2)
    assert d.template and d.stats()["template_ngrams"] == len(d.template)
    training = [template.format(f"Kettle Type {i} Steel Version") for i in range(20)]
    assert not any(d.hit(ngram_tokens(t)) for t in training)
    assert d.hit(ngram_tokens("Is this a leak? " + evals[3]))[0] == 3
    # the absolute cap: an n-gram in more than max_hits eval prompts of any suites is template too
    d2 = _decon(evals, n=6, max_hits=5, template_share=1.0)
    assert not any(d2.hit(ngram_tokens(t)) for t in training)
    # n-grams running from a suite's shared instruction into an item's first words are no evidence either
    head = "Answer the following question about the text and think about the details before you answer."
    suite = [f"{head} {w} is the word of item {i} in the list of things to remember" for i, w in
             enumerate(["apple", "river", "stone", "cloud", "flame", "grass", "ocean", "sand"])]
    d4 = _decon(suite, n=13)
    assert not d4.hit(ngram_tokens(f"{head} apple pie recipes are easy to make at home with kids"))
    assert d4.hit(ngram_tokens("Leak: apple is the word of item 0 in the list of things to remember, ok"))
    # a short eval prompt is matched whole, a too short one not at all
    d3 = _decon(["What is 3 + 4?", "Hi"], n=13, min_tokens=5)
    assert d3.hit(ngram_tokens("so, what is 3 + 4? tell me")) and not d3.hit(ngram_tokens("Hi there"))
    assert d3.stats()["too_short_prompts"] == 1


def test_config_is_strict():
    with pytest.raises(ValueError):
        DataFilterConfig(rl_fractio=0.5)
