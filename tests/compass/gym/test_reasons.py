"""Every low score says why: reason codes on error rows of every verifier, the code sandbox's first failure,
spec-form rewards, the CLI's summary by reason, and the RL step's reward audit."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from compass.gym import reasons
from compass.gym.rows import score_row
from compass.gym.score import Reward, judge
from compass.gym.verifiers.code import reason_of
from compass.gym.sandbox.pool import Result, SandboxPool
from compass.rl.step_metrics import reward_audit

F = "def f(x):\n    return x + 1\n"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(concurrency=2) as p:
        yield p


def _why(pool, program, tests, timeout_s=5.0):
    return reason_of(pool.run(program, tests, timeout_s))


# -- the code sandbox tells a syntax error, a failed test and a refusal apart -------------------------
def test_code_reasons_from_the_real_sandbox(pool):
    assert _why(pool, F, ["assert f(1) == 2"]) == (None, "")
    code, msg = _why(pool, "def f(x):\n    return x +\n", ["assert f(1) == 2"])
    assert code == "syntax_error" and "line 2" in msg
    code, msg = _why(pool, F, ["assert f(1) == 2", "assert f(1) == 3, 'off by one'"])
    assert code == "test_failed" and msg.startswith("test 1: AssertionError") and "off by one" in msg
    code, msg = _why(pool, "import os\ndef f(x):\n    os.system('ls')\n    return x\n", ["assert f(1) == 1"])
    assert code == "sandbox_refused:os.system", (code, msg)
    code, _ = _why(pool, "raise KeyError('boom')\n", ["assert True"])
    assert code == "runtime_error:KeyError"
    code, msg = _why(pool, F, ["assert g(1) == 2"])
    assert code == "test_failed" and "NameError" in msg
    code, _ = _why(pool, F, ["assert f(1) ==", "assert f(1) == 2"])
    assert code == "bad_spec"                        # a test that does not compile is the data's fault
    code, msg = _why(pool, "import time\ndef f(x):\n    time.sleep(60)\n", ["assert f(1)"], timeout_s=1.0)
    assert code == "timeout" and "after 0 passing tests" in msg


def test_code_reasons_for_runs_the_sandbox_stopped():
    assert reason_of(Result([False], "memory"))[0] == "memory_limit"
    assert reason_of(Result([False], "infra", detail="spawn failed"))[0] == "sandbox_infra"
    assert reason_of(Result([False], "crash", detail="empty program"))[0] == "no_program"
    assert reason_of(Result([True, False], "output_limit"))[0] == "output_limit"


def test_code_rows_carry_reason_and_message():
    row = score_row("code", {"response": "```python\nprint(1\n```", "tests": ["assert True"]})
    assert row["reason"] == "syntax_error" and row["message"] and row["score"] == 0.0 and "error" not in row
    row = score_row("code", {"response": F, "tests": ["assert f(1) == 2"]})
    assert "reason" not in row and row["score"] == 1.0
    row = score_row("code", {"response": F, "tests": []})
    assert row["reason"] == "missing_field" and "empty" in row["error"]


# -- error rows of every verifier carry a code ------------------------------------------------------
@pytest.mark.parametrize("verifier,row,code", [
    ("math", {"gold": "1"}, "missing_field"),
    ("math_exact", {"response": "1", "gold": "  "}, "missing_field"),
    ("mcq", {"response": "A", "gold": "E", "options": {"A": "x", "B": "y"}}, "bad_gold"),
    ("tool_call", {"response": "x", "gold_calls": "{not json"}, "bad_gold"),
    ("ifeval", {"response": "x", "instruction_id_list": [], "kwargs": []}, "missing_field"),
    ("code", {"response": "x", "tests": ["assert True"], "timeout_s": 0}, "bad_field"),
    ("qa", {"response": "x"}, "missing_field"),
    ("title_rules", {"response": "x", "max_chars": -1}, "bad_field"),
    ("math", {"response": "x" * 4_000_001, "gold": "1"}, "response_too_long"),
])
def test_every_verifiers_error_rows_carry_a_known_reason(verifier, row, code):
    out = score_row(verifier, row)
    assert out["error"] and out["reason"] == code, out.get("error")
    assert reasons.known(out["reason"])


def test_whose_fault():
    assert reasons.is_verifier_fault("verifier_timeout") and reasons.is_verifier_fault("bad_gold")
    assert reasons.is_verifier_fault("sandbox_infra")
    assert not reasons.is_verifier_fault("sandbox_refused:os.system")
    assert not reasons.is_verifier_fault("test_failed") and not reasons.is_verifier_fault(None)
    assert reasons.base("runtime_error:NameError") == "runtime_error"


# -- the spec form (what the RL engine calls) says why too --------------------------------------------
def test_spec_rewards_carry_reasons():
    mcq = {"type": "mcq", "options": "ABCD"}
    assert judge(mcq, "The answer is B", "B") == Reward(1.0, None)
    assert judge(mcq, "no idea", "B") == Reward(0.0, "no_answer")
    assert judge(mcq, "B", "Z") == Reward(0.0, "bad_gold")
    code = {"type": "code", "tests": ["assert f(1) == 2"]}
    assert judge(code, F, "") == Reward(1.0, None)
    assert judge(code, "def f(x) return 1", "").reason == "syntax_error"
    assert judge({"type": "code", "tests": []}, F, "").reason == "bad_spec"
    assert judge({"type": "tool_call"}, "x", "[oops").reason == "bad_gold"


# -- the CLI: reasons counted, bad flags refused ---------------------------------------------------
def _cli(*args):
    env = {**os.environ, "COMPASS_PROGRESS": "0"}
    return subprocess.run([sys.executable, "-m", "compass.cli.main", "gym", "score", *args], capture_output=True,
                          text=True, env=env, timeout=180)


def test_cli_counts_reasons_and_refuses_bad_flags(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    opts = {"A": "red", "B": "blue"}
    rows = [{"response": "B", "gold": "B", "options": opts}, {"response": "B", "gold": "Q", "options": opts},
            {"response": "B", "gold": "Q", "options": opts}, {"gold": "A", "options": opts}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows) + "[1]\n")
    p = _cli("mcq", str(src), str(out), "--workers", "1")
    assert p.returncode == 0, p.stderr
    assert "4 unscorable" in p.stderr and "{" not in p.stderr       # no Python dict on the console
    lines = p.stderr.splitlines()
    assert any(line.split() == ["bad_gold", "2"] for line in lines), p.stderr
    assert any(line.split() == ["missing_field", "1"] for line in lines)
    assert any(line.split() == ["not_an_object", "1"] for line in lines)
    got = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r.get("reason") for r in got] == [None, "bad_gold", "bad_gold", "missing_field", "not_an_object"]
    for bad in ("0", "-1", "nan"):
        p = _cli("mcq", str(src), str(out), "--timeout", bad)
        assert p.returncode == 2 and "--timeout must be" in p.stderr, p.stderr
    p = _cli("mcq", str(tmp_path), str(out))
    assert p.returncode == 2 and "is a folder" in p.stderr


def test_cli_reports_agreement_with_labels_and_the_unread_statements(tmp_path):
    """A user's own labelled outputs: how often the verifier agrees with the labels, and what it could not
    read (issue 28 item 4)."""
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    rows = [{"response": "The answer is 5.", "gold": "5", "label": True},
            {"response": "The answer is 6.", "gold": "5", "label": False},
            {"response": "So it is $\\oint_C f\\,dz$.", "gold": "0", "label": True},      # unread: a miss
            {"response": "Thus \\boxed{\\oint_C f\\,dz}.", "gold": "1", "label": False},
            {"response": "The answer is 7.", "gold": "7", "label": False},        # a label saying otherwise
            {"response": "The answer is 7.", "gold": "7"}]                         # no label: not counted
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = _cli("math", str(src), str(out), "--workers", "1")
    assert p.returncode == 0, p.stderr
    assert ("agreement with the rows' labels: 0.6000 (3 of 5): 1 labelled correct scored wrong, "
            "1 labelled wrong scored correct") in p.stderr, p.stderr
    lines = p.stderr.splitlines()
    at = next(i for i, ln in enumerate(lines) if "final statements that could not be read (2 rows" in ln)
    assert lines[at + 1].split() == ["2", "\\oint_C", "f\\,dz"], p.stderr
    got = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r.get("reason") for r in got] == [None, None, "unparsed_final_statement", "unparsed_final_statement",
                                               None, None]
    assert got[2]["answer"] == "\\oint_C f\\,dz" and "answer" not in got[0]
    assert reasons.is_verifier_fault("unparsed_final_statement")    # the audit counts it as a possible miss
    src.write_text(json.dumps({"response": "5", "gold": "5"}) + "\n")      # no labels: no agreement line
    p = _cli("math", str(src), str(out), "--workers", "1")
    assert "rows' labels" not in p.stderr and "could not be read" not in p.stderr


# -- the RL step's reward audit -------------------------------------------------------------------
def test_reward_audit_tells_verifier_all_fails_from_wrong_answers():
    rewards = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    why = [["verifier_timeout", "bad_gold"],          # all-fail, the verifier's doing
           ["test_failed", "verifier_timeout"],       # all-fail, partly a wrong answer
           [None, "syntax_error"], [None, None]]
    audit = reward_audit(rewards, why, pass_threshold=0.5)
    assert audit["all_fail_verifier_fault"] == 1
    assert audit["verifier_fault_samples"] == 3
    assert audit["reasons"] == {"verifier_timeout": 2, "bad_gold": 1, "test_failed": 1, "syntax_error": 1}
    empty = reward_audit(torch.zeros((0, 2)), [], 0.5)
    assert empty == {"reasons": {}, "verifier_fault_samples": 0, "all_fail_verifier_fault": 0}


def test_the_reward_service_passes_reasons_on():
    from compass.gym.service import RewardService
    with RewardService(1) as svc:
        ok = svc.submit_spec({"type": "mcq", "options": "ABCD"}, "B", "B").result()
        bad = svc.submit_spec({"type": "mcq", "options": "ABCD"}, "B", "Z").result()
        spec = svc.submit_spec({"type": "nonesuch"}, "B", "B").result()
        row = svc.submit("code", {"response": "def f(:", "tests": ["assert f()"]}).result()
    assert (ok.score, ok.reason) == (1.0, None)
    assert (bad.kind, bad.reason) == ("ok", "bad_gold")
    assert (spec.kind, spec.reason) == ("error", "bad_spec")
    assert row.reason == "syntax_error" and row.fields["message"]
