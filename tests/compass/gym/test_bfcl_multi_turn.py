"""``bfcl_multi_turn``: a conversation's calls run turn by turn on classes written here (two files, one
importing the other by its package name, as BFCL's do), in BFCL's public format; state and results
checked after each turn, and each way to fail."""
from __future__ import annotations

import json

import pytest

from compass.gym.bfcl import turns
from compass.gym.score import judge, parse_verifier

UTIL = '''
def clean(name):
    return name.strip().lower()
'''
NOTES = '''
import subprocess                                  # imported, never used: must still load in the sandbox
from shop.backend.util import clean


class Notes:
    def __init__(self):
        self.notes = {}
        self._calls = 0                            # private: not part of the compared state

    def _load_scenario(self, config, long_context=False):
        self.notes = dict(config.get("notes", {}))

    def add(self, title, text=""):
        self._calls += 1
        self.notes[clean(title)] = text
        return {"added": clean(title)}

    def read(self, title):
        if clean(title) not in self.notes:
            raise KeyError(title)
        return self.notes[clean(title)]

    def count(self):
        return len(self.notes)


class Calculator:                                   # stateless: no _load_scenario
    def add_numbers(self, a, b):
        return a + b
'''
REFERENCE = {
    "ground_truth": [["add(title='Milk', text='2l')", "count()"], ["read('milk')"], [],
                     ["add_numbers(a=2, b=3)"]],
    "initial_config": {"Notes": {"notes": {"eggs": "6"}}},
    "involved_classes": ["Notes", "Calculator"],
}


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    d = tmp_path_factory.mktemp("classes")
    (d / "util.py").write_text(UTIL)
    (d / "notes.py").write_text(NOTES)
    return parse_verifier({"type": "bfcl_multi_turn", "classes_dir": str(d), "package": "shop.backend"})


def text(*calls) -> str:
    return "".join(f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>" for n, a in calls)


GOOD = [text(("add", {"title": "milk ", "text": "2l"}), ("count", {})),
        [text(("read", {"title": "MILK"})), "It says 2l."],       # two steps: a call, then the answer
        "I cannot do that.",
        text(("add_numbers", {"a": 2, "b": 3}))]


def verdict(spec, conversation, reference=REFERENCE):
    r = judge(spec, json.dumps(conversation), json.dumps(reference))
    return r.score, r.reason


def test_the_ground_truths_conversation_passes(spec):
    assert verdict(spec, GOOD) == (1.0, None)


def test_state_results_and_turns_are_checked(spec):
    wrong_text = [text(("add", {"title": "milk", "text": "1l"}), ("count", {}))] + GOOD[1:]
    assert verdict(spec, wrong_text) == (0.0, "state_mismatch")
    no_count = [text(("add", {"title": "milk", "text": "2l"}))] + GOOD[1:]
    assert verdict(spec, no_count) == (0.0, "response_mismatch")
    assert verdict(spec, [GOOD[0], "Done.", GOOD[2], GOOD[3]]) == (0.0, "empty_turn")
    assert verdict(spec, GOOD[:3]) == (0.0, "wrong_turn_count")
    assert verdict(spec, "not a conversation") == (0.0, "wrong_turn_count")


def test_a_result_fetched_in_an_earlier_turn_counts(spec):
    early = [text(("add", {"title": "milk", "text": "2l"}), ("count", {}), ("read", {"title": "milk"})),
             text(("count", {})), GOOD[2], GOOD[3]]
    assert verdict(spec, early) == (1.0, None)


def test_calls_in_a_turn_that_cannot_be_done_still_change_the_state(spec):
    meddling = GOOD[:2] + [text(("add", {"title": "bread"}))] + GOOD[3:]
    reference = dict(REFERENCE, ground_truth=REFERENCE["ground_truth"][:3] + [["count()"]])
    assert verdict(spec, meddling, reference) == (0.0, "state_mismatch")


def test_bad_references_and_specs_name_the_problem(spec, tmp_path):
    assert verdict(spec, GOOD, dict(REFERENCE, involved_classes=["Nope"]))[1] == "bad_spec"
    assert verdict(spec, GOOD, dict(REFERENCE, ground_truth=[["add(title='x'"]] * 4))[1] == "bad_gold"
    assert verdict(spec, GOOD, dict(REFERENCE, ground_truth="x"))[1] == "bad_gold"
    gone = parse_verifier({"type": "bfcl_multi_turn", "classes_dir": str(tmp_path / "absent")})
    assert verdict(gone, GOOD)[1] == "bad_spec"
    assert verdict(gone, [])[1] == "bad_spec"                 # the spec's fault even when the response is empty


def test_the_rules_on_live_objects():
    class Box:
        def __init__(self):
            self.items = []

        def put(self, x):
            self.items.append(x)
            return len(self.items)
    classes = {"Box": Box}
    out = turns.check_turns(classes, {}, [[("put", [], {"x": 1})], [("put", [], {"x": 2})]], [["put(1)"], ["put(2)"]])
    assert out["passed"]
    out = turns.check_turns(classes, {}, [[("put", [], {"x": 1})], [("kill", [], {})]], [["put(1)"], ["put(2)"]])
    assert (out["reason"], out["turn"]) == ("state_mismatch", 1)
    assert turns.execute(turns.methods({"Box": Box()}), ("exit", [], {})) == \
        "Error during execution: Function call exit is not allowed."
    assert turns.missing(["a", "a", "b"], ["b", "a"]) == ["a"]
