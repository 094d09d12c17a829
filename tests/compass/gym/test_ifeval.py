"""The instruction-following verifier: every IFEval id and compass:* id by hand, strict vs loose, the rows
contract's errors, hostile input, IFEval's reference labels and unit cases, and the benchmark."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from compass.bench import gym_ifeval as bench
from compass.gym.instructions.extra import market_languages
from compass.gym.instructions.ifeval import IFEVAL_IDS, RULES, evaluate
from compass.gym.instructions.text import count_capital_words, count_sentences, split_sentences
from compass.gym.score import score
from compass.gym.rows import MAX_RESPONSE_CHARS, score_row

DATA = Path(__file__).resolve().parents[4] / "shared" / "data" / "ifeval"
needs_data = pytest.mark.skipif(not (DATA / "input_data.jsonl").is_file(),
                                reason="IFEval reference data (../shared/data) not present")

EN = "The market opens early and the farmers bring fresh fruit and vegetables from the hills every morning."
# (id, kwargs, a response that follows, one that does not)
IFEVAL_CASES = [
    ("change_case:capital_word_frequency", {"capital_frequency": 3, "capital_relation": "at least"},
     "THE BIG sale is ON now", "The big SALE is on now"),
    ("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": "less than"},
     "Only ONE capital word here", "I think AI is great"),                # "I" counts, as in NLTK
    ("change_case:english_capital", {}, "I LIKE TO READ BOOKS ABOUT HISTORY BECAUSE THEY TELL ME WHAT HAPPENED.", EN),
    ("change_case:english_lowercase", {}, EN.lower(), EN),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Write a poem about tea."},
     "  write a POEM about tea. Here it is...", "Sure! Write a poem about tea."),
    ("combination:two_responses", {}, "First answer.\n******\nSecond answer.", "Same.\n******\nSame."),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Dear [name], at [address].", "Dear [name]."),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Thanks.\nP. S. See you.", "Thanks. PS see you."),
    ("detectable_format:constrained_response", {}, "My answer is maybe.", "My answer is perhaps."),
    ("detectable_format:json_format", {}, '```JSON\n["a", 1]\n```', "{'a': 1}"),
    ("detectable_format:multiple_sections", {"section_spliter": "Section", "num_sections": 2},
     "Section 1\nA\nSection 2\nB", "Section 1\nA\nPart 2\nB"),
    ("detectable_format:number_bullet_lists", {"num_bullets": 3}, "* a\n  * b\n- c\n**bold** line", "* a\n* b"),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*one* and **two**", "*one* and * *"),
    ("detectable_format:title", {}, "<<Tea time>>\nText.", "<<Tea\ntime>>\nText."),
    ("keywords:existence", {"keywords": ["tea", "C++"]}, "I like TEA and c++.", "I like tea and C."),
    ("keywords:forbidden_words", {"forbidden_words": ["cat"]}, "A category of dogs.", "My CAT sleeps."),
    ("keywords:frequency", {"keyword": " tea ", "frequency": 2, "relation": "at least"}, "Tea? Steam, tea.", "tea"),
    ("keywords:frequency", {"keyword": "tea", "frequency": 2, "relation": "less than"}, "tea", "tea tea"),
    ("keywords:letter_frequency", {"letter": "Z", "let_frequency": 3, "let_relation": "at least"}, "zZz", "zz"),
    ("keywords:letter_frequency", {"letter": "#", "let_frequency": 2, "let_relation": "at least"}, "#a #b", "#a"),
    ("language:response_language", {"language": "pt"}, "Eu gosto muito de café e penso nisso todos os dias da semana.",
     EN),
    ("length_constraints:nth_paragraph_first_word", {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "tea"},
     "Intro.\n\n\"Tea, again.\"", "Intro.\n\nCoffee again."),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "One\n***\nTwo\n***", "One\n***\n\n***\nTwo"),
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "less than"},
     "Mr. Smith came at 3 p.m. yesterday. He left.", "One. Two! Three?"),
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "at least"},
     "Stop. Wait... Now go! Fine.", "A list:\n1. apples\n2. pears"),
    ("length_constraints:number_words", {"num_words": 4, "relation": "at least"}, "one, two. three_3 four", "a b-c"),
    ("length_constraints:number_words", {"num_words": 3, "relation": "less than"}, "tea time", "don't go"),
    ("punctuation:no_comma", {}, "No commas at all.", "One, two."),
    ("startend:end_checker", {"end_phrase": "Any other questions?"}, '"Done. any other questions?"',
     "Any other questions? Bye."),
    ("startend:quotation", {}, ' "quoted" ', '"half'),
]
COMPASS_CASES = [
    ("compass:response_language", {"language": "zh-TW"}, "我們這裡的咖啡很好喝，歡迎來買。", "我们这里的咖啡很好喝，欢迎来买。"),
    ("compass:response_language", {"language": "zh-CN"}, "我们这里的咖啡很好喝，欢迎来买。", "我們這裡的咖啡很好喝，歡迎來買。"),
    ("compass:response_language", {"language": "ms"},
     "Saya sangat gemar kopi kerana rasanya sedap dan harganya berpatutan sahaja.",
     "Saya sangat suka kopi karena rasanya enak dan harganya murah saja, bisa dibeli di toko."),
    ("compass:response_language", {"language": "id"},
     "Saya sangat suka kopi karena rasanya enak dan harganya murah saja, bisa dibeli di toko.",
     "Saya sangat gemar kopi kerana rasanya sedap dan harganya berpatutan sahaja."),
    ("compass:response_language", {"language": "th"}, "ฉันชอบกาแฟมากและดื่มทุกวันตอนเช้า", EN),
    ("compass:response_language", {"language": "vi"}, "Tôi rất thích cà phê và uống nó mỗi buổi sáng với bạn bè.", EN),
    ("compass:response_language", {"language": "en"}, EN, "Eu gosto muito de café e penso nisso todos os dias."),
    ("compass:symbol_count", {"symbol": "!", "count": 2}, "Wow! Great!", "Wow! Great! Yes!"),
    ("compass:symbol_count", {"symbol": "#", "count": 2, "relation": "at least"}, "#a #b #c", "#a"),
    ("compass:json_object", {"required_keys": ["name"]}, '```json\n{"name": "x", "n": 1}\n```', '["name"]'),
    ("compass:json_object", {}, '{"a": {"b": []}}', '{"a": 1'),
    ("compass:max_chars", {"max_chars": 5}, "  abcde \n", "abcdef"),
    ("compass:no_emoji", {}, "Great price, 100% cotton © ™ →", "Great price 👍"),
    ("compass:no_emoji", {}, "Sunny today", "Sunny today ☀️"),
    ("compass:numbered_list", {"num_items": 3}, "Steps:\n1. a\n2) b\n  3. c", "1. a\n3. b\n4. c"),
    ("compass:numbered_list", {"num_items": 2, "relation": "at least"}, "1. a\n2. b\n3. c", "1. a"),
    ("compass:table_rows", {"num_rows": 2}, "| a | b |\n|---|:-:|\n| 1 | 2 |\n| 3 | 4 |\n\nafter | x",
     "| a | b |\n| 1 | 2 |\n| 3 | 4 |"),
    ("compass:keyword_order", {"keywords": ["price", "size", "color"]}, "Price first, then SIZE, then color.",
     "Color, size and price."),
    ("compass:ends_with_question", {}, 'Would you like more? "', "Would you like more? Yes."),
    ("compass:ends_with_question", {}, "你想要哪一個？", "你想要哪一個。"),
    ("compass:paragraph_word_limit", {"max_words": 3}, "one two three\n\n  \nfour five", "one two three four\n\nfive"),
    ("compass:starts_with", {"start_phrase": "Dear customer"}, "\n dear Customer, thanks", "Hello dear customer"),
    ("compass:no_urls", {}, "Visit our shop in Jakarta.", "Visit https://shop.example.com now"),
]
CASES = IFEVAL_CASES + COMPASS_CASES


@pytest.mark.parametrize("iid,kwargs,good,bad", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_follows_and_not(iid, kwargs, good, bad):
    assert evaluate([iid], [kwargs], good) == [True], good
    assert evaluate([iid], [kwargs], bad) == [False], bad


def test_every_id_has_hand_cases():
    assert {c[0] for c in CASES} == set(RULES)
    assert len(IFEVAL_IDS) == 25 and len(set(RULES) - set(IFEVAL_IDS)) >= 10


def test_capital_words_follow_nltk_tokens():
    assert count_capital_words("THE BIG sale is ON now") == 3
    assert count_capital_words("DON'T panic, I'M HERE") == 5           # DO N'T I 'M HERE
    assert count_capital_words("The U.S. and AI's (GPU) rise") == 3   # U.S. AI GPU


@pytest.mark.parametrize("text,n", [
    ("Mr. Smith went to Washington. He arrived at 3 p.m. and left.", 2),
    ("Is it? Yes! It is.", 3),
    ("Really?! No way.", 2),
    ("He said \"stop.\" Then he left.", 2),
    ("Title without stop\n\nFirst sentence. Second sentence.", 2),
    ("We bought apples, pears, etc. The end.", 2),
    ("Version 3.5 is out. See www.example.com for more.", 2),
    ("Steps:\n1. Open the box.\n2. Read the manual.", 4),             # "2." before a capital word is a sentence
    ("Page 3. and more", 1),
    ("J. K. Rowling wrote it. Wait... then what?", 2),                # no break before a name or lower case
    ("Wait... Then it rained.", 2),
    ("", 0),
    ("   \n ", 0),
])
def test_sentence_splitter(text, n):
    assert count_sentences(text) == n, split_sentences(text)


def test_loose_tries_the_eight_variants():
    quoted = 'Sure! Here it is:\n"All of my answer in quotes."'
    assert evaluate(["startend:quotation"], [{}], quoted, "strict") == [False]
    assert evaluate(["startend:quotation"], [{}], quoted, "loose") == [True]          # first line dropped
    starred = "Bye for now. **Is there anything else I can help with?**"
    kw = [{"end_phrase": "Is there anything else I can help with?"}]
    assert evaluate(["startend:end_checker"], kw, starred, "strict") == [False]
    assert evaluate(["startend:end_checker"], kw, starred, "loose") == [True]          # '*' removed
    assert evaluate(["punctuation:no_comma"], [{}], "a, b", "loose") == [False]         # loose is no free pass
    assert evaluate(["punctuation:no_comma"], [{}], "  \n ", "loose") == [False]        # blank text follows nothing


# -- the rows contract -------------------------------------------------------------------
def row(**kw):
    return {"response": "Tea, please.", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}], **kw}


def test_row_scores_the_fraction_followed():
    out = score_row("ifeval", row(instruction_id_list=["punctuation:no_comma", "keywords:existence"],
                                  kwargs=[{}, {"keywords": ["tea"]}]))
    assert out["follow_instruction_list"] == [False, True] and out["score"] == 0.5 and out["follow_all"] is False
    assert "error" not in out
    hf = score_row("ifeval", row(instruction_id_list=["keywords:existence"],   # HF layout: unused keys are null
                                 kwargs=[{"keywords": ["tea"], "num_words": None, "relation": None}]))
    assert hf["score"] == 1.0 and hf["follow_all"] is True
    loose = score_row("ifeval", row(response='Here:\n"tea"', instruction_id_list=["startend:quotation"], mode="loose"))
    assert loose["score"] == 1.0


@pytest.mark.parametrize("fields,reason", [
    ({"instruction_id_list": ["no:such_id"]}, "unknown instruction id"),
    ({"kwargs": [{}, {}]}, "2 entries for 1"),
    ({"kwargs": {}}, "must be list"),
    ({"instruction_id_list": []}, "empty"),
    ({"instruction_id_list": "punctuation:no_comma"}, "must be list"),
    ({"instruction_id_list": [3]}, "must be a string"),
    ({"instruction_id_list": ["keywords:frequency"], "kwargs": [{"keyword": "tea", "relation": "at least"}]},
     "missing kwarg 'frequency'"),
    ({"instruction_id_list": ["keywords:frequency"], "kwargs": [{"keyword": "tea", "frequency": "2",
                                                                  "relation": "at least"}]}, "must be an integer"),
    ({"instruction_id_list": ["keywords:frequency"], "kwargs": [{"keyword": "tea", "frequency": 2,
                                                                  "relation": "more than"}]}, "one of"),
    ({"kwargs": [{"num_words": 3}]}, "unexpected kwargs"),
    ({"kwargs": ["x"]}, "must be an object"),
    ({"instruction_id_list": ["length_constraints:nth_paragraph_first_word"],
      "kwargs": [{"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "a"}]}, "nth_paragraph must be"),
    ({"instruction_id_list": ["language:response_language"], "kwargs": [{"language": "xx"}]}, "not a langdetect"),
    ({"instruction_id_list": ["compass:response_language"], "kwargs": [{"language": "fr"}]}, "must be one of"),
    ({"instruction_id_list": ["compass:keyword_order"], "kwargs": [{"keywords": []}]}, "non-empty list"),
    ({"instruction_id_list": ["compass:max_chars"], "kwargs": [{"max_chars": -1}]}, ">= 0"),
    ({"instruction_id_list": ["compass:json_object"], "kwargs": [{"required_keys": "name"}]}, "list"),
    ({"mode": "lenient"}, "mode"),
    ({"response": None}, "missing field 'response'"),
    ({"response": 12}, "must be str"),
])
def test_unscorable_rows_get_an_error_and_zero(fields, reason):
    out = score_row("ifeval", row(**fields))
    assert out["score"] == 0.0 and out["follow_instruction_list"] == [] and out["follow_all"] is False
    assert reason in out["error"], out["error"]


def test_huge_and_odd_responses_do_not_crash():
    big = score_row("ifeval", row(response="word, " * 1_800_000))          # 10.8 MB
    assert big["score"] == 0.0 and "too long" in big["error"]
    text = ("Tea, *please*. [x] <<" * 200_000)[:MAX_RESPONSE_CHARS - 1]   # at the limit: measured, quickly
    t0 = time.perf_counter()
    ids = ["punctuation:no_comma", "detectable_format:title", "length_constraints:number_sentences",
           "detectable_content:number_placeholders", "detectable_format:number_highlighted_sections"]
    kw = [{}, {}, {"num_sentences": 5, "relation": "at least"}, {"num_placeholders": 3}, {"num_highlights": 2}]
    assert evaluate(ids, kw, text) == [False, False, True, True, True]
    assert time.perf_counter() - t0 < 20
    odd = "Hello \ud800 world \udfff. ÉTÉ\x00 <<\udc80>>"                   # lone surrogates, a NUL
    out = score_row("ifeval", row(response=odd, instruction_id_list=list(RULES),
                                  kwargs=[_sample_kwargs(i) for i in RULES], mode="loose"))
    assert "error" not in out and 0.0 <= out["score"] <= 1.0 and len(out["follow_instruction_list"]) == len(RULES)


def _sample_kwargs(iid: str) -> dict:
    """Valid kwargs for any id (taken from the hand cases)."""
    return next(kw for i, kw, *_ in CASES if i == iid)


def test_spec_verifier_scores_the_final_answer():
    spec = json.dumps({"type": "ifeval", "instruction_id_list": ["punctuation:no_comma", "compass:no_emoji"],
                       "kwargs": [{}, {}]})
    assert score(spec, "<think>a, b</think>No commas 🙂", "") == 0.5
    assert score(spec, "<think>a, b</think>", "") == 0.0
    with pytest.raises(ValueError):
        score(json.dumps({"type": "ifeval", "instruction_id_list": ["no:such_id"], "kwargs": [{}]}), "x", "")


def test_market_language_rule_reports_what_it_cannot_separate():
    assert market_languages("我喜歡咖啡。") == {"zh-TW"}
    assert market_languages("咖啡很好喝。") == {"zh-TW", "zh-CN"}         # no script-specific character: both
    assert market_languages("Saya minum kopi setiap pagi bersama keluarga.") == {"id", "ms"}
    assert market_languages("1234 !!!") == set()


# -- against IFEval's own labels ---------------------------------------------------------
@needs_data
def test_agrees_with_ifevals_reference_labels():
    data = bench.load(DATA)
    strict = bench.agreement(data["rows"], bench.run_ours(data["rows"], "strict"), "strict")
    loose = bench.agreement(data["rows"], bench.run_ours(data["rows"], "loose"), "loose")
    assert strict["instructions"] == 832 and strict["prompts"] == 540
    assert strict["instruction"] >= 0.99 and loose["instruction"] >= 0.99
    assert strict["prompt"] >= 0.99 and loose["prompt"] >= 0.99
    # the only strict disagreements: IFEval draws a random letter for let_frequency '#' and '!'
    assert set(strict["per_id"]) <= {"keywords:letter_frequency"}


@needs_data
def test_passes_ifevals_checker_unit_cases():
    passed, applicable, skipped, failures = bench.unit_cases(bench.load(DATA)["unit"])
    assert applicable == 81 and skipped == 13
    assert passed / applicable >= 0.98, failures


# -- the benchmark -----------------------------------------------------------------------
@needs_data
def test_bench_smoke(capsys):
    assert bench.main(["--limit", "30", "--repeat", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["bench"] == "gym-ifeval" and result["agreement_strict"] >= 0.9
    assert result["rows_per_s"] > 0 and "agreement strict" in "\n".join(lines)
    if result["peer"]:                     # lm-eval (a test extra) ran beside it, without punkt
        assert result["peer_agreement_strict"] is not None and result["speedup"] > 0


def test_bench_without_data_fails_clearly(tmp_path, capsys):
    assert bench.main(["--data", str(tmp_path)]) == 2
    assert "IFEval data not found" in capsys.readouterr().err


def test_row_scorer_judges_the_answer_not_the_thought():
    from compass.gym.rows import score_row
    row = {"response": "<think>Hmm, let me think, ok</think>Here is my answer without any commas.",
           "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    assert score_row("ifeval", row)["score"] == 1.0
    # an unfinished thought has no answer: it follows nothing, as in the spec verifier
    assert score_row("ifeval", {**row, "response": "<think>no commas yet"})["follow_instruction_list"] == [False]
