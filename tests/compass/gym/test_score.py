"""The scoring entry point (compass.gym.score): final answers, exact math, multiple choice."""
from __future__ import annotations

import json
import random
from fractions import Fraction
from pathlib import Path

import pytest

from compass.gym.mcq_choice.extract import extract_choice
from compass.gym.score import final_answer, score
from compass.gym.verifiers.math_exact import parse_number

MATH = json.dumps({"type": "math_exact"})
MCQ = json.dumps({"type": "mcq"})
DATA = Path(__file__).resolve().parents[4] / "shared" / "data"


@pytest.mark.parametrize("response,expected", [
    ("<think>5 * 3 = 15. 7 + 15 = 22.</think>22", "22"),
    ("<think>a</think>x<think>b</think>  41 ", "41"),
    ("  B  ", "B"),
    ("<think>5 * 3 = 15. 7 + 15 = 22.", ""),     # never closed: no answer
    ("", ""),
])
def test_final_answer(response, expected):
    assert final_answer(response) == expected


@pytest.mark.parametrize("text,value", [
    ("22", Fraction(22)), ("-7", Fraction(-7)), ("+3", Fraction(3)), ("0.75", Fraction(3, 4)),
    ("3/4", Fraction(3, 4)), ("-3/4", Fraction(-3, 4)), (".5", Fraction(1, 2)), ("1,234", Fraction(1234)),
    ("\\boxed{-12}", Fraction(-12)), ("The answer is 22.", Fraction(22)), ("$18", Fraction(18)),
    ("\u22125", Fraction(-5)), ("abc", None), ("", None), ("3/0", None),
])
def test_parse_number(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize("response,reference,expected", [
    ("<think>5 * 3 = 15. 7 + 15 = 22.</think>22", "22", 1.0),
    ("<think>5 * 3 = 15. 7 + 15 = 22.</think>23", "22", 0.0),
    ("<think>x</think>-5", "-5", 1.0),
    ("<think>x</think>5", "-5", 0.0),
    ("0.75", "3/4", 1.0),
    ("6/8", "0.75", 1.0),
    ("0.7500", "3/4", 1.0),
    ("0.76", "3/4", 0.0),
    ("22.0", "22", 1.0),
    ("<think>5 * 3 = 15. 7 + 15 = 22.", "22", 0.0),  # truncated trace: the 22 inside the thought earns nothing
    ("<think>x</think>", "22", 0.0),
    ("twenty-two", "22", 0.0),
    ("22", "not a number", 0.0),
])
def test_math_exact(response, reference, expected):
    assert score(MATH, response, reference) == expected


@pytest.mark.parametrize("text,letter", [
    ("B", "B"), ("b", "B"), ("(C)", "C"), ("[D]", "D"), ("A.", "A"), ("B. Electronics", "B"), ("C) Toys", "C"),
    ("The answer is D", "D"), ("answer: (A)", "A"), ("Jawaban: C", "C"), ("Jawabannya adalah B", "B"),
    ("I pick (B) here", "B"), ("Option A is wrong; the answer is C", "C"),
    ("A laptop", None), ("(A) or (B)", None), ("E", None), ("", None), ("Electronics", None),
])
def test_extract_choice(text, letter):
    assert extract_choice(text) == letter


def test_mcq_score():
    assert score(MCQ, "B", "B") == 1.0
    assert score(MCQ, "C", "B") == 0.0
    assert score(MCQ, "<think>it is a shoe</think>(b)", "B") == 1.0
    assert score(MCQ, "B", " b ") == 1.0
    assert score(MCQ, "E", "E") == 0.0                         # not an option by default
    assert score({"type": "mcq", "options": "ABCDE"}, "E", "E") == 1.0
    assert score(MCQ, "B", "") == 0.0


def test_unknown_or_bad_verifier_is_an_error():
    with pytest.raises(ValueError, match="unknown verifier type 'code_exec'"):
        score('{"type": "code_exec"}', "x", "y")
    with pytest.raises(ValueError, match="not valid JSON"):
        score("{math", "1", "1")
    with pytest.raises(ValueError, match="'type'"):
        score('{"kind": "mcq"}', "A", "A")


def test_score_is_always_in_unit_interval():
    rng = random.Random(0)
    alphabet = "0123456789-+./ABCDabcd <think></think>answer is()"
    for _ in range(2000):
        resp = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        ref = rng.choice(["22", "-3/4", "0.5", "B", "A"])
        for v in (MATH, MCQ):
            assert score(v, resp, ref) in (0.0, 1.0)


def test_verifiers_registry_names_match_world_specs():
    from compass.gym.registry import load_all
    assert set(load_all()) >= {"math_exact", "mcq"}


@pytest.mark.skipif(not (DATA / "gsm8k" / "example_model_solutions_labeled.jsonl").exists(),
                    reason="../shared/data/gsm8k not present")
def test_math_exact_agrees_with_openai_gsm8k_labels():
    """5276 model solutions labelled correct/incorrect by OpenAI (answers end in 'A: <number>')."""
    agree = total = 0
    with open(DATA / "gsm8k" / "example_model_solutions_labeled.jsonl") as f:
        for line in f:
            row = json.loads(line)
            gold = row["ground_truth"].rsplit("A:", 1)[1].strip()
            for key in ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification"):
                got = score(MATH, row[key]["solution"], gold) == 1.0
                agree += got == row[key]["is_correct"]
                total += 1
    assert total == 5276
    assert agree / total >= 0.995
