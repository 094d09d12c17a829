"""``bfcl_exec``: calls run in the sandbox against a reference-functions file written here, in BFCL's
public answer format; each match kind, parallel calls in any order, and each way to fail."""
from __future__ import annotations

import json

import pytest

from compass.gym.bfcl.exec_match import match_results, result_error
from compass.gym.score import judge, parse_verifier

FUNCTIONS = '''
import math
import random

def binomial(n, k, p):
    return math.comb(n, k) * p ** k * (1 - p) ** (n - k)

def stats(xs):
    return {"mean": sum(xs) / len(xs), "n": len(xs)}

def live_price(symbol):
    return 100.0 + random.random()          # changes every call: real-time match

def pair(a, b):
    return (a, b)

def fails(x):
    raise ValueError("cannot")

def leaks():
    import socket
    return socket.socket()
'''


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("bfcl") / "functions.py"
    path.write_text(FUNCTIONS)
    return parse_verifier({"type": "bfcl_exec", "functions_file": str(path)})


def answer(*calls) -> str:
    return "<think>run</think>" + "".join(
        f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>" for n, a in calls)


def verdict(spec, response, truth, kinds=None):
    ref = {"ground_truth": truth, "execution_result_type": kinds or ["exact_match"] * len(truth)}
    r = judge(spec, response, json.dumps(ref))
    return r.score, r.reason


def test_exact_match_runs_both_calls(spec):
    truth = ["binomial(n=20, k=5, p=1/6)"]                    # BFCL's ground truth holds expressions
    assert verdict(spec, answer(("binomial", {"n": 20, "k": 5, "p": 1 / 6})), truth) == (1.0, None)
    assert verdict(spec, answer(("binomial", {"n": 20, "k": 5, "p": 0.17})), truth) == (0.0, "wrong_result")
    assert verdict(spec, answer(("binomial", {"n": 20, "k": 5})), truth) == (0.0, "execution_error")
    assert verdict(spec, answer(("nosuch", {"n": 20})), truth) == (0.0, "execution_error")
    assert verdict(spec, answer(("fails", {"x": 1})), truth) == (0.0, "execution_error")


def test_a_tuple_result_is_a_list(spec):
    assert verdict(spec, answer(("pair", {"a": 1, "b": 2})), ["pair(1, 2)"]) == (1.0, None)


def test_real_time_and_structural_match(spec):
    assert verdict(spec, answer(("live_price", {"symbol": "X"})), ["live_price('X')"], ["real_time_match"]) == (1.0, None)
    assert verdict(spec, answer(("stats", {"xs": [9, 9, 9]})), ["stats([1, 2, 3])"], ["structural_match"]) == (1.0, None)
    assert verdict(spec, answer(("stats", {"xs": [1, 2, 3]})), ["pair(1, 2)"], ["structural_match"]) == \
        (0.0, "wrong_result_type")


def test_parallel_calls_in_any_order(spec):
    truth = ["binomial(n=10, k=3, p=0.3)", "binomial(n=15, k=5, p=0.3)"]
    good = answer(("binomial", {"n": 15, "k": 5, "p": 0.3}), ("binomial", {"n": 10, "k": 3, "p": 0.3}))
    assert verdict(spec, good, truth) == (1.0, None)
    once = answer(("binomial", {"n": 15, "k": 5, "p": 0.3}))
    assert verdict(spec, once, truth) == (0.0, "wrong_count")
    twice = answer(("binomial", {"n": 15, "k": 5, "p": 0.3}), ("binomial", {"n": 15, "k": 5, "p": 0.3}))
    assert verdict(spec, twice, truth) == (0.0, "wrong_result")


def test_the_sandbox_holds_and_a_failing_ground_truth_is_the_datas_fault(spec):
    assert verdict(spec, answer(("leaks", {})), ["leaks()"])[1] == "bad_gold"       # no sockets in the sandbox
    assert verdict(spec, answer(("fails", {"x": 1})), ["fails(1)"])[1] == "bad_gold"
    assert verdict(spec, "<think>.</think>No tool needed.", ["pair(1, 2)"]) == (0.0, "no_call")


def test_bad_references_name_the_problem(spec, tmp_path):
    assert verdict(spec, answer(("pair", {"a": 1, "b": 2})), ["pair(1, 2"])[1] == "bad_gold"
    assert verdict(spec, answer(("pair", {"a": 1, "b": 2})), ["pair(1, 2)"], ["fuzzy_match"])[1] == "bad_gold"
    assert verdict(spec, answer(("pair", {"a": 1, "b": 2})), ["pair(1, 2)", "pair(3, 4)"], ["exact_match"])[1] \
        == "bad_gold"                                             # a call without its match kind
    assert verdict(spec, answer(("pair", {"a": 1, "b": 2})), ["pair(1, 2)"], ["exact_match"] * 2) == (1.0, None)
    missing = parse_verifier({"type": "bfcl_exec", "functions_file": str(tmp_path / "absent.py")})
    assert verdict(missing, answer(("pair", {"a": 1, "b": 2})), ["pair(1, 2)"])[1] == "bad_spec"
    assert verdict(missing, "no call at all", ["pair(1, 2)"])[1] == "bad_spec"
    assert verdict(parse_verifier({"type": "bfcl_exec"}), answer(("pair", {"a": 1, "b": 2})), ["pair(1, 2)"])[1] \
        == "bad_spec"


@pytest.mark.parametrize("got, expected, kind, error", [
    (1.0, 1, "exact_match", None), ([1, 2], (1, 2), "exact_match", None), (3, 4, "exact_match", "wrong_result"),
    (11.9, 10, "real_time_match", None), (12.1, 10, "real_time_match", "wrong_result"),
    (True, 1, "real_time_match", "wrong_result"), ("10", 10, "real_time_match", "wrong_result"),
    ({"a": 2}, {"a": 1}, "structural_match", None), ({"b": 1}, {"a": 1}, "structural_match", "wrong_result_type"),
    ([1], [1, 2], "structural_match", "wrong_result_type"), (1, 1.0, "structural_match", "wrong_result_type"),
])
def test_match_rules(got, expected, kind, error):
    assert result_error(got, expected, kind) == error


def test_greedy_pairing_as_bfcl_pairs():
    assert match_results([(True, 2), (True, 1)], [1, 2], ["exact_match"] * 2) == (True, None)
    assert match_results([(False, "boom"), (True, 1)], [1, 2], ["exact_match"] * 2) == (False, "execution_error")
