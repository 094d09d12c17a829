"""pass@k, mean@k, maj@k and the standard errors over prompts against values worked out by hand (binomials written out, never the code's
product form)."""
from __future__ import annotations

import math
from math import comb

import pytest

from compass.lm.sample_metrics import answer_key, k_metrics, majority_correct, paired_se, pass_at_k, prompt_se


@pytest.mark.parametrize("n,c,k,expect", [
    (5, 2, 1, 2 / 5),                    # pass@1 is the accuracy
    (5, 2, 2, 1 - 3 / 10),               # 1 - C(3,2)/C(5,2)
    (5, 2, 3, 1 - 1 / 10),               # 1 - C(3,3)/C(5,3)
    (5, 2, 4, 1.0),                      # fewer than 4 wrong samples: any 4 hold a right one
    (5, 0, 3, 0.0),
    (8, 1, 4, 1 - 35 / 70),              # 1 - C(7,4)/C(8,4)
    (16, 3, 8, 1 - comb(13, 8) / comb(16, 8)),
])
def test_pass_at_k_by_hand(n, c, k, expect):
    assert pass_at_k(n, c, k) == pytest.approx(expect, abs=1e-12)


def test_pass_at_k_is_unbiased_where_the_plug_in_is_not():
    # 1 right of 2: a random pair of the 2 always holds it (1.0); the plug-in 1-(1-1/2)^2 says 0.75
    assert pass_at_k(2, 1, 2) == 1.0


def test_pass_at_k_refuses_impossible_counts():
    for n, c, k in [(4, 1, 5), (4, 5, 1), (4, 1, 0)]:
        with pytest.raises(ValueError, match="pass@k needs"):
            pass_at_k(n, c, k)


def test_majority_vote():
    assert majority_correct(["7", "8", "7"], [True, False, True]) is True
    assert majority_correct(["8", "7", "7", "8", "9"], [False, True, True, False, False]) is False  # tie: first
    assert majority_correct(["x"], [False]) is False
    with pytest.raises(ValueError):
        majority_correct(["a"], [True, False])


def test_answer_key_reads_the_final_answer_after_the_reasoning():
    assert answer_key("<think>2+2 is \\boxed{5}? no</think>So the answer is \\boxed{4}.") == "4"
    assert answer_key("<think>hmm</think> A ") == "A"


def test_k_metrics_by_hand():
    def rows(suite, pid, answers, right):
        return [{"suite": suite, "prompt_id": pid, "response": f"\\boxed{{{a}}}", "correct": a == right}
                for a in answers]
    res = (rows("math", "p1", ["4", "4", "5", "6"], "4")        # 2 of 4 right, majority right
           + rows("math", "p2", ["1", "2", "2", "3"], "3")      # 1 of 4 right, majority wrong
           + rows("code", "c1", ["x", "y"], "z"))               # 0 of 2
    m = k_metrics(res)
    assert m["math"]["k"] == 4 and m["code"]["k"] == 2
    assert m["math"]["mean"] == pytest.approx((2 / 4 + 1 / 4) / 2)
    assert m["math"]["maj"] == pytest.approx(0.5)
    assert set(m["math"]["pass"]) == {1, 2, 4}
    assert m["math"]["pass"][2] == pytest.approx(((1 - comb(2, 2) / comb(4, 2)) + (1 - comb(3, 2) / comb(4, 2))) / 2)
    assert m["math"]["pass"][4] == pytest.approx(1.0)
    assert m["code"] == {"k": 2, "mean": 0.0, "maj": 0.0, "pass": {1: 0.0, 2: 0.0}}


def test_prompt_se_by_hand():
    # prompt means 1, 0, 0.5, 0.5: mean 0.5, sample variance (0.25 + 0.25 + 0 + 0) / 3 = 1/6, SE sqrt(1/6 / 4)
    assert prompt_se([[1, 1], [0, 0], [1, 0], [0, 1]]) == pytest.approx(math.sqrt(1 / 24))
    # one 0/1 sample per prompt: sqrt(p (1 - p) / (P - 1)); 3 of 5 right
    assert prompt_se([[1], [1], [1], [0], [0]]) == pytest.approx(math.sqrt(0.6 * 0.4 / 4))
    assert prompt_se([[1, 0]]) is None and prompt_se([]) is None


def test_paired_se_uses_per_prompt_differences_on_shared_prompts():
    new = {"a": [1.0], "b": [1.0], "c": [0.0], "only_new": [1.0]}
    old = {"a": [0.0], "b": [1.0], "c": [0.0], "only_old": [0.0]}
    # differences 1, 0, 0: mean 1/3, sample variance ((2/3)^2 + 2 (1/3)^2) / 2 = 1/3, SE sqrt(1/3 / 3) = 1/3
    assert paired_se(new, old) == pytest.approx(1 / 3)
    # the same prompts moving together: no spread in the difference, where unpaired SEs would add up
    assert paired_se({"a": [1.0], "b": [0.0]}, {"a": [1.0], "b": [0.0]}) == 0.0
