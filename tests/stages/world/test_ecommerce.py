"""The e-commerce suites of the world in seven languages: teachers verify, mistakes do not,
alternatives tie, items are deterministic and plentiful, and a world of them builds clean."""
from __future__ import annotations

import json
import random

import pytest

from compass.gym.mcq_choice.extract import extract_choice
from compass.gym.score import is_judged, needs_reference, score
from compass.gym.verifiers.title_rules import _find, _fold
from stages.world.build import ItemFactory, build_world
from stages.world.suites import get_suite
from stages.world.suites.catalog import (ADJECTIVES, BRANDS, CATEGORIES, COLORS, DEPARTMENTS, LANGUAGES, MATERIALS,
                                         NOUN_MATERIALS, NOUNS, PROMO_PHRASES, PT_FEMININE, SELLING_POINTS)
from stages.world.suites.ecommerce_category import ANSWER_PHRASES
from tests.helpers import small_world_config

SUITES = {"ecommerce_category": "mcq_category", "ecommerce_relevance": "mcq_relevance",
          "ecommerce_brand": "mcq_brand", "attribute_json": "attribute_json", "title_rewrite": "title_rewrite"}
PER_LEVEL = 12


def _items(name: str, lang: str, seed: int = 0):
    suite, rng = get_suite(name), random.Random(f"{seed}:{name}:{lang}")
    return suite, rng, [suite.make(rng, f"{name}-{lvl}-{k}", lvl, lang) for lvl in range(1, 6) for k in range(PER_LEVEL)]


# -- teachers, mistakes, ties ------------------------------------------------------------
@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("name", sorted(SUITES))
def test_teacher_verifies_wrong_fails_alt_ties(name, lang):
    suite, rng, items = _items(name, lang)
    assert lang in suite.languages and suite.domain == "ecommerce" and not suite.reasoning
    for it in items:
        assert (it.domain, it.task, it.language) == ("ecommerce", SUITES[name], lang)
        assert it.difficulty in range(1, 6) and it.prompt and it.reference
        assert "<think>" not in it.response
        assert score(it.verifier, it.response, it.reference) == 1.0, (it.prompt, it.response)
        wrong = suite.wrong(rng, it)
        assert score(it.verifier, wrong, it.reference) < 1.0, (it.prompt, wrong)
        alt = suite.alt(rng, it)
        assert alt != it.response and score(it.verifier, alt, it.reference) == 1.0, (it.prompt, alt)


def test_difficulty_is_the_generators_level():
    for name in SUITES:
        _, _, items = _items(name, "en")
        assert [it.difficulty for it in items] == [lvl for lvl in range(1, 6) for _ in range(PER_LEVEL)]


def test_mcq_teacher_answers_with_the_letter_alone():
    for name in ("ecommerce_category", "ecommerce_relevance", "ecommerce_brand"):
        for lang in LANGUAGES:
            for it in _items(name, lang)[2]:
                assert it.response == it.reference and it.response in it.extra["letters"]


def test_mcq_answer_by_option_text_scores_as_that_option():
    # a model that names its option by text ("Livros", not "D") is right; another option's text is wrong
    for name in ("ecommerce_category", "ecommerce_relevance", "ecommerce_brand"):
        for lang in LANGUAGES:
            for it in _items(name, lang)[2]:
                options, letters = it.extra["options"], it.extra["letters"]
                right = options[letters.index(it.reference)]
                assert score(it.verifier, right, it.reference) == 1.0, (it.prompt, right)
                for letter, text in zip(letters, options):
                    if letter != it.reference and text.casefold() not in right.casefold():
                        assert score(it.verifier, text, it.reference) == 0.0, (it.prompt, text)


def test_relevance_level_one_has_no_substitutes_and_options_are_abc():
    _, _, items = _items("ecommerce_relevance", "vi")
    assert {it.reference for it in items if it.difficulty == 1} <= {"A", "C"}
    assert {it.reference for it in items} == {"A", "B", "C"}
    assert all(json.loads(it.verifier)["options"] == it.extra["options"] and len(it.extra["options"]) == 3
               for it in items)


def test_category_hard_levels_offer_sibling_categories():
    _, _, items = _items("ecommerce_category", "en")
    for it in items:
        dep = next(d for d, cats in DEPARTMENTS.items() if it.extra["category"] in cats)
        names = {CATEGORIES[c]["en"] for c in DEPARTMENTS[dep]}
        n_sib = sum(o in names for o in it.extra["options"]) - 1
        assert n_sib == {1: 0, 2: 0, 3: 1, 4: 2, 5: 2}[it.difficulty], it.prompt


def test_attribute_json_fields_grow_with_difficulty():
    import json
    _, _, items = _items("attribute_json", "pt")
    for it in items:
        gold = json.loads(it.reference)
        assert len(gold) == {1: 2, 2: 3}.get(it.difficulty, 4)
        assert list(gold) == list(json.loads(it.prompt.rsplit("\n", 1)[1]))   # the schema's key order
        assert json.loads(it.verifier)["schema"]["required"] == list(gold)


def test_title_rewrite_messiness_fails_the_rules():
    for lang in LANGUAGES:
        for it in _items("title_rewrite", lang)[2]:
            messy = it.prompt.split("\n", 1)[1]
            assert score(it.verifier, messy, "") < 1.0, messy
            assert len(it.response) <= 70


def test_verifier_kinds():
    for name in SUITES:
        it = get_suite(name).make(random.Random(0), "x", 3, "en")
        assert needs_reference(it.verifier) == (name != "title_rewrite")
        assert is_judged(it.verifier) == (name == "title_rewrite")


# -- determinism and supply --------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SUITES))
def test_same_seed_same_items(name):
    for lang in ("en", "zh-TW", "th"):
        a, b = _items(name, lang, seed=7)[2], _items(name, lang, seed=7)[2]
        assert [x.__dict__ for x in a] == [y.__dict__ for y in b]
        assert [x.prompt for x in a] != [y.prompt for y in _items(name, lang, seed=8)[2]]


@pytest.mark.parametrize("languages", [list(LANGUAGES), ["en", "id"], ["th"]])
@pytest.mark.parametrize("name", sorted(SUITES))
def test_two_thousand_unique_items_after_an_eval_set(name, languages):
    """ItemFactory keeps prompts unique, free of eval leaks and of near-duplicates (by data_filter's
    rules). Thai alone supplies fewer: one character is one token there, so the shared template
    weighs more in every pair's Jaccard similarity."""
    fac, suite = ItemFactory(languages), get_suite(name)
    r = random.Random("eval")
    for i in range(40):
        fac.make(suite, r, f"e{i}", i % 5 + 1, is_eval=True)
    r = random.Random("train")
    n = 400 if languages == ["th"] else 2000
    items = [fac.make(suite, r, f"t{i}", r.randint(1, 5)) for i in range(n)]
    assert len({it.prompt for it in items}) == n
    assert {it.language for it in items} == set(languages)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_no_template_run_reaches_the_leak_ngram(lang):
    """A 13-gram of fixed wording alone would be in every prompt of a language; with one eval
    prompt of that language, ItemFactory could then make no training item at all. Word-level
    grams (a noun, a category at one option letter) stay in a small share of the prompts."""
    from collections import Counter

    from compass.dedup.text import ngram_tokens

    def _grams(text: str, n: int = 13) -> set[tuple[str, ...]]:
        toks = ngram_tokens(text)
        return {tuple(toks[k:k + n]) for k in range(len(toks) - n + 1)} or {tuple(toks)}
    for name in SUITES:
        suite, rng = get_suite(name), random.Random(f"grams:{name}")
        df = Counter()
        for _ in range(300):
            df.update(_grams(suite.make(rng, "x", rng.randint(1, 5), lang).prompt))
        gram, n = df.most_common(1)[0]
        assert n <= 45, (name, n, " ".join(gram))


# -- the catalog ---------------------------------------------------------------------------
def test_catalog_covers_every_language():
    for table in (CATEGORIES, MATERIALS, COLORS):
        assert all(set(row) == set(LANGUAGES) and all(row.values()) for row in table.values())
    for table in (ADJECTIVES, SELLING_POINTS, PROMO_PHRASES):
        assert set(table) == set(LANGUAGES) and len({len(v) for v in table.values()}) == 1
    assert set(NOUNS) == set(CATEGORIES) == {c for cats in DEPARTMENTS.values() for c in cats}
    for cat, by_lang in NOUNS.items():
        assert set(by_lang) == set(LANGUAGES)
        for lang, nouns in by_lang.items():
            assert len(nouns) == len(NOUN_MATERIALS[cat]) == 5 and len(set(nouns)) == 5, (cat, lang)
        assert all(m in MATERIALS for ms in NOUN_MATERIALS[cat] for m in ms)
    assert PT_FEMININE <= {n for by_lang in NOUNS.values() for n in by_lang["pt"]}


def test_unspaced_catalog_words_are_shorter_than_the_leak_ngram():
    """Thai and Chinese count one n-gram token per character: a word of 13 would be a 13-gram."""
    from compass.dedup.text import ngram_tokens
    for lang in ("th", "zh-TW"):
        for w in _catalog_words(lang) + PROMO_PHRASES[lang]:
            assert len(ngram_tokens(w)) <= 12, (lang, w)


def _catalog_words(lang: str) -> list[str]:
    return ([n for by_lang in NOUNS.values() for n in by_lang[lang]] + ADJECTIVES[lang] + SELLING_POINTS[lang]
            + [row[lang] for table in (CATEGORIES, MATERIALS, COLORS) for row in table.values()])


def test_brands_and_spam_never_hide_in_other_words():
    """The title rules count a brand or promo phrase by finding it: it must not occur inside catalog text."""
    assert len(set(BRANDS)) == len(BRANDS)
    for a in BRANDS:
        assert not any(a.lower() in b.lower() for b in BRANDS if b != a), a
    for lang in LANGUAGES:
        text = [_fold(w) for w in _catalog_words(lang)]
        for phrase in BRANDS + PROMO_PHRASES[lang]:
            assert not any(_find(t, _fold(phrase)) for t in text), (lang, phrase)


# -- the answer in seven languages ------------------------------------------------------------
@pytest.mark.parametrize("lang", LANGUAGES)
def test_answer_phrases_extract_in_every_language(lang):
    for letter in "ABCD":
        assert extract_choice(ANSWER_PHRASES[lang].format(letter=letter)) == letter


@pytest.mark.parametrize("text,letter", [
    ("答案是 B。", "B"), ("正確答案為（C）", "C"), ("答案：Ｄ", "D"),
    ("Jawaban yang benar adalah C", "C"), ("Jawapan yang betul ialah D", "D"), ("Jawapan: A", "A"),
    ("Đáp án đúng là C", "C"), ("Đáp án: B", "B"),
    ("คำตอบคือข้อ C", "C"), ("คำตอบที่ถูกต้องคือ D", "D"),
    ("A resposta correta é a C", "C"), ("Alternativa correta: D", "D"), ("A resposta é A.", "A"),
    ("Opção A está errada; a resposta é C", "C"),
])
def test_extract_choice_multilingual(text, letter):
    assert extract_choice(text) == letter


# -- a world of them --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ecommerce_world():
    cfg = small_world_config(suites={name: {"n": 40, "n_eval": 10} for name in SUITES}, languages=list(LANGUAGES),
                             n_preference_pairs=40, n_planted=2)
    return cfg, build_world(cfg)


def test_world_of_seven_languages_builds_and_its_teachers_verify(ecommerce_world):
    _, w = ecommerce_world
    planted = {i for idx in w.planted["raw_sft"].values() for i in idx}
    rows = w.raw_sft.to_pylist()
    for i, r in enumerate(rows):
        if i not in planted:
            assert score(r["verifier"], r["response"], r["reference"]) == 1.0, r
    for table in (w.raw_sft, w.eval_prompts):
        assert set(table.column("language").to_pylist()) == set(LANGUAGES)
        assert set(table.column("task").to_pylist()) == set(SUITES.values())
    assert set(w.raw_prompts.column("difficulty").to_pylist()) == {1, 2, 3, 4, 5}


def test_world_preference_pairs_have_ties_and_gaps(ecommerce_world):
    _, w = ecommerce_world
    labels = {"A": 0, "B": 0, "TIE": 0}
    for r in w.preferences.to_pylist():
        sa = score(r["verifier"], r["response_a"], r["reference"])
        sb = score(r["verifier"], r["response_b"], r["reference"])
        assert r["label"] == ("TIE" if sa == sb else "A" if sa > sb else "B"), r
        labels[r["label"]] += 1
    assert all(labels.values()), labels
    assert set(w.preferences.column("task").to_pylist()) == set(SUITES.values())


def test_data_filter_quarantines_exactly_the_planted_rows(ecommerce_world, tmp_path):
    from compass.store.store import ArtifactStore
    from stages.data_filter import stage as data_filter
    from stages.data_filter.config import DataFilterConfig
    from tests.helpers import commit_table
    _, w = ecommerce_world
    store = ArtifactStore(str(tmp_path / "store"))
    inputs = {"sft": commit_table(store, "sft_samples", "raw_sft", w.raw_sft),
              "prompts": commit_table(store, "prompts", "raw_prompts", w.raw_prompts),
              "eval": commit_table(store, "prompts", "eval_prompts", w.eval_prompts)}
    result = data_filter.run(DataFilterConfig(), inputs, store)
    q = store.open(result.outputs["quarantine"]).read_table().to_pylist()
    for slot, table in (("sft", "raw_sft"), ("prompts", "raw_prompts")):
        expected = {i for idx in w.planted[table].values() for i in idx}
        assert expected
        assert {r["row_index"] for r in q if r["slot"] == slot} == expected, slot


def test_the_brand_is_the_same_token_in_the_listing_as_in_its_option():
    """A brand is copied from the listing to the answer only if both write it with the same tokens: the
    world's byte-level BPE makes "Lumeo" at a line's start or after "。" another token than " Lumeo" after
    "C. " (38% of the brand prompts written as sentences were so)."""
    from compass.lm.model_factory import build_tokenizer
    from stages.world.suites.ecommerce_brand import QUESTIONS
    items = [it for lang in LANGUAGES for it in _items("ecommerce_brand", lang)[2]]
    tok = build_tokenizer([it.prompt for it in items])

    def ids(text):
        return tok(text, add_special_tokens=False)["input_ids"]

    def holds(seq, sub):
        return any(seq[i:i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))

    for it in items:
        listing = it.prompt.split(f"\n{QUESTIONS[it.language]}\n")[0]
        letter_ids = ids(f"\n{it.reference}.")
        brand_ids = ids(f"\n{it.reference}. {it.extra['brand']}")[len(letter_ids):]
        assert holds(ids("\n" + listing), brand_ids), (it.id, listing, tok.convert_ids_to_tokens(brand_ids))
