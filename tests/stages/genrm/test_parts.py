"""Pure parts of the GenRM stage: judgement format, rationales, split, screening, BT loss and τ, flips."""
from __future__ import annotations

import math

import pytest
import torch

from compass.config import ConfigError, validate
from stages.genrm.bradley_terry import bt_loss, bt_verdict, choose_tie_threshold
from compass.rl.algos.advantage_flips import FlipCount, flipped, group_advantages
from stages.genrm.grpo import judge_prompts, verdict_reward
from stages.genrm.pairs import screen_pairs, split_pairs
from stages.genrm.rationale import evaluation, final_answer, rationale, step_check
from compass.gym.genrm_verdict import (judge_prompt, judgement_text, normalize_label, parse_judgement, parse_verdict,
                                  verdict_text)


def test_verdict_format():
    assert parse_verdict("<think>x</think>" + verdict_text("TIE")) == "TIE"
    assert parse_verdict("<answer>A</answer> no, <answer> B </answer>") == "B"
    assert parse_verdict("<answer>C</answer>") is None and parse_verdict("A") is None
    assert [normalize_label(x) for x in ("A", " tie ", "b", "C", "", None)] == ["A", "TIE", "B", None, None, None]
    p = judge_prompt("q?", "ra", "rb")
    assert p.index("q?") < p.index("ra") < p.index("rb")


def test_structured_judgement_is_checked_and_parsed():
    full = judgement_text("math/arithmetic", "right answer wins", "A: 3; B: 4; differ", "B")
    j = parse_judgement(full)
    assert j.format_ok and j.verdict == "B" and j.fields["eval"] == "A: 3; B: 4; differ"
    assert parse_judgement(" " + full + "\n").format_ok
    for bad, verdict in [("<answer>A</answer>", "A"),                                 # no chain
                         (full.replace("<rubric>", "<rubrik>"), "B"),                 # broken field
                         ("<rubric>r</rubric><type>t</type><eval>e</eval><answer>A</answer>", "A"),  # order
                         (full + " and more", "B"), ("", None)]:
        j = parse_judgement(bad)
        assert not j.format_ok and j.verdict == verdict, bad
    with pytest.raises(ValueError):
        judgement_text("a<b", "r", "e", "A")


def test_rationale_reads_the_responses_not_the_label():
    assert final_answer("<think>2 + 3 = 5.</think>5") == "5"
    assert final_answer("<think>x</think>-11") == "-11"
    assert final_answer("C. Tas") == "C" and final_answer("The answer is D.") == "D"
    assert final_answer("") == "-"
    assert evaluation("<think>..</think>11", "11") == "A: 11; B: 11; same"
    row = {"prompt": "What is 9 + 2?", "response_a": "<think>9 + 2 = 11.</think>11",
           "response_b": "<think>9 + 2 = 10.</think>10", "domain": "math", "task": "arithmetic"}
    a, b = rationale(row, "A"), rationale(row, "B")
    assert a.replace("<answer>A</answer>", "") == b.replace("<answer>B</answer>", "")   # only the verdict differs
    assert parse_judgement(a).format_ok and "A: 11; B: 10; differ" in a and "<type>math/arithmetic</type>" in a
    assert "A: 11; B: 10; differ; A ok; B wrong" in a      # the shown steps are checked, not the label


def test_step_check_verifies_each_shown_operation():
    assert step_check("<think>First, 9 * 4 = 36. Finally, 2 + 36 = 38.</think>38") == "ok"
    assert step_check("<think>1 * 5 = -5. 7 + -5 = 2.</think>2") == "wrong"          # an early step
    assert step_check("<think>14 - 6 = 8. 8 - 7 = 0.</think>0") == "wrong"
    assert step_check("C. Tas") is None and step_check("<think>no steps</think>4") is None
    assert evaluation("<think>2 + 2 = 4.</think>4", "4") == "A: 4; B: 4; same; A ok; B -"


def test_screen_quarantines_bad_labels_and_empty_fields_with_reasons():
    rows = [{"id": "ok", "prompt": "q", "response_a": "a", "response_b": "b", "label": " tie "}] + [
        {"id": f"b{i}", "prompt": "q", "response_a": "a", "response_b": "b", "label": lab}
        for i, lab in enumerate(["C", "", "a tie", "B?", None])] + [
        {"id": "e", "prompt": "", "response_a": "a", "response_b": "b", "label": "A"}]
    ok, bad = screen_pairs(rows, "file://x")
    assert [r["id"] for r in ok] == ["ok"] and ok[0]["label"] == "TIE"
    assert [b["row_index"] for b in bad] == [1, 2, 3, 4, 5, 6]
    assert [b["reason"] for b in bad[:4]] == [f"label {v!r} is not one of A, B, TIE" for v in ["C", "", "a tie", "B?"]]
    assert bad[5]["field"] == "prompt" and bad[5]["source"] == "file://x"


def test_holdout_split_is_by_id_and_deterministic():
    rows = [{"id": f"p{i}", "row_index": i} for i in range(1000)]
    train, held = split_pairs(rows, 0.2)
    assert 150 < len(held) < 250 and len(train) + len(held) == 1000
    _, held2 = split_pairs(list(reversed(rows)), 0.2)
    assert {r["id"] for r in held} == {r["id"] for r in held2}
    assert split_pairs(rows, 0.0)[1] == []


def test_grpo_reward_is_verdict_correctness_and_both_orders_are_prompts():
    full = judgement_text("t", "r", "e", "A")
    score = verdict_reward()
    assert score("{}", full, "A") == 1.0 and score("{}", full, "B") == 0.0
    assert score("{}", "<answer>A</answer>", "A") == 1.0 and score("{}", "nonsense", "A") == 0.0
    fmt = verdict_reward(0.2)
    assert fmt("{}", full, "B") == pytest.approx(0.2) and fmt("{}", "<answer>A</answer>", "A") == pytest.approx(0.8)
    ps = judge_prompts([{"id": "p", "prompt": "q", "response_a": "x", "response_b": "y", "label": "A"}])
    assert [(p.id, p.reference) for p in ps] == [("p", "A"), ("p:swap", "B")]
    assert ps[1].prompt == judge_prompt("q", "y", "x")


def test_bt_loss_and_tie_threshold():
    r_w, r_l = torch.tensor([2.0, 0.0]), torch.tensor([0.0, 0.0])
    assert float(bt_loss(r_w, r_l)) == pytest.approx((-math.log(1 / (1 + math.exp(-2))) + math.log(2)) / 2)
    assert (bt_verdict(1.0, 0.0, 0.5), bt_verdict(0.0, 1.0, 0.5), bt_verdict(0.2, 0.0, 0.5),
            bt_verdict(0.3, 0.3, 0.0)) == ("A", "B", "TIE", "TIE")
    diffs = [0.05, -0.02, 1.0, -1.5, 0.4, 0.01]
    labels = ["TIE", "TIE", "A", "B", "A", "TIE"]
    tau, acc = choose_tie_threshold(diffs, labels)
    assert 0.05 < tau < 0.4 and acc == 1.0
    assert choose_tie_threshold([1.0, -1.0], ["A", "B"]) == (0.0, 1.0)


def test_flips_on_hand_made_groups():
    # mixed group ranked right: no flip
    assert flipped([1, 0, 1, 0], group_advantages([0.9, 0.1, 0.8, 0.2])) == [False] * 4
    # a scalar ranking one wrong response above a right one: both flip
    adv = group_advantages([0.9, 0.1, 0.3, 0.5])
    assert adv[2] < 0 < adv[3] and flipped([1, 0, 1, 0], adv) == [False, False, True, True]
    # all correct: true advantage 0, a scalar's spread still pushes the lower ones down
    assert flipped([1, 1, 1], group_advantages([0.50, 0.51, 0.52])) == [True, False, False]
    # ... while equal rewards (GenRM: TIE → 1 for all) give advantage 0, no flip
    assert group_advantages([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    # all wrong: any scalar spread lifts some wrong response
    assert flipped([0, 0], group_advantages([0.2, 0.1])) == [True, False]
    c = FlipCount()
    c.add([1, 1, 1], [0.50, 0.51, 0.52])
    c.add([1, 0, 1, 0], [1.0, 0.0, 1.0, 0.0])
    c.add([1, 0], [0.0, 0.0])
    assert c.as_dict() == {"groups": 3, "responses": 9, "flips": 1, "groups_flipped": 1, "flips_all_correct": 1,
                           "missed": 2, "flip_rate": 1 / 9}


def test_reference_pairs_compare_a_response_with_the_bare_reference():
    from stages.genrm.warm_start import reference_pair, warm_rows
    right = {"id": "p", "prompt": "What is 2 + 3?", "response_a": "<think>2 + 3 = 5.</think>5",
             "response_b": "<think>2 + 3 = 6.</think>6", "label": "A", "reference": "5"}
    pairs = [reference_pair(right, i) for i in range(4)]
    # index 0: response A (right) vs reference in B -> TIE; 1: response B (wrong) vs reference -> B wins
    assert (pairs[0]["response_a"], pairs[0]["response_b"], pairs[0]["label"]) == (right["response_a"], "5", "TIE")
    assert (pairs[1]["response_a"], pairs[1]["response_b"], pairs[1]["label"]) == (right["response_b"], "5", "B")
    # index 2, 3: the reference in position A
    assert (pairs[2]["response_a"], pairs[2]["label"]) == ("5", "TIE")
    assert (pairs[3]["response_a"], pairs[3]["response_b"], pairs[3]["label"]) == ("5", right["response_b"], "A")
    assert reference_pair({**right, "reference": ""}, 0) is None
    rows = warm_rows([right, {**right, "reference": None}], swap_augment=True, reference_pairs=True)
    assert len(rows) == 5 and [r["label"] for r in rows[:2]] == ["A", "B"]
    assert len(warm_rows([right], swap_augment=False, reference_pairs=False)) == 1


def test_grpo_settings_name_the_new_place_of_an_old_flat_key():
    from stages.genrm.config import GenRMConfig
    assert validate(GenRMConfig, {"grpo": {"sampling": {"group_size": 2}}}).grpo.sampling.group_size == 2
    with pytest.raises(ConfigError, match=r"grpo: `lr` moved to `trainer.lr`; `espo_alpha` moved to `loss.alpha"):
        validate(GenRMConfig, {"grpo": {"lr": 1e-4, "espo_alpha": 2}})
