"""The math verifier on answers written the way real models write them (issue 28), one group per kind of
false negative found on real outputs, each with cases that must stay NOT equal. The cases are our own,
written for these tests; the check on real outputs is `compass bench gym-math --real FILE`."""
from __future__ import annotations

import pytest

from compass.gym.math_answers.equal import judge_math
from compass.gym.math_answers.extract import answer_candidates
from compass.gym.math_answers.times import clock_time, same_time
from compass.gym.score import end_of_turn, final_answer


def _check(response: str, gold: str, expected: bool):
    assert judge_math(response, gold).equal is expected, (response, gold, answer_candidates(response))


# -- a closing sentence, a chat-turn marker, thousands separators --------------------------------------------
CLOSING = [
    ("Adding these gives 1200 + 34 = 1234.\n\nTherefore, the total number of pages is 1,234.<|im_end|>", "1234", True),
    ("Hence there are 2,016 ways to do it.</s>", "2016", True),
    ("In total, she spent $\\$1,250$ on the trip.\n<|im_end|>\n<|im_start|>user\nNext question: what is 2+2?",
     "1250", True),
    ("In total, she spent $\\$1,250$ on the trip.\n<|im_end|>\n<|im_start|>user\nNext question: what is 2+2?",
     "4", False),                                   # the next turn's numbers are not the answer
    ("The probability is 3/8. <|eot_id|>", "\\frac{3}{8}", True),
    ("So the answer is 12 apples.\n\nHuman: and 5 more?", "12", True),
    ("So the answer is 12 apples.\n\nHuman: and 5 more?", "5", False),
    ("The final answer is: $\\boxed{\\frac{1}{4}}$<|eot_id|>", "\\frac14", True),
    ("Therefore, there are **1,234** marbles.<end_of_turn>", "1234", True),
    ("So he earned a total of $\\$ 1{,}230$.", "1230", True),
    ("Thus, the final answer is 3,600.\n\nQuestion: A farmer has 12 cows", "3600", True),
]


@pytest.mark.parametrize("response,gold,expected", CLOSING)
def test_a_closing_sentence_and_the_end_of_the_turn(response, gold, expected):
    _check(response, gold, expected)


def test_end_of_turn_markers_end_the_response():
    assert end_of_turn("12<|im_end|>\n<|im_start|>user\n7") == "12"
    assert end_of_turn("no marker: here") == "no marker: here"
    assert final_answer("<think>a</think> 5 <｜end▁of▁sentence｜> 6") == "5"
    assert final_answer("x = 3\nUser: thanks") == "x = 3"
    assert final_answer("a<b and 2 < 3") == "a<b and 2 < 3"      # a "<" that starts no marker


# -- several boxes that together form the gold ---------------------------------------------------------------
SEVERAL_BOXES = [
    ("The roots are $x = \\boxed{2}$ and $x = \\boxed{-3}$.", "-3, 2", True),
    ("The roots are $\\boxed{2}$ and $\\boxed{-3}$.", "2, -3", True),
    ("So the speed is $\\boxed{12}$ km/h and the time is $\\boxed{3}$ hours.", "12, 3", True),
    ("The distance is $\\boxed{5\\text{ cm}}$, and the area is $\\boxed{12}$.", "5, 12", True),
    ("Therefore $x = \\boxed{4}$ cm and $y = \\boxed{7}$ cm.", "(4,7)", True),
    ("The two numbers are \\boxed{12} and \\boxed{15}.", "12, 15", True),
    ("So the speed is $\\boxed{12}$ km/h and the time is $\\boxed{4}$ hours.", "12, 3", False),
    ("First I got $\\boxed{2}$. Wait, that is wrong.\n\nRedo: the answer is $\\boxed{3}$.", "2, 3", False),
    ("I first thought $\\boxed{12}$, but actually it is $\\boxed{15}$.", "12, 15", False),
    ("\\boxed{1} yet \\boxed{2}", "1, 2", False),
]


@pytest.mark.parametrize("response,gold,expected", SEVERAL_BOXES)
def test_several_boxes_that_together_form_the_gold(response, gold, expected):
    _check(response, gold, expected)


# -- unordered collections: another order, repeats, a set where the gold writes a tuple ------------------------
UNORDERED = [
    ("The solutions are $\\boxed{(2,1), (1,2), (-1,-2)}$.", "(1,2),(2,1),(-1,-2)", True),
    ("The solutions are $\\boxed{\\{(1,2),(2,1),(2,1)\\}}$.", "(1,2),(2,1)", True),
    ("The roots are $\\boxed{2, 2, 3}$.", "2, 3", True),
    ("The roots are $\\boxed{2, 3}$.", "2, 2, 3", False),    # the gold counts a root twice: so must the answer
    ("The roots are $\\boxed{2, 2, 3}$.", "2, 3, 4", False),
    ("So $x = 2$ or $x = -5$, i.e. $\\boxed{2 \\text{ or } -5}$.", "-5, 2", True),
    ("Therefore $\\boxed{x=1 \\text{ or } x=4}$.", "1, 4", True),
    ("The answer is $\\boxed{\\{3, 5\\}}$.", "(3, 5)", True),
    ("The answer is $\\boxed{\\{5, 3\\}}$.", "(3,5)", True),     # a set has no order
    ("The answer is $\\boxed{(5,3)}$.", "(3,5)", False),         # a tuple has one
    ("The answer is $\\boxed{\\{3, 6\\}}$.", "(3, 5)", False),
]


@pytest.mark.parametrize("response,gold,expected", UNORDERED)
def test_unordered_collections(response, gold, expected):
    _check(response, gold, expected)


# -- labels that are expressions; chains through an approximation ---------------------------------------------
LABELS = [
    ("Therefore $\\boxed{a+b = 7}$.", "7", True),
    ("We find $\\boxed{|x| = 4}$.", "4", True),
    ("So $\\boxed{m+n=25}$.", "25", True),
    ("So $\\boxed{25 = m + n}$.", "25", True),
    ("Thus $\\boxed{\\frac{AB}{CD}=\\frac{3}{4}}$.", "\\frac34", True),
    ("So $\\boxed{m+n=26}$.", "25", False),
    ("So $\\boxed{2x = 4}$.", "4", False),              # an equation still to solve for x
    ("So $\\boxed{x^2 = 9}$.", "9", False),
    ("So $\\boxed{5}$.", "x + y = 5", False),           # a gold equation is a line, not a number
]
APPROXIMATIONS = [
    ("So the length is $\\boxed{\\sqrt{2}\\approx 1.414}$.", "\\sqrt2", True),
    ("So the answer is $\\frac{22}{7}\\approx 3.14$.", "\\frac{22}{7}", True),
    ("The answer is $\\boxed{2\\pi \\approx 6.28}$.", "2\\pi", True),
    ("The answer is $\\boxed{x = 2\\sqrt{3} \\approx 3.46}$.", "2\\sqrt3", True),
    ("The answer is $\\boxed{\\pi \\approx 3.14}$.", "3.14", True),     # a decimal gold: the decimal counts
    ("The answer is $\\boxed{\\pi \\approx 3.14}$.", "3", False),
    ("The answer is $\\boxed{\\sqrt{3}\\approx 1.414}$.", "\\sqrt2", False),
    ("The answer is $x \\approx 1.41$.", "1.41", True),
    ("The answer is $x \\approx 1.41$.", "\\sqrt2", False),           # only a decimal was stated
    ("The ratio is ≈ 0.5, exactly $\\boxed{\\frac{1}{2}}$.", "0.5", True),
]


@pytest.mark.parametrize("response,gold,expected", LABELS + APPROXIMATIONS)
def test_labels_that_are_expressions_and_approximations(response, gold, expected):
    _check(response, gold, expected)


# -- inequalities against intervals, several segments joined by "or" ----------------------------------------
INEQUALITIES = [
    ("Therefore $\\boxed{-2 < x \\le 3}$.", "(-2,3]", True),
    ("Therefore $-2 \\lt x \\leq 3$.", "(-2,3]", True),
    ("Therefore $\\boxed{-2 \\le x < 3}$.", "(-2,3]", False),
    ("So $\\boxed{x<-1 \\text{ or } x>2}$.", "(-\\infty,-1)\\cup(2,\\infty)", True),
    ("So $x\\ge 3$ or $x\\le -1$.", "(-\\infty,-1]\\cup[3,\\infty)", True),
    ("So $x\\ge 3$ or $x < -1$.", "(-\\infty,-1]\\cup[3,\\infty)", False),
    ("Hence $\\boxed{3 > x > -2}$.", "(-2,3)", True),
    ("$\\boxed{a \\in \\left(0, \\frac{1}{2}\\right)}$", "0<a<\\frac12", True),
    ("$\\boxed{x \\leq -1 \\text{ or } x \\geq 3}$", "(-\\infty,-1]\\cup[3,\\infty)", True),
]


@pytest.mark.parametrize("response,gold,expected", INEQUALITIES)
def test_inequality_chains_against_intervals(response, gold, expected):
    _check(response, gold, expected)


# -- expressions equal after algebra -----------------------------------------------------------------------
ALGEBRA = [
    ("The answer is $\\boxed{2ab + ba}$.", "3ab", True),
    ("So $\\boxed{(x-1)(x+3)}$.", "x^2+2x-3", True),
    ("So $\\boxed{yx + 2zy}$.", "xy+2yz", True),
    ("$\\boxed{2\\sqrt{3}\\cdot 5 + \\pi r}$", "r\\pi + 10\\sqrt3", True),
    ("$\\boxed{(2n+1)(n+1)}$", "2n^2+3n+1", True),
    ("$\\boxed{y=-\\frac{1}{2}x+3}$", "y = 3 - \\frac x2", True),
    ("So $\\boxed{(x-1)(x+2)}$.", "x^2+2x-3", False),
    ("$\\boxed{2\\sqrt{3}\\cdot 5 + \\pi r}$", "r\\pi + 5\\sqrt3", False),
]


@pytest.mark.parametrize("response,gold,expected", ALGEBRA)
def test_expressions_equal_after_algebra(response, gold, expected):
    _check(response, gold, expected)


# -- matrix expressions -----------------------------------------------------------------------------------
MATRIX_EXPRESSIONS = [
    ("So $\\mathbf{A} = \\boxed{2\\begin{pmatrix}1 & 0\\\\0 & 1\\end{pmatrix}}$.",
     "\\begin{pmatrix}2&0\\\\0&2\\end{pmatrix}", True),
    ("So $\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}+\\begin{pmatrix}3\\\\4\\end{pmatrix}}$.",
     "\\begin{pmatrix}4\\\\6\\end{pmatrix}", True),
    ("$\\boxed{\\frac{1}{2}\\begin{pmatrix}2 & 4\\\\6 & 8\\end{pmatrix}}$", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", True),
    ("$\\boxed{\\begin{pmatrix}2 & 4\\\\6 & 8\\end{pmatrix} / 2}$", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", True),
    ("$\\boxed{\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}\\begin{pmatrix}1\\\\1\\end{pmatrix}}$",
     "\\begin{pmatrix}3\\\\7\\end{pmatrix}", True),
    ("$\\boxed{-\\begin{pmatrix}1&2\\end{pmatrix}}$", "\\begin{pmatrix}-1&-2\\end{pmatrix}", True),
    ("$\\boxed{\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}^T}$", "\\begin{pmatrix}1&3\\\\2&4\\end{pmatrix}", True),
    ("$\\boxed{\\begin{pmatrix}1&1\\\\0&1\\end{pmatrix}^2}$", "\\begin{pmatrix}1&2\\\\0&1\\end{pmatrix}", True),
    ("$\\boxed{\\frac{1}{2}\\begin{pmatrix}2 & 4\\\\6 & 8\\end{pmatrix}}$", "\\begin{pmatrix}2&4\\\\6&8\\end{pmatrix}", False),
    ("$\\boxed{\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}^T}$", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", False),
    ("$\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}+\\begin{pmatrix}3&4\\end{pmatrix}}$",
     "\\begin{pmatrix}4\\\\6\\end{pmatrix}", False),                                  # shapes that do not add
]


@pytest.mark.parametrize("response,gold,expected", MATRIX_EXPRESSIONS)
def test_matrix_expressions_evaluate_to_the_gold_matrix(response, gold, expected):
    _check(response, gold, expected)


# -- clock times are not ratios ---------------------------------------------------------------------------
CLOCKS = [
    ("The meeting ends at $\\boxed{3:15}$.", "\\frac{3}{15}", False),
    ("The meeting ends at $\\boxed{3:15}$.", "3:15", True),
    ("So the time is 3:15 PM.", "3:15", True),
    ("So the time is 3:15 PM.", "15:15", True),
    ("So the time is 3:15 AM.", "15:15", False),
    ("She arrives at 10:30.", "10:30", True),
    ("She arrives at 10:30.", "1:3", False),
    ("The ratio of boys to girls is $7:32$.", "\\frac{7}{32}", True),     # no time words: a ratio
    ("The ratio is 3:4.", "3:4", True),
]


@pytest.mark.parametrize("response,gold,expected", CLOCKS)
def test_clock_times_are_times_not_ratios(response, gold, expected):
    _check(response, gold, expected)


def test_clock_time_context_and_comparison():
    assert clock_time("3:15", "It ends at 3:15.") == (3, 15, None)
    assert clock_time("3:15", "It ends 3:15 p.m. sharp") == (3, 15, "p")
    assert clock_time("3:15", "The ratio is 3:15.") is None
    assert clock_time("3:75", "at 3:75") is None
    assert same_time((3, 15, "p"), "3:15\\text{ PM}") and not same_time((3, 15, "a"), "3:15 PM")
    assert same_time((15, 15, None), "3:15 p.m.") and not same_time((3, 15, None), "3:16")


# -- what real outputs showed besides: yes/no, judging lines, an invented next exercise, "what percentage" ------
REAL_OUTPUT_HABITS = [
    ("It is not a linear map.\nThe answer is No.", "False", True),
    ("It is not a linear map.\nThe answer is No.", "True", False),
    ("The answer is Yes.", "True", True),
    ("The answer is 1,512.\nThis answer is wrong.\nThis answer is correct.\nThis answer is wrong.", "1512", True),
    ("The answer is 1,512.\nThis answer is wrong.\nThe answer is correct.", "1513", False),
    ("So k = 4.\nThe answer is 4.\n\nProblem: Find all b with b^2 + 4b = 12.\nThe answer is -6, 2", "4", True),
    ("So k = 4.\nThe answer is 4.\n\nProblem: Find all b with b^2 + 4b = 12.\nThe answer is -6, 2", "-6, 2", False),
    ("Problem: restated, find k.\nSolution: k = 4, so the answer is 4.", "4", True),    # a heading it starts with
    ("So 60% of the students enrolled in hip-hop.", "60", True),
    ("So 60% of the students enrolled in hip-hop.", "0.6", True),
    ("So 60% of the students enrolled in hip-hop.", "61", False),
    ("The answer is 4 4/9%.", "40/9", False),            # a fractional gold: % is /100 (Math-Verify's rule)
]


@pytest.mark.parametrize("response,gold,expected", REAL_OUTPUT_HABITS)
def test_habits_of_real_outputs(response, gold, expected):
    _check(response, gold, expected)
