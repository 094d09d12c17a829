"""Compass-Gym math verifier: unit cases per answer form, the timeout guard, the row contract,
the reference sets in ../shared/data (skipped when absent) and a smoke run of the benchmark."""
from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from compass.bench import gym_math as bench
from compass.gym.math_answers import sympy_worker
from compass.gym.math_answers.equal import answers_equal, extract_final_answer, math_equal
from compass.gym.math_answers.parse import parse_answer
from compass.gym.rows import MAX_RESPONSE_CHARS, score_row

DATA = bench.DEFAULT_DATA
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"reference data {DATA} absent")

EQUAL = [
    # numbers, fractions, decimals
    ("1/2", "0.5"), (r"\frac{1}{2}", "1/2"), (r"\dfrac{1}{2}", r"\frac12"), (r"\tfrac{3}{4}", "0.75"),
    ("-3", r"-\frac{6}{2}"), (".5", "0.5"), ("5.00", "5"), ("12", "12"),
    # mixed numbers
    (r"2\frac{1}{3}", "7/3"), ("2 1/3", r"\frac{7}{3}"), ("-4 4/9", "-40/9"), (r"137 \frac{1}{2}", "275/2"),
    # thousands separators
    ("1,234", "1234"), (r"10,\!080", "10080"), ("1 000", "1000"), (r"\$32,\!348", "32348"),
    # percent: a response's % divides by 100; a gold % accepts the bare number too; a whole-number gold
    # answers "what percentage" with the number itself (GSM8K's "60% of the students" for 60)
    ("50%", "0.5"), ("28%", "7/25"), ("10", r"10\%"), ("0.1", r"10\%"), (r"50\%", "50%"), ("50%", "50"),
    # LaTeX presentation
    (r"\left(x-2\right)\left(x+2\right)", "(x-2)(x+2)"), (r"10\sqrt{3} + \sqrt4", r"10\sqrt3 + 2"),
    (r"\frac34i", r"\frac{3}{4}i"), (r"90^\circ", "90"), (r"90^{\circ}", r"90"), (r"\$10", "10"),
    (r"$\frac{\pi}{2}$", r"\pi/2"), (r"\sqrt{8}", r"2\sqrt{2}"), (r"\text{(B)}", "B"), (r"\mathrm{(B)}", "(B)"),
    (r"\text{East}", "east"), (r"\tfrac12 +\! \frac1{72}", r"\dfrac{1}{2}+\frac{1}{72}"),
    # units
    ("5 cm", "5"), (r"5\text{ cm}", "5"), (r"15\mbox{ cm}^2", "15"), (r"5.4 \text{ cents}", "5.4"),
    ("18 dollars", "18"),
    # expressions, equations, complex numbers
    ("x^2-4", "(x+2)(x-2)"), ("2k+2", "2(k+1)"), ("-2+7i", "7i-2"), ("x=5", "5"), ("y = 2x+3", "2x+3"),
    ("y=2x+3", "y = 3 + 2x"), ("10x - 14y + 22z + 8 = 0", "5x - 7y + 11z + 4 = 0"), (r"\cot x", r"\frac{1}{\tan x}"),
    # intervals, sets, tuples, lists, matrices, bases
    ("[1,2)", r"\left[1, 2\right)"), (r"(-\infty, 2) \cup (3, \infty)", r"(3,\infty)\cup(-\infty,2)"),
    (r"x \in [-2,7]", "[-2,7]"), (r"\{1,2\}", r"\{2,1\}"), ("-2,1", "1,-2"), ("(1,2)", r"\left(1,2\right)"),
    (r"1 \pm \sqrt{19}", r"1+\sqrt{19}, 1-\sqrt{19}"), (r"\{1\pm\sqrt{5},-2\}", r"-2, 1-\sqrt5, 1+\sqrt5"),
    (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", "(1,2)"), (r"\begin{pmatrix} 1 & 0 \\ 0 & 1 \end{pmatrix}",
                                                          r"\begin{bmatrix} 1 & 0 \\ 0 & 1 \end{bmatrix}"),
    ("2516_8", "2516_{8}"), ("2516", "2516_8"),
    (r"\frac{-1 \pm \sqrt{5}}{2}", r"\frac{-1+\sqrt5}{2}, \frac{-1-\sqrt5}{2}"), ("x = 0 or x = 2", "2, 0"),
    ("x=0, 2, 5", "0, 2, 5"), (r"i^{15} = -i", r"i^{15}=-i"), ("all real numbers", "All real numbers"),
]

NOT_EQUAL = [
    ("1/3", "0.333"), ("3.14", r"\pi"), ("[1,2)", "[1,2]"), ("(1,2)", "(2,1)"), ("(1,2)", "[1,2]"),
    (r"\{1,2\}", r"\{1,2,3\}"), ("2 1/3", "2/3"), ("50%", "49"), ("4 4/9%", "40/9"), ("11 6/6", "12"),
    ("4 0/0", "4"), ("x^2+4", "(x+2)(x-2)"), ("5x - 7y + 11z + 4 = 0", "x + y - z + 2 = 0"), (r"\sqrt{x^2}", "x"),
    (r"\text{east}", r"\text{west}"), ("B", "C"), (r"\frac{1}{2} + 2/3", r"\frac{1}{2} + \frac1{72}"),
    ("1358", "2516_8"), ("100", r"10\text{ units}"), ("-2+7i", "2+7i"), (r"(-\infty, 2)", r"(-\infty, 2]"),
    ("1, 2", "(1,2)"), ("", "5"), ("5", ""), (r"\log 10^{5} = 6", r"\log 10^{5} = 5"), (r"\frac 60", "6"),
    (r"\frac{-1 \pm \sqrt{5}}{2}", r"\frac{-1+\sqrt5}{2}"), ("x=1, y=2", "x=2, y=1"),
]


@pytest.mark.parametrize("response,gold", EQUAL)
def test_equal_forms(response, gold):
    assert math_equal(response, gold), (response, gold)


@pytest.mark.parametrize("response,gold", NOT_EQUAL)
def test_not_equal_forms(response, gold):
    assert not math_equal(response, gold), (response, gold)


@pytest.mark.parametrize("text,answer", [
    (r"We get $x=3$, so the answer is $\boxed{\frac{1}{\sqrt{2}}}$.", r"\frac{1}{\sqrt{2}}"),
    (r"First \boxed{3}, then corrected: \boxed{\left\{1, \{2\}\right\}}", r"\left\{1, \{2\}\right\}"),
    (r"\fbox{7} is it", "7"),
    ("She has 3 + 4 = <<3+4=7>>7 now.\n#### 7", "7"),
    ("Janet sells 16 - 3 - 4 = 9 eggs.\nA: 18", "18"),
    ("Final Answer: The final answer is $5$. I hope it is correct.", "5"),
    ("The answer is: **12**", "12"),
    ("So the answer is 1,000.", "1,000"),
    ("There are 4 objects and 4/9 remain.", "4/9"),
    ("<think>maybe 5</think>The result is 6.", "6"),
    ("<think>maybe 5, still thinking", None),
    ("no digits here at all", None),
])
def test_extract_final_answer(text, answer):
    assert extract_final_answer(text) == answer


def test_final_answer_beats_an_earlier_word_answer():
    # math-verify 0.9.0 takes the number after the first "answer" here (5) and marks it wrong
    response = "To find the answer, we first note 5 apples. Then she buys 7 more, so 12 total."
    assert extract_final_answer(response) == "12"
    assert math_equal(response, "12")
    assert not math_equal(response, "5")


def test_last_box_and_last_statement_win():
    assert math_equal(r"Maybe \boxed{3}. No, wait: \boxed{4}.", "4")
    assert not math_equal(r"Maybe \boxed{3}. No, wait: \boxed{4}.", "3")
    assert math_equal("The answer is 3. Rechecking, the answer is 5.", "5")


def test_parse_fast_path_and_cache():
    a = parse_answer("42")
    assert a.tree == ("num", 42) and not a.percent
    assert parse_answer(r"\dfrac{1}{2}") is parse_answer(r"\dfrac{1}{2}")      # cached
    assert parse_answer("x" * 10_000).tree is None                              # too long: text, not parsed


def test_timeout_guard_on_a_huge_power():
    t0 = time.monotonic()
    assert not math_equal(r"\boxed{2^{2^{2^{100}}}}", "5", timeout_s=1.0)
    assert time.monotonic() - t0 < 1.0 + sympy_worker.STARTUP_TIMEOUT_S
    assert sympy_worker.symbolic_equal("sin(Symbol('x'))**2 + cos(Symbol('x'))**2", "(1)", timeout_s=20) is True
    t0 = time.monotonic()        # the worker is warm now: the deadline alone bounds the call
    timeouts = sympy_worker.calls["timeouts"]
    assert sympy_worker.symbolic_equal("(2)**((2)**((2)**(100)))", "(5)", timeout_s=1.0) is None
    assert time.monotonic() - t0 < 2.0
    assert sympy_worker.calls["timeouts"] == timeouts + 1


def test_timeout_guard_from_threads():
    # signal.alarm would refuse to run outside the main thread; the worker subprocess does not care
    def call(_):
        t0 = time.monotonic()
        ok = math_equal(r"\boxed{9^{9^{9^{9}}}}", "1", timeout_s=0.5)
        return ok, time.monotonic() - t0
    assert threading.current_thread() is threading.main_thread()
    before = sympy_worker.calls["symbolic"]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(call, range(2)))
    assert all(ok is False for ok, _ in results)
    assert all(dt < 0.5 * 2 + sympy_worker.STARTUP_TIMEOUT_S for _, dt in results)
    assert sympy_worker.calls["symbolic"] > before          # the guarded path really ran


def test_symbolic_fallback_settles_what_numbers_cannot():
    # x^2000 overflows a float at every sample point, so only sympy (under its deadline) can decide
    before = sympy_worker.calls["symbolic"]
    assert answers_equal(r"\frac{x^{2000}}{x^{1999}}", "x", timeout_s=20)
    assert not answers_equal(r"\frac{x^{2000}}{x^{1998}}", "x", timeout_s=20)
    assert sympy_worker.calls["symbolic"] == before + 2
    assert not answers_equal(r"\frac{x^{2000}}{x^{1999}}", "x", symbolic=False)     # fast path alone: no proof


# -- the row contract --------------------------------------------------------------------------------
def test_row_scored():
    out = score_row("math", {"response": r"so \boxed{\frac12}", "gold": "0.5", "id": 7})
    assert out["correct"] is True and out["score"] == 1.0 and out["id"] == 7 and "error" not in out
    out = score_row("math", {"response": r"so \boxed{3}", "gold": "0.5"})
    assert out["correct"] is False and out["score"] == 0.0 and "error" not in out


@pytest.mark.parametrize("row,reason", [
    ({"response": "5"}, "missing field 'gold'"),
    ({"response": 5, "gold": "5"}, "field 'response' must be str"),
    ({"gold": "5"}, "missing field 'response'"),
    ({"response": "5", "gold": ["5"]}, "field 'gold' must be str"),
    ({"response": "5", "gold": "  "}, "empty field 'gold'"),
])
def test_row_errors(row, reason):
    out = score_row("math", row)
    assert out["score"] == 0.0 and out["correct"] is False and reason in out["error"]


def test_huge_responses_are_errors_or_fast():
    out = score_row("math", {"response": "1" * (10 * 1024 * 1024), "gold": "1"})
    assert out["score"] == 0.0 and "too long" in out["error"]
    just_under = ("\\boxed{" * 1000 + "x " * (MAX_RESPONSE_CHARS // 2 - 4000))[:MAX_RESPONSE_CHARS - 20] + " 42"
    t0 = time.monotonic()
    out = score_row("math", {"response": just_under, "gold": "42"})
    assert time.monotonic() - t0 < 5.0
    assert out["correct"] is True and "error" not in out


# -- reference sets ------------------------------------------------------------------------------------
@needs_data
def test_gsm8k_labelled_agreement():
    pairs = bench.gsm8k_pairs(DATA)
    assert len(pairs) == 4 * 1319
    ours, _ = bench.run_ours(pairs)
    agreement = sum(v == lab for v, (_, _, lab) in zip(ours, pairs)) / len(pairs)
    assert agreement >= 0.99
    sample = pairs[:300]                   # math-verify is ~40x slower: compare on a sample
    mv, _ = bench.run_math_verify(sample, "plain")
    ours_s = sum(v == lab for v, (_, _, lab) in zip(ours[:300], sample))
    mv_s = sum(v == lab for v, (_, _, lab) in zip(mv, sample))
    assert ours_s >= mv_s


@needs_data
def test_math500_renderings_all_equal_and_perturbed_unequal():
    pairs = bench.math500_pairs(DATA)
    assert len(pairs) > 8 * 500
    ours, _ = bench.run_ours(pairs)
    wrong = [(resp, gold, lab) for v, (resp, gold, lab) in zip(ours, pairs) if v != lab]
    assert wrong == []
    assert sum(1 for p in pairs if not p[2]) == 500


@needs_data
def test_math_verify_mixed_number_cases():
    pairs = bench.mixed_pairs(DATA)
    ours, _ = bench.run_ours(pairs)
    wrong = [(resp, gold) for v, (resp, gold, lab) in zip(ours, pairs) if v != lab]
    # deliberate: "11\n5/6" states 5/6 (its last number), not 5 as Math-Verify's newer tests expect
    assert wrong == [("11\n5/6", "5"), ("11\r\n5/6", "5")]


@needs_data
def test_hendrycks_equivalence_cases():
    pairs = bench.hendrycks_pairs(DATA)
    ours, _ = bench.run_ours(pairs)
    wrong = [(resp, gold) for v, (resp, gold, lab) in zip(ours, pairs) if v != lab]
    # deliberate: a bare comma list is a set of solutions (MATH's "enter all solutions"), order free
    assert wrong == [("4, 10, -2", "10, 4, -2"), ("4, .1, 2", "0.1, 4, 2")]


# -- the benchmark ----------------------------------------------------------------------------------------
@needs_data
def test_bench_smoke(capsys):
    assert bench.main(["--limit", "3", "--sets", "gsm8k,math500,hendrycks"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    out = json.loads(lines[-1])
    assert out["bench"] == "gym-math" and out["agreement"] == 1.0
    assert set(out["sets"]) == {"gsm8k", "math500", "hendrycks"}
    assert out["speedup_vs_math_verify"] == min(out["speedup_plain_gsm8k"], out["speedup_latex_math500"])
    assert any(line.startswith("gsm8k") for line in lines)


def test_bench_missing_data(tmp_path, capsys):
    assert bench.main(["--data", str(tmp_path / "absent")]) == 2
    assert "missing" in capsys.readouterr().err


def test_renderings_and_perturbation_generators():
    forms = bench.renderings(r"\dfrac{3}{56}")
    assert r"\frac{3}{56}" in forms and "3/56" in forms and any(r"\boxed" in f for f in forms)
    assert bench.perturbed(r"\frac{3}{56}") == r"\frac{3}{57}"
    assert bench.perturbed(r"15\mbox{ cm}^2") == r"16\mbox{ cm}^2"
    assert bench.perturbed(r"10,\!080") == "10081"


def _pool_job(_):
    return answers_equal(r"\frac{x^{2000}}{x^{1999}}", "x", timeout_s=20), sympy_worker._owner_pid


def test_symbolic_fallback_inside_a_process_pool_worker():
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor
    assert answers_equal(r"\frac{x^{2000}}{x^{1999}}", "x", timeout_s=20)    # the parent owns a worker now
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        ok, owner = pool.submit(_pool_job, 0).result(timeout=60)
    assert ok is True and owner != os.getpid()          # the child started its own worker, not the parent's
