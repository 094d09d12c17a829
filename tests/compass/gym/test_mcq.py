"""The multilingual multiple-choice verifier: hand cases in seven languages, the row contract, ENEM agreement."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from compass.gym.mcq_choice.extract import extract_choice, predict, resolve_label
from compass.gym.rows import score_row

DATA = Path(__file__).resolve().parents[4] / "shared" / "data"
SHOES = {"A": "Sepatu", "B": "Tas Ransel", "C": "Jam Tangan", "D": "Tas"}


@pytest.mark.parametrize("text,label", [
    # letters
    ("B", "B"), ("(B)", "B"), ("B)", "B"), ("[B]", "B"), ("（Ｂ）", "B"), ("b", "B"), ("**C**", "C"),
    ("B. Tas Ransel", "B"), ("C) Jam Tangan", "C"), ("E", None), ("A laptop", None),
    # en
    ("the answer is (B)", "B"), ("Answer: B", "B"), ("The correct answer is option D.", "D"), ("C is correct.", "C"),
    ("Final answer: \\boxed{A}", "A"), ("the answer is a trick question", None),
    # zh-TW
    ("答案是 B", "B"), ("正確答案為（B）", "B"), ("選 B", "B"), ("答案：Ｄ", "D"), ("我選C，因為它最合理。", "C"),
    # id
    ("Jawaban: B", "B"), ("jawabannya adalah B", "B"), ("Jawaban yang benar adalah C.", "C"),
    # vi
    ("Đáp án là B", "B"), ("Chọn B", "B"), ("Đáp án đúng: D", "D"), ("dap an la C", "C"),
    # th
    ("คำตอบคือ ข้อ B", "B"), ("ตอบ ข.", "B"), ("คำตอบที่ถูกต้องคือ ง", "D"), ("คำตอบคือข", "B"),
    # pt
    ("A resposta correta é a letra B", "B"), ("Alternativa B", "B"), ("A alternativa C é a correta.", "C"),
    ("A resposta é A.", "A"),
    # ms
    ("Jawapannya ialah B", "B"), ("Jawapan yang betul ialah D", "D"),
    # Chinese stems as labels
    ("答案是乙", "B"), ("（丙）", "C"), ("答：丁。", "D"),
])
def test_letters_and_answer_phrases(text, label):
    assert extract_choice(text, SHOES) == label


@pytest.mark.parametrize("text,label", [
    # the last committed answer wins over options the reasoning walked past
    ("Option A is wrong; the answer is C", "C"),
    ("At first I thought the answer is A, but the strap rules it out. The answer is B.", "B"),
    ("答案是 A？不對，仔細看應該是鞋子以外的東西。正確答案為（C）", "C"),
    ("Phương án A sai vì không phù hợp. Vậy đáp án là D.", "D"),
    ("ข้อ ก ไม่ถูกต้อง เพราะราคาแพง ดังนั้นคำตอบคือ ข้อ ค", "C"),
    ("A alternativa A. está incorreta. A alternativa B. está incorreta. Resposta: C.", "C"),
    ("Pilihan A kurang tepat. Jadi jawapannya ialah B.", "B"),
    # ambiguous or absent
    ("A or B", None), ("(A) or (B)", None), ("The answer is A or B.", None), ("Resposta: A, C e D.", None),
    ("答案是 A 或 B", None), ("Đáp án là A hoặc B", None), ("I am not sure.", None), ("", None),
])
def test_last_commitment_and_ambiguity(text, label):
    assert extract_choice(text, SHOES) == label


@pytest.mark.parametrize("text,label", [
    ("sepatu", "A"), ("I would buy the JAM   TANGAN.", "C"),
    ("Tas", "D"),                                     # "Tas" alone, not the "Tas" inside "Tas Ransel"
    ("Tas Ransel", "B"),
    ("Not the Sepatu, and not the Tas. I pick the Jam Tangan.", "C"),   # several quoted: the final sentence
    ("Sepatu or Tas", None),
])
def test_option_text(text, label):
    assert extract_choice(text, SHOES) == label


def test_option_text_diacritics_thai_and_chinese():
    vi = {"A": "Giày thể thao", "B": "Túi xách"}
    assert extract_choice("Tôi nghĩ là tui xach", vi) == "B"
    th = ["รองเท้า", "กระเป๋าเป้", "นาฬิกา"]
    assert extract_choice("สินค้านี้คือกระเป๋าเป้ครับ", th) == "B"
    zh = {"甲": "蘋果", "乙": "香蕉", "丙": "芒果"}
    assert extract_choice("我覺得是香蕉。", zh) == "乙"
    assert extract_choice("答案是 B", zh) == "乙"             # a Latin letter names the second option too
    assert extract_choice("Jam", ["Jam Tangan", "Jaket"]) is None   # part of an option's text is no answer


def test_numbers_name_an_option_only_as_the_whole_answer():
    opts = ["22.", "25.", "28.", "48.", "64."]
    assert extract_choice("48", opts) == "D"
    assert extract_choice("Como há 8 grupos, serão 6 x 8 = 48 partidas na primeira fase.", opts) is None


def test_thai_labels_as_keys():
    opts = {"ก": "แดง", "ข": "เขียว", "ค": "น้ำเงิน", "ง": "ดำ"}
    assert extract_choice("ตอบ ข.", opts) == "ข"
    assert extract_choice("คำตอบคือ C", opts) == "ค"
    assert resolve_label("B", opts) == "ข"
    assert extract_choice("ตอบคำถามไม่ได้", opts) is None      # ค inside a Thai word is no label


def test_think_block_is_dropped():
    assert predict("<think>the answer is A ... no</think>The answer is C.", SHOES) == "C"
    assert predict("<think>the answer is A", SHOES) is None        # never closed: no answer


# -- what the earlier regex extractor (replaced by this one) read, and the world's answer phrases -------
@pytest.mark.parametrize("text,letter", [
    ("B", "B"), ("b", "B"), ("(C)", "C"), ("[D]", "D"), ("A.", "A"), ("B. Electronics", "B"), ("C) Toys", "C"),
    ("The answer is D", "D"), ("answer: (A)", "A"), ("Jawaban: C", "C"), ("Jawabannya adalah B", "B"),
    ("I pick (B) here", "B"), ("Option A is wrong; the answer is C", "C"),
    ("A laptop", None), ("(A) or (B)", None), ("E", None), ("", None), ("Electronics", None),
    ("答案是 B。", "B"), ("正確答案為（C）", "C"), ("答案：Ｄ", "D"),
    ("Jawaban yang benar adalah C", "C"), ("Jawapan yang betul ialah D", "D"), ("Jawapan: A", "A"),
    ("Đáp án đúng là C", "C"), ("Đáp án: B", "B"), ("คำตอบคือข้อ C", "C"), ("คำตอบที่ถูกต้องคือ D", "D"),
    ("A resposta correta é a C", "C"), ("Alternativa correta: D", "D"), ("A resposta é A.", "A"),
    ("Opção A está errada; a resposta é C", "C"),
])
def test_same_letters_as_the_earlier_extractor(text, letter):
    assert extract_choice(text) == letter


def test_world_answer_phrases():
    from stages.world.suites.ecommerce_category import ANSWER_PHRASES
    for lang, phrase in ANSWER_PHRASES.items():
        for letter in "ABCD":
            assert extract_choice(phrase.format(letter=letter)) == letter, (lang, letter)


# -- the spec -----------------------------------------------------------------------------------
def test_spec_with_option_texts_reads_an_answer_by_text():
    from compass.gym.score import score
    texts = json.dumps({"type": "mcq", "options": ["Esportes", "Brinquedos", "Áudio", "Livros"]})
    letters = json.dumps({"type": "mcq"})
    assert score(texts, "Livros", "D") == 1.0 and score(texts, "D", "D") == 1.0
    assert score(texts, "Brinquedos", "D") == 0.0 and score(texts, "E", "D") == 0.0
    assert score(letters, "Livros", "D") == 0.0 and score(letters, "D", "D") == 1.0   # letters alone: no text
    three = json.dumps({"type": "mcq", "options": {"A": "Exact", "B": "Substitute", "C": "Irrelevant"}})
    assert score(three, "Substitute", "B") == 1.0 and score(three, "Exact", "D") == 0.0


def test_spec_with_bad_options_is_a_bad_spec():
    from compass.gym.score import judge
    bad = judge(json.dumps({"type": "mcq", "options": [1, 2]}), "A", "A")
    assert (bad.score, bad.reason) == (0.0, "bad_spec")
    gold = judge(json.dumps({"type": "mcq", "options": ["Sepatu", "Tas"]}), "A", "C")
    assert (gold.score, gold.reason) == (0.0, "bad_gold")


# -- the row contract ---------------------------------------------------------------------------
def test_row_scores_and_adds_fields():
    row = {"response": "Jawaban: B", "options": {"A": "Sepatu", "B": "Tas"}, "gold": "B", "lang": "id"}
    out = score_row("mcq", row)
    assert (out["predicted"], out["correct"], out["score"]) == ("B", True, 1.0) and "error" not in out
    out = score_row("mcq", {**row, "response": "Sepatu", "options": ["Sepatu", "Tas"]})
    assert (out["predicted"], out["correct"], out["score"]) == ("A", False, 0.0)
    out = score_row("mcq", {**row, "lang": "xx"})                # unknown lang: every language's cues apply
    assert out["score"] == 1.0 and "error" not in out


@pytest.mark.parametrize("change,reason", [
    ({"options": None}, "missing field 'options'"),
    ({"options": {}}, "no options"),
    ({"options": "AB"}, "must be dict|list"),
    ({"gold": "C"}, "not among the options"),
    ({"gold": None}, "missing field 'gold'"),
    ({"response": None}, "missing field 'response'"),
    ({"lang": 3}, "'lang' must be str"),
    ({"options": {"A": 1, "B": "Tas"}}, "option texts must be strings"),
])
def test_malformed_rows_are_errors(change, reason):
    row = {"response": "B", "options": {"A": "Sepatu", "B": "Tas"}, "gold": "B", "lang": "en", **change}
    out = score_row("mcq", row)
    assert out["score"] == 0.0 and out["predicted"] is None and out["correct"] is False
    assert reason in out["error"]


def test_huge_responses_do_not_crash_or_hang():
    out = score_row("mcq", {"response": "B" * 10_000_000, "options": ["x", "y"], "gold": "B"})
    assert out["score"] == 0.0 and "too long" in out["error"]
    long = "Let me think. " * 250_000 + "The answer is C."          # 3.5 MB: read at its head and tail
    t0 = time.perf_counter()
    out = score_row("mcq", {"response": long, "options": SHOES, "gold": "C"})
    assert out["predicted"] == "C" and out["score"] == 1.0
    assert time.perf_counter() - t0 < 5


# -- reference data -----------------------------------------------------------------------------
needs_data = pytest.mark.skipif(not (DATA / "mc_enem_pt" / "model_responses_2022").exists(),
                                reason="../shared/data is absent")


@needs_data
def test_enem_agreement_with_labelled_extractions():
    from compass.bench.gym_mcq import load_enem, score_enem
    options, reports = load_enem(DATA)
    res = score_enem(options, reports)
    assert res["n"] == 1062 and len(res["reports"]) == 9
    assert res["agreement"] >= 0.98, res["disagreements"]
    assert all(r["agreement"] >= 0.9 for r in res["reports"])


@needs_data
def test_bench_smoke(capsys):
    from compass.bench.gym_mcq import main
    assert main(["--limit", "20", "--data", str(DATA)]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["bench"] == "gym-mcq" and last["enem_n"] == 9 * 20
    assert set(last["synthetic_accuracy"]) == {"en", "zh", "zh-TW", "id", "vi", "th", "pt", "ms"}
    assert min(last["synthetic_accuracy"].values()) >= 0.9


def test_bench_missing_data(tmp_path, capsys):
    from compass.bench.gym_mcq import main
    assert main(["--data", str(tmp_path / "nowhere")]) == 2
    assert "reference data missing" in capsys.readouterr().out
