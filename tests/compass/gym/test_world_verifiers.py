"""The verifiers the world's code, instruction, tool and QA suites need: hand cases and IFEval's own labels."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from compass.gym.verifiers.code import extract_program
from compass.gym.instructions.ifeval import RULES
from compass.gym.score import needs_reference, score

SHARED = Path(__file__).resolve().parents[4] / "shared" / "data"
DATA = SHARED / "ifeval"


def code_spec(*tests: str, timeout_s: float = 5) -> str:
    return json.dumps({"type": "code", "tests": list(tests), "timeout_s": timeout_s})


def ifeval_spec(*pairs) -> str:
    return json.dumps({"type": "ifeval", "instruction_id_list": [p[0] for p in pairs],
                       "kwargs": [p[1] if len(p) > 1 else {} for p in pairs]})


def test_reference_needs():
    assert not needs_reference({"type": "code", "tests": []})
    assert not needs_reference({"type": "ifeval"})
    assert needs_reference({"type": "tool_call"})
    assert needs_reference({"type": "qa"})


# -- code -------------------------------------------------------------------------------
ADD = code_spec("assert add_2([1]) == [3]", "assert add_2([]) == []", "assert add_2([5, 0]) == [7, 2]")


@pytest.mark.parametrize("response,expected", [
    ("<think>Add 2.</think>```python\ndef add_2(xs):\n    return [x + 2 for x in xs]\n```", 1.0),
    ("def add_2(xs):\n    return [x + 2 for x in xs]", 1.0),                                   # whole answer
    ("Here:\n```\ndef add_2(xs):\n    return [x + 2 for x in xs]\n```", 1.0),                 # bare fence
    ("```python\ndef add_2(xs):\n    return []\n```\n```python\ndef add_2(xs):\n    return [x + 2 for x in xs]\n```",
     1.0),                                                                                    # the last fence
    ("```python\ndef add_2(xs):\n    return [x + 3 for x in xs]\n```", 1 / 3),                # off by one: [] passes
    ("```python\ndef add_2(xs) return xs\n```", 0.0),                                          # syntax error
    ("```python\ndef add_2(xs):\n    return [x + 2 for x in xs]\n", 0.0),                      # unclosed fence
    ("<think>def add_2(xs):\n    return [x + 2 for x in xs]", 0.0),                            # unfinished thought
    ("", 0.0),
])
def test_code_scores_the_pass_fraction(response, expected):
    assert score(ADD, response, "") == pytest.approx(expected)


def test_code_extracts_the_program():
    assert extract_program("<think>x</think>```py\nA\n```") == "A\n"
    assert extract_program("```python\nA\n```\n```\nB\n```") == "A\n"   # a python fence beats a bare one
    assert extract_program("  just code  ") == "just code"


def test_code_infinite_loop_times_out_and_earlier_tests_count():
    spec = code_spec("assert f(1) == 1", "assert f(2) == 2", timeout_s=1)
    t = time.monotonic()
    got = score(spec, "def f(n):\n    while n == 2:\n        pass\n    return n", "")
    assert got == 0.5 and time.monotonic() - t < 4


def test_code_forked_children_die_and_do_not_hold_the_verdict():
    prog = ("import os, time\ndef f(n):\n    return n\nif os.fork() == 0:\n    time.sleep(60)\n")
    t = time.monotonic()
    assert score(code_spec("assert f(3) == 3", timeout_s=30), prog, "") == 1.0
    assert time.monotonic() - t < 20                      # the verdict did not wait for the 60 s child


def test_code_printed_verdicts_earn_nothing():
    prog = "import sys\nfor i in range(3):\n    print('x', i, 1)\n    sys.stderr.write('x %d 1\\n' % i)\n"
    assert score(ADD, prog, "") == 0.0


def test_code_runs_isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("COMPASS_TEST_SECRET", "s3cret")
    monkeypatch.chdir(tmp_path)
    spec = code_spec("import os\nassert 'COMPASS_TEST_SECRET' not in os.environ",
                     "import os\nassert os.getcwd() != %r" % str(tmp_path),
                     "open('scratch.txt', 'w').write('x')")
    assert score(spec, "x = 1", "") == 1.0
    assert not (tmp_path / "scratch.txt").exists()


@pytest.mark.skipif(not (SHARED / "mbpp").is_dir(), reason="MBPP (../shared/data) not present")
def test_code_passes_mbpp_reference_solutions_and_fails_swapped_ones():
    rows = [json.loads(line) for line in (SHARED / "mbpp" / "mbpp.jsonl").read_text().splitlines()]
    rows = [r for r in rows if not r["test_setup_code"].strip()][::97][:10]
    for r, other in zip(rows, rows[1:] + rows[:1]):
        spec = {"type": "code", "tests": r["test_list"], "timeout_s": 5}
        assert score(spec, f"```python\n{r['code']}\n```", "") == 1.0, r["task_id"]
        assert score(spec, f"```python\n{other['code']}\n```", "") == 0.0, r["task_id"]


def test_code_without_tests_scores_zero():
    assert score(code_spec(), "x = 1", "") == 0.0


# -- ifeval -----------------------------------------------------------------------------
CASES = [  # (id, kwargs, following text, violating text)
    ("length_constraints:number_words", {"num_words": 4, "relation": "at least"}, "one, two. three four", "one two"),
    ("length_constraints:number_words", {"num_words": 4, "relation": "less than"}, "one two-three", "a b c d"),
    ("language:response_language", {"language": "pt"}, "Eu gosto muito de café e penso nisso todos os dias.",
     "I like coffee a lot and I think about it every day."),
    ("language:response_language", {"language": "zh-TW"}, "我很喜歡咖啡。我的家人非常愛咖啡。對我來說咖啡是一種快樂。",
     "I like coffee a lot and I think about it every day."),
    ("change_case:english_lowercase", {}, "i like coffee a lot and my family loves coffee very much.",
     "I like coffee a lot and my family loves coffee very much."),
    ("change_case:english_capital", {}, "I LIKE COFFEE A LOT AND MY FAMILY LOVES COFFEE VERY MUCH.",
     "I like coffee a lot and my family loves coffee very much."),
    ("keywords:existence", {"keywords": ["tea", "Rain"]}, "Tea in the rain.", "Tea in the sun."),
    ("keywords:forbidden_words", {"forbidden_words": ["cat"]}, "A category of dogs.", "A Cat sleeps."),
    ("keywords:frequency", {"keyword": "tea", "frequency": 2, "relation": "at least"}, "tea and tea", "tea only"),
    ("detectable_format:json_format", {}, '```json\n{"a": 1}\n```', '{"a": 1'),
    ("startend:end_checker", {"end_phrase": "See you soon."}, '"Bye. See you soon."', "See you soon. Bye."),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hi.\nP.S. more", "Hi. PS more"),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Hi.\nP.P.S more", "Hi.\nP.S. more"),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* a\n- b", "* a\n* b\n* c"),
    ("punctuation:no_comma", {}, "No commas here.", "One, two."),
    ("startend:quotation", {}, ' "quoted" ', '"half'),
    ("detectable_format:title", {}, "<<My day>>\ntext", "<< >>\ntext"),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*one* and **two**", "*one* and ** **"),
]


@pytest.mark.parametrize("iid,kwargs,good,bad", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_ifeval_rule(iid, kwargs, good, bad):
    spec = ifeval_spec((iid, kwargs))
    assert score(spec, good, "") == 1.0
    assert score(spec, bad, "") == 0.0


def test_ifeval_scores_the_fraction_followed():
    spec = ifeval_spec(("punctuation:no_comma",), ("startend:quotation",), ("keywords:existence", {"keywords": ["x"]}))
    assert score(spec, '"a, x"', "") == pytest.approx(2 / 3)
    assert score(spec, "<think>no commas</think>", "") == 0.0       # an empty answer follows nothing
    assert score(spec, '<think>a, b</think>"x"', "") == 1.0         # only the final answer is checked


def test_ifeval_unknown_instruction_is_a_bad_spec():
    with pytest.raises(ValueError):
        score(ifeval_spec(("combination:three_responses",)), "text", "")


@pytest.mark.skipif(not DATA.is_dir(), reason="IFEval reference data (../shared/data) not present")
def test_ifeval_rules_agree_with_ifevals_labels():
    """Against IFEval's unit cases and the official strict evaluation of GPT-4's responses."""
    n = 0
    for line in (DATA / "instructions_unit_test_cases.jsonl").read_text().splitlines():
        case = json.loads(line)
        if case["instruction_id"] in RULES:
            kw = {k: v for k, v in case["kwargs"].items() if v is not None}
            assert RULES[case["instruction_id"]](case["response"], **kw) == case["expected_followed"], case
            n += 1
    kwargs = {}
    for line in (DATA / "input_data.jsonl").read_text().splitlines():
        row = json.loads(line)
        kwargs[row["prompt"]] = row["kwargs"]
    for line in (DATA / "eval_results_strict_reference.jsonl").read_text().splitlines():
        row = json.loads(line)
        for iid, kw, followed in zip(row["instruction_id_list"], kwargs[row["prompt"]], row["follow_instruction_list"]):
            # a non-letter "letter" is a random letter in IFEval: its label cannot be matched
            if iid in RULES and not (iid == "keywords:letter_frequency" and not kw["letter"].isalpha()):
                assert RULES[iid](row["response"], **{k: v for k, v in kw.items() if v is not None}) == followed
                n += 1
    assert n > 500


# -- qa ---------------------------------------------------------------------------------
QA = json.dumps({"type": "qa", "aliases": ["USA", "United States of America"]})


@pytest.mark.parametrize("response,expected", [
    ("United States", 1.0), ("the United States.", 1.0), ("  UNITED   states ", 1.0), ("U.S.A.", 1.0),
    ("usa", 1.0), ("ＵＳＡ", 1.0), ("<think>hmm</think>USA", 1.0), ("United Kingdom", 0.0),
    ("It is the United States", 0.0), ("", 0.0), ("<think>USA", 0.0),
])
def test_qa_matches_normalized_answers_and_aliases(response, expected):
    assert score(QA, response, "United States") == expected


def test_qa_without_aliases_and_with_punctuation_inside():
    spec = json.dumps({"type": "qa"})
    assert score(spec, "Washington DC", "Washington, D.C.") == 1.0
    assert score(spec, "cock a doodle doo", "cock-a-doodle-doo") == 1.0
    assert score(spec, "An owlet", "owlet") == 1.0
    assert score(spec, "owl", "owlet") == 0.0
