"""The math verifier on the forms models write answers in, one group per kind: decimal commas and
thousands separators, answers inside running text and other languages, chains and labelled answers,
sets/tuples/intervals in other notations, inequalities, matrices, numeric golds, and the reasons the
spec and row forms give. Each kind has cases that must stay NOT equal."""
from __future__ import annotations

import pytest

from compass.gym.math_answers.equal import extract_final_answer, judge_math, math_equal
from compass.gym.math_answers.numerals import comma_readings, decimal_comma_reading
from compass.gym.rows import score_row
from compass.gym.score import Reward, judge

MATH = {"type": "math"}


def _check(response: str, gold: str, expected: bool):
    assert math_equal(response, gold) is expected, (response, gold, extract_final_answer(response))


# -- decimal commas and thousands separators ------------------------------------------------------------
DECIMAL_COMMA = [
    ("1,22", "1.22", True), ("1000,99", "1000.99", True), ("1.22", "1,22", True), ("3,14159", "3.14159", True),
    ("0,125", "0.125", True), ("1.234,5", "1234.5", True), ("1 234,5", "1234.5", True), ("-2,5", "-5/2", True),
    ("Die Antwort ist 2,75 Euro.", "2.75", True), (r"\boxed{12{,}5}", "12.5", True), ("1.234.567", "1234567", True),
    ("1,234", "1234", True), ("12,345,678", "12345678", True), ("1,234.5", "1234.5", True),
    ("1,234", "1.234", True),            # the gold writes a decimal point: the answer's comma is decimal too
    ("2,500", "2,5", True),              # the gold's own decimal comma says the writer's convention
    ("(1,5; 2)", "(1.5, 2)", True),      # ";" separates the items, so the comma is decimal
    ("1,22", "122", False), ("1,22", "1.23", False), ("1,234", "1.2", False),
    ("1.234", "1,234", False),           # gold 1,234 is English thousands (1234), not 1.234
    ("1,5", "15", False), ("(1,5)", "1.5", False), ("-2, 1", "-2.1", False), ("1.234,5", "1.2345", False),
]


@pytest.mark.parametrize("response,gold,expected", DECIMAL_COMMA)
def test_decimal_commas_and_thousands(response, gold, expected):
    _check(response, gold, expected)


def test_decimal_comma_rule_is_chosen_by_the_gold():
    assert decimal_comma_reading("1.234,56") == "1234.56" and decimal_comma_reading("(1,2)") is None
    assert comma_readings("1234", "1,234") == []                 # English thousands, nothing else to try
    assert comma_readings("1.234", "1,234") == [("1.234", "1.234")]
    assert ("-2.1", "-2, 1") in comma_readings("-2,1", "-2, 1")   # a bare gold "-2,1" may be a list or -2.1
    assert math_equal("-2, 1", "-2,1") and math_equal("1, -2", "-2,1")   # MATH's list reading still holds


# -- answers inside running text, split math, other languages -------------------------------------------
RUNNING_TEXT = [
    (r"We get \( x = 5 \) after checking both roots.", "5", True),
    ("The answer is \\(\n\\frac{3}{4}\n\\).", "0.75", True),
    ("Therefore the answer is therefore $\n12\n$.", "12", True),
    ("So the value is\n$$\n2\\sqrt{2}\n$$", r"\sqrt{8}", True),
    ("La respuesta es 5", "5", True), ("La respuesta final es $\\frac{1}{2}$.", "0.5", True),
    ("La respuesta es 5 porque 2+3=5 y 10 es otro número", "5", True),
    ("答案是 5", "5", True), ("答案是5。", "5", True), ("所以最终答案为 $x=3$，因为代入成立。", "3", True),
    ("Die Antwort ist $x=3$", "3", True), ("Die Antwort lautet 42, weil 6*7=42 ist.", "42", True),
    ("Ответ: 7", "7", True), ("Ответ: 7, потому что 3+4 = 7, а не 8", "7", True),
    ("La réponse est 12 car 3 fois 4.", "12", True), ("A resposta é 9.", "9", True),
    ("Jadi jawabannya adalah 16 apel.", "16", True), ("Vậy đáp án là 15.", "15", True),
    ("答えは 4 です。", "4", True), ("정답: 6", "6", True),
    ("La respuesta es 5 porque 2+3=5", "6", False), ("Ответ: 7, потому что 3+4", "4", False),
    ("答案是 5，不是 6", "6", False), ("Die Antwort ist $x=3$", "4", False),
    ("The answer estimated first was 3, but the result is 4", "3", False),
]


@pytest.mark.parametrize("response,gold,expected", RUNNING_TEXT)
def test_answers_in_running_text_and_other_languages(response, gold, expected):
    _check(response, gold, expected)


# -- chained equalities and labelled answers --------------------------------------------------------------
LABELLED = [
    ("x = 5+5+1 = 7 = 11", "x = 11", True), ("x = 5+5+1 = 7 = 11", "11", True), ("2+3 = 5", "5", True),
    ("(3,2)", "(p,q)=(3,2)", True), ("p=3, q=2", "(p,q)=(3,2)", True), ("q=2, p=3", "(p,q)=(3,2)", True),
    ("(5,2), (7,2)", "p=5,q=2; p=7,q=2", True), ("(7,2), (5,2)", "p=5,q=2; p=7,q=2", True),
    ("(p,q) = (5,2), (7,2)", "p=5,q=2; p=7,q=2", True), ("4, 5", "AB=4, CD=5", True),
    ("AB = 4, CD = 5", "AB=4, CD=5", True), ("7:32", "S_a:S_b = 7:32", True), ("14:64", "7:32", True),
    (r"S_a : S_b = \frac{7}{32}", "7:32", True), ("1:2:3", "2:4:6", True),
    (r"\frac{S_a}{S_b} = \frac{7}{32}", "7:32", True), ("f(2) = 5", "5", True), ("x = 5, y = 2", "(5, 2)", True),
    ("x = 5+5+1 = 7 = 12", "x = 11", False), ("x = 11 = 12", "11", False), ("2+3 = 6", "5", False),
    ("(2,3)", "(p,q)=(3,2)", False), ("p=2, q=3", "(p,q)=(3,2)", False), ("(5,2)", "p=5,q=2; p=7,q=2", False),
    ("5, 4", "AB=4, CD=5", False), ("32:7", "S_a:S_b = 7:32", False), ("7:33", "7:32", False),
    ("1:2:4", "2:4:6", False), ("x + y = 5", "5", True), ("2x = 4", "4", False), ("x = 5, y = 2", "(2, 5)", False),
]


@pytest.mark.parametrize("response,gold,expected", LABELLED)
def test_chains_labels_and_ratios(response, gold, expected):
    _check(response, gold, expected)


# -- sets, tuples, intervals in other notations -------------------------------------------------------
SETS = [
    ("(1,3)", r"\{1,3\}", True), ("(3,1)", r"\{1,3\}", True), (r"\{3, 1\}", "1, 3", True),
    ("(3,4), (1,2)", r"\{(1,2),(3,4)\}", True), ("(1,2); (3,4)", "(3,4), (1,2)", True), ("1; 2; 3", "3, 2, 1", True),
    (r"\boxed{1}\boxed{2}", r"\boxed{1,2}", True), (r"$\boxed{2}$ and $\boxed{-1}$", "-1, 2", True),
    (r"\boxed{1}, \boxed{2}", r"\boxed{1}\boxed{2}", True),
    ("|z|>2", r"(-\infty,-2)\cup(2,\infty)", True), ("|x| \\ge 3", r"(-\infty,-3]\cup[3,\infty)", True),
    ("|x - 1| < 2", "(-1, 3)", True), (r"z < -2 \text{ or } z > 2", r"(-\infty,-2)\cup(2,\infty)", True),
    ("x > 2", r"(2, \infty)", True), (r"(2, \infty)", "x > 2", True), ("-1 < x \\le 4", "(-1, 4]", True),
    ("(1,3)", r"(1,3)", True), ("x ∈ {1, 3}", r"\{1,3\}", True), (r"\mathbb{R}", r"(-\infty,\infty)", True),
    ("The answer is all real numbers.", r"(-\infty, \infty)", True), (r"\varnothing", r"\emptyset", True),
    # a gold tuple answered with a set of those items: real models write a system's solutions so (issue 28)
    (r"\{1,3\}", "(1,3)", True), (r"\{3,1\}", "(1,3)", True), (r"\{1,4\}", "(1,3)", False),
    ("1, 3", "(1,3)", False),            # a bare list is not a tuple
    ("[1,3]", r"\{1,3\}", False), ("(1,4)", r"\{1,3\}", False), ("1, 2", "(1,2)", False),
    (r"\boxed{1}\boxed{3}", r"\boxed{1,2}", False),
    (r"\boxed{1}. Then we check again and find \boxed{2}", "1, 2", False),
    ("\\boxed{1}\n\n\\boxed{2}", "1, 2", False), (r"\boxed{1} yet \boxed{2}", "1, 2", False),
    ("|z| < 2", r"(-\infty,-2)\cup(2,\infty)", False), ("|z| \\ge 2", r"(-\infty,-2)\cup(2,\infty)", False),
    ("x \\ge 2", r"(2, \infty)", False), ("x > 2", r"(-\infty, 2)", False),
]


@pytest.mark.parametrize("response,gold,expected", SETS)
def test_sets_tuples_and_intervals(response, gold, expected):
    _check(response, gold, expected)


# -- inequalities up to sign flips -------------------------------------------------------------------------------
INEQUALITIES = [
    ("-x > -1", "x < 1", True), ("x > 2", "2 < x", True), ("2x < 2", "x < 1", True), ("1 > x", "x < 1", True),
    ("-3x + 6 \\ge 0", "x \\le 2", True), ("3 > x > 1", "1 < x < 3", True), ("x > 1 and x < 3", "1 < x < 3", True),
    ("-x - y > -1", "x + y < 1", True), ("|z| > 2", "z < -2, z > 2", True),
    ("x > 1", "x < 1", False), ("x \\le 1", "x < 1", False), ("x < 2", "x < 1", False), ("-x < -1", "x < 1", False),
    ("y < 1", "x < 1", False), ("x + y > 1", "x + y < 1", False), ("x > 1 and x < 3", "1 < x < 4", False),
]


@pytest.mark.parametrize("response,gold,expected", INEQUALITIES)
def test_inequalities_up_to_sign_flips(response, gold, expected):
    _check(response, gold, expected)


# -- matrices as values, entry by entry -------------------------------------------------------------------
M = r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}"
MATRICES = [
    (r"\begin{bmatrix} 1 & 2 \\ 3 & 4 \end{bmatrix}", M, True), (r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", M, True),
    (r"\left[\begin{array}{cc} 1 & 2 \\ 3 & 4 \end{array}\right]", M, True),
    (r"\begin{pmatrix} \frac{2}{2} & 2 \\ 3 & 2^2 \end{pmatrix}", M, True),
    ("The product is\n\\begin{pmatrix}\n1 & 2 \\\\\n3 & 4\n\\end{pmatrix}", M, True),
    (r"So $A^{-1} = \begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}$.", M, True),
    ("[[1, 2], [3, 4]]", M, True), (r"\boxed{\begin{bmatrix} 1 & 2 \\ 3 & 4 \\ \end{bmatrix}}", M, True),
    (r"\begin{pmatrix} 1 & 3 \\ 2 & 4 \end{pmatrix}", M, False), (r"\begin{pmatrix} 1 & 2 \end{pmatrix}", M, False),
    (r"\begin{pmatrix} 1 & 2 \\ 3 & 5 \end{pmatrix}", M, False), ("[[1, 2], [4, 3]]", M, False),
    (r"\begin{pmatrix} 1 & 2 & 0 \\ 3 & 4 & 0 \end{pmatrix}", M, False),
]


@pytest.mark.parametrize("response,gold,expected", MATRICES)
def test_matrices_entrywise(response, gold, expected):
    _check(response, gold, expected)


# -- numeric golds in the row form ---------------------------------------------------------------------------
@pytest.mark.parametrize("verifier", ["math", "math_exact"])
@pytest.mark.parametrize("response,gold,expected", [
    ("The answer is 42.", 42, True), ("#### 42", 42.0, True), ("0.5", 0.5, True), (r"\frac{1}{2}", 0.5, True),
    ("0.00001", 1e-05, True), ("-3", -3, True), ("1,000,000", 1_000_000, True),
    ("41", 42, False), ("0.51", 0.5, False), ("1e-05 is small, it is 0.0001", 1e-05, False),
])
def test_numeric_gold(verifier, response, gold, expected):
    if verifier == "math_exact" and "frac" in response:
        expected = False                        # math_exact reads numbers, not LaTeX
    out = score_row(verifier, {"response": response, "gold": gold})
    assert "error" not in out and out["correct"] is expected, out


@pytest.mark.parametrize("verifier", ["math", "math_exact"])
@pytest.mark.parametrize("gold,reason", [(True, "bad_field"), (False, "bad_field"), (float("nan"), "bad_gold"),
                                         (float("inf"), "bad_gold"), ([1], "bad_field")])
def test_numeric_gold_refused(verifier, gold, reason):
    out = score_row(verifier, {"response": "1", "gold": gold})
    assert out["error"] and out["reason"] == reason and out["score"] == 0.0


# -- why a reward is zero ------------------------------------------------------------------------------------------
def test_reasons_of_the_spec_and_row_forms():
    assert judge(MATH, "The answer is 5", "5") == Reward(1.0, None)
    assert judge(MATH, "The answer is 6", "5") == Reward(0.0, None)
    assert judge(MATH, "<think>it is 5", "5") == Reward(0.0, "no_answer")
    assert judge(MATH, "", "5") == Reward(0.0, "no_answer")
    assert judge(MATH, "5", "") == Reward(0.0, "bad_gold")
    assert judge(MATH, "5", r"\boxed{5") == Reward(0.0, "bad_gold")
    assert judge(MATH, "12", "11 6/6") == Reward(0.0, "bad_gold")
    assert judge_math("I cannot tell what it is", "5").reason == "no_answer"
    row = score_row("math", {"response": "<think>so 5", "gold": "5"})
    assert row["reason"] == "no_answer" and row["score"] == 0.0 and "error" not in row
    assert "reason" not in score_row("math", {"response": "5", "gold": "5"})
    row = score_row("math", {"response": "5", "gold": "11 6/6"})
    assert row["reason"] == "bad_gold" and row["error"]


# -- the benchmark's own labelled set --------------------------------------------------------------------------
# -- what the held-out set's first run found missing (tests of our own cases, not the set's) -----------------
SPREAD = [
    ("Hence $m = 3$ and $n = 7$.", "m = 3, n = 7", True),
    ("Hence $m = 3$ and $n = 7$.", "m = 7, n = 3", False),
    ("The two roots are \\(x_1 = -4\\) and \\(x_2 = 1\\).", "1, -4", True),
    ("The two roots are \\(x_1 = -4\\) and \\(x_2 = 2\\).", "1, -4", False),
    ("So $p = \\boxed{4}$ and $q = \\boxed{9}$.", "(4, 9)", True),
    ("So $p = \\boxed{4}$ and $q = \\boxed{9}$.", "(9, 4)", False),
    ("After simplifying, t = 2 or t = -6.", "-6, 2", True),
    # only the last sentence states the answer: an earlier pair is working, not the answer
    ("First $x = 1$ and $y = 2$.\nFinally $x = 3$.", "1, 2", False),
]


@pytest.mark.parametrize("response,gold,expected", SPREAD)
def test_answers_stated_one_value_at_a_time(response, gold, expected):
    _check(response, gold, expected)


@pytest.mark.parametrize("response,gold,expected", [
    ("Insgesamt kostet es also 2.400,75 Euro.", "2400.75", True),
    ("Insgesamt kostet es also 2.400,75 Euro.", "240075", False),
    ("So the total is 1,500 grams, and the answer is 1,500.", "1.5", False),   # English prose: fifteen hundred
    ("El resultado es 1,500.", "1.5", True),                                   # not English: a decimal comma
    ("Thus $P = \\prod_{i=1}^{3} i = 3! = 6$.", "6", True),                    # a chain the parser cannot read
    ("Thus $P = \\prod_{i=1}^{3} i = 3! = 6$.", "3", False),
])
def test_grouped_decimal_commas_english_thousands_and_unreadable_chains(response, gold, expected):
    _check(response, gold, expected)


def test_forms_set_is_judged_as_labelled_by_kind():
    from compass.bench import gym_math as bench
    rows = bench.forms_rows()
    kinds = {r["kind"] for r in rows}
    assert kinds == {"decimal_comma", "running_text", "labelled", "sets_tuples", "inequalities", "matrices",
                     "numeric_gold"}
    for kind in kinds:          # every kind has cases that must be equal and cases that must not
        assert {r["expected"] for r in rows if r["kind"] == kind} == {True, False}, kind
    ours, _ = bench.run_ours(bench.forms_pairs(None))
    wrong = [(r["kind"], r["pred"], r["gold"]) for r, v in zip(rows, ours) if v != r["expected"]]
    assert wrong == []


def test_bench_forms_set_runs_without_reference_data(tmp_path, capsys):
    import json
    from compass.bench import gym_math as bench
    assert bench.main(["--sets", "forms", "--data", str(tmp_path / "absent")]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["sets"]["forms"]["ours_agreement"] == 1.0
    assert set(out["forms_by_kind"]) >= {"decimal_comma", "matrices"}
    assert all(k["n"] > 0 for k in out["forms_by_kind"].values())


def test_the_held_out_set_stays_judged_as_labelled():
    """The set written blind to this code (compass/bench/data/math_forms_heldout.jsonl): 0.9547 at first
    contact, 0.9918 after the fixes it showed (docs/benchmarks.md); this guards against going back."""
    from compass.bench import gym_math as bench
    pairs = bench.heldout_pairs(None)
    ours, _ = bench.run_ours(pairs)
    agree = sum(o == lab for o, (_, _, lab) in zip(ours, pairs)) / len(pairs)
    assert len(pairs) == 243 and agree >= 0.99, agree
