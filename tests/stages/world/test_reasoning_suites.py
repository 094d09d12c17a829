"""World suites math_word, code, ifeval, tool_use and qa: teachers verify, mistakes fail, ties tie,
difficulty is a real knob, thousands of unique prompts, and a world built from them is clean."""
from __future__ import annotations

import json
import random
import re
from collections import defaultdict

import pytest

from compass.gym.score import final_answer, score
from stages.world.build import ItemFactory, build_world
from stages.world.suites import LANGUAGES, get_suite
from tests.helpers import small_world_config

SUITES = ("math_word", "code", "ifeval", "tool_use", "qa")
MAX_TOKENS = 160   # the longest teacher answer must fit the tiny model's budget


def sample(name: str, per_level: int, seed: int = 0):
    suite = get_suite(name)
    rng = random.Random(f"{seed}:{name}")
    return [suite.make(rng, f"{name}-{level}-{i}", level, suite.languages[i % len(suite.languages)])
            for level in range(1, 6) for i in range(per_level)]


@pytest.mark.parametrize("name", SUITES)
def test_teacher_verifies_mistake_fails_alt_ties(name):
    suite = get_suite(name)
    rng = random.Random(1)
    for it in sample(name, 3 if name == "code" else 12):
        assert (it.domain, it.difficulty) == (suite.domain, int(it.id.split("-")[1]))
        assert score(it.verifier, it.response, it.reference) == 1.0, it
        wrong = suite.wrong(rng, it)
        assert wrong and wrong != it.response
        assert score(it.verifier, wrong, it.reference) < 1.0, (it.prompt, wrong)
        if suite.alt is not None:
            alt = suite.alt(rng, it)
            assert alt != it.response and score(it.verifier, alt, it.reference) == 1.0, (it.prompt, alt)
        thinks = (it.response.startswith("<think>") and it.response.count("<think>") == 1
                  and it.response.count("</think>") == 1 and "<think></think>" not in it.response)
        assert thinks == suite.reasoning and ("<think>" in it.response) == suite.reasoning, it.response
        assert final_answer(it.response), it.response


@pytest.mark.parametrize("name", SUITES)
def test_same_draws_give_the_same_items(name):
    def rows(items):
        return [(it.prompt, it.response, it.reference, it.verifier, it.language) for it in items]
    assert rows(sample(name, 4)) == rows(sample(name, 4))
    assert rows(sample(name, 4)) != rows(sample(name, 4, seed=1))


@pytest.mark.parametrize("name", SUITES)
def test_two_thousand_unique_prompts_without_running_out(name):
    """Like build_world: eval items first, then training items at random levels, unique and leak-free."""
    suite = get_suite(name)
    fac = ItemFactory(list(LANGUAGES))
    r = random.Random("eval")
    evals = [fac.make(suite, r, f"e{i}", i % 5 + 1, is_eval=True) for i in range(48)]
    r = random.Random("train")
    items = [fac.make(suite, r, f"t{i}", r.randint(1, 5)) for i in range(2000)]
    prompts = [" ".join(it.prompt.split()) for it in evals + items]
    assert len(set(prompts)) == len(prompts)
    levels = defaultdict(int)
    for it in items:
        levels[it.difficulty] += 1
    assert set(levels) == {1, 2, 3, 4, 5} and min(levels.values()) > 200, dict(levels)
    assert {it.language for it in items} == set(suite.languages)


def test_difficulty_is_a_knob():
    steps = defaultdict(list)
    for it in sample("math_word", 20):
        steps[it.difficulty].append(len(re.findall(r" = ", it.response)))
    means = [sum(steps[d]) / len(steps[d]) for d in range(1, 6)]
    assert means == sorted(means) and means[0] < 2 < 4 < means[4], means

    from stages.world.suites.tool_use import N_CALLS
    for it in sample("tool_use", 6):
        assert len(json.loads(it.reference)) == N_CALLS[it.difficulty] == it.response.count("<tool_call>")

    for it in sample("ifeval", 10):
        n = len(json.loads(it.verifier)["instruction_id_list"])
        assert n == it.difficulty + (it.language != "en"), it.verifier

    from stages.world.suites.code import FAMILIES
    for it in sample("code", 6):
        assert it.extra["family"] in {f.__name__ for f in FAMILIES[it.difficulty]}
        assert len(json.loads(it.verifier)["tests"]) >= 3


def test_code_spec_and_reference():
    it = sample("code", 1)[0]
    spec = json.loads(it.verifier)
    assert spec["type"] == "code" and spec["timeout_s"] > 0 and all(t.startswith("assert ") for t in spec["tests"])
    assert it.reference.startswith("def ") and it.reference in it.response


def test_ifeval_sentence_banks_decide_keywords():
    """A frame's keyword occurs in no other frame, topic or end phrase of its language; no commas anywhere."""
    from stages.world.suites.ifeval import END_PHRASES, FRAMES, TOPICS
    for lang, frames in FRAMES.items():
        assert len(TOPICS[lang]) == len(TOPICS["en"]) and len(frames) == len(FRAMES["en"])
        for i, (_, key) in enumerate(frames):
            others = [f for j, (f, _) in enumerate(frames) if j != i] + list(TOPICS[lang]) + list(END_PHRASES[lang])
            assert key.lower() in frames[i][0].lower()
            assert not any(key.lower() in o.lower() for o in others), (lang, key)
        assert not any("," in t for t in [f for f, _ in frames] + list(TOPICS[lang]) + list(END_PHRASES[lang]))


def test_ifeval_covers_every_language_with_its_rule():
    for it in sample("ifeval", 7):
        ids = json.loads(it.verifier)["instruction_id_list"]
        assert ("language:response_language" in ids) or it.language == "en"


# -- a world built from these suites ----------------------------------------------------------
@pytest.fixture(scope="module")
def world():
    cfg = small_world_config(suites={name: {"n": 60, "n_eval": 10} for name in SUITES},
                             languages=list(LANGUAGES), n_preference_pairs=40)
    return cfg, build_world(cfg)


def test_world_rows_verify(world):
    _, w = world
    planted = w.planted["raw_sft"]
    bad = {i for kind, idx in planted.items() for i in idx}
    rows = w.raw_sft.to_pylist()
    assert {r["task"] for r in rows} == {"math_word", "code_function", "ifeval", "tool_call", "qa"}
    for i, r in enumerate(rows):
        if i not in bad:
            assert score(r["verifier"], r["response"], r["reference"]) == 1.0, r
    for i in planted["wrong_answer"]:
        assert score(rows[i]["verifier"], rows[i]["response"], rows[i]["reference"]) < 1.0
    no_ref = set(w.planted["raw_prompts"]["no_reference"])
    prompt_rows = [r for i, r in enumerate(w.raw_prompts.to_pylist()) if i not in no_ref]
    assert all(r["verifier"] and r["reference"] for r in prompt_rows + w.eval_prompts.to_pylist())
    for r in w.preferences.to_pylist():
        sa = score(r["verifier"], r["response_a"], r["reference"])
        sb = score(r["verifier"], r["response_b"], r["reference"])
        assert r["label"] == ("TIE" if sa == sb else "A" if sa > sb else "B"), r


def test_world_answers_fit_the_token_budget(world):
    from compass.lm.model_factory import build_tokenizer
    cfg, w = world
    tok = build_tokenizer(w.texts(), cfg.tokenizer)
    lengths = defaultdict(list)
    for r in w.raw_sft.to_pylist():
        if r["response"]:
            lengths[r["task"]].append(len(tok(r["response"], add_special_tokens=False)["input_ids"]))
    assert max(max(v) for v in lengths.values()) <= MAX_TOKENS, {k: max(v) for k, v in lengths.items()}
    for name in SUITES:  # easy items have short answers
        easy = [len(tok(it.response, add_special_tokens=False)["input_ids"]) for it in sample(name, 30)[:30]]
        assert sum(easy) / len(easy) <= 60, (name, sum(easy) / len(easy))
