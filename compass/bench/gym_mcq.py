"""Multiple-choice verifier benchmark: agreement with labelled extractions, plus a multilingual self-check.

1. ENEM 2022 (pt): 9 reports of GPT-4 / GPT-3.5 / code-davinci responses (zero-shot, 3-shot,
   3-shot CoT) with the letter the authors' pipeline extracted (``pred``). Agreement is our
   predicted letter == their ``pred`` over every response. Their ``pred`` is "X." for a letter;
   when their regexes found nothing it is "" (empty response) or the response text itself; both
   read as "no answer" (None), as ours does. Accuracy vs ``gold`` is shown for both extractors.
2. Self-check (no labelled responses exist): synthetic responses written from the gold of XCOPA
   (id, th, vi, zh) and TMMLU / TTQA (zh-TW) in each language's own phrasing (bare letters,
   "the answer is" forms, option text only, Thai/Chinese labels, reasoning that names a wrong
   option before committing), plus en / pt / ms built on the same items. Accuracy = the
   verifier reads the planted letter. It measures coverage of our own templates, not of models.

Data: ``<repo>/../shared/data`` (``--data`` overrides). Ends with one JSON line.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import time
from pathlib import Path

LETTERS = "ABCDE"


def default_data() -> Path:
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def their_pred(pred) -> str | None:
    """The authors' extraction as a letter; "", or the response echoed back when their regex failed, is None."""
    p = (pred or "").strip()
    m = re.fullmatch(r"([A-E])\.?", p)
    return m.group(1) if m else None


def load_enem(data: Path) -> tuple[dict[str, list[str]], list[tuple[str, list[dict]]]]:
    """(option texts by question id, [(report name, rows)])."""
    questions = json.loads((data / "mc_enem_pt" / "enem_2022_deprecated.json").read_text())
    options = {q["id"]: q["options"] for q in questions}
    reports = []
    for path in sorted(glob.glob(str(data / "mc_enem_pt" / "model_responses_2022" / "*.json"))):
        name = os.path.basename(path).replace("engine=", "").replace("_task=enem", "").replace(".json", "")
        name = name.replace("_numfewshot=", " k=").replace("_2022", "").replace("_cot", " cot")
        reports.append((name, json.loads(Path(path).read_text())))
    return options, reports


def score_enem(options: dict, reports: list, limit: int | None = None) -> dict:
    from compass.gym.mcq_choice.extract import predict
    out, disagreements, n_all, t_all = [], [], 0, 0.0
    for name, rows in reports:
        rows = rows[:limit] if limit else rows
        agree = ours_ok = theirs_ok = 0
        t0 = time.perf_counter()
        preds = [predict(r["response"], options.get(r["id"], LETTERS)) for r in rows]
        t_all += time.perf_counter() - t0
        for r, ours in zip(rows, preds):
            theirs, gold = their_pred(r["pred"]), their_pred(r["gold"])
            agree += ours == theirs
            ours_ok += ours == gold
            theirs_ok += theirs == gold
            if ours != theirs:
                disagreements.append({"report": name, "id": r["id"], "ours": ours, "theirs": theirs, "gold": gold,
                                      "tail": r["response"][-160:].replace("\n", " ")})
        n = len(rows)
        n_all += n
        out.append({"report": name, "n": n, "agreement": agree / n if n else 0.0,
                    "ours_acc": ours_ok / n if n else 0.0, "theirs_acc": theirs_ok / n if n else 0.0})
    total = sum(r["agreement"] * r["n"] for r in out)
    return {"reports": out, "n": n_all, "agreement": total / n_all if n_all else 0.0,
            "disagreements": disagreements, "seconds": t_all}


# -- synthetic multilingual self-check ------------------------------------------------------
# {L}: the gold label, {W}: a wrong label, {T}: the gold option's text, {WT}: a wrong option's text.
TEMPLATES = {
    "en": ["{L}", "({L})", "{L}. {T}", "The answer is ({L}).", "Answer: {L}", "The correct answer is {L}.",
           "{T}", "Option {W} looks tempting, but it ignores the premise. So the answer is {L}.",
           "Let me check {W} first: {WT} does not follow. The correct option is {L}.", "**Final answer: {L}**",
           "I'd go with {L} because {T}", "{L} is correct."],
    "zh": ["{L}", "（{L}）", "答案是 {L}", "正確答案為（{L}）", "選 {L}", "答案：{L}。{T}", "{T}",
           "選項{W}不對，因為{WT}不合理。所以答案是{L}。", "我選{L}", "答案是{S}"],
    "id": ["{L}", "Jawaban: {L}", "Jawabannya adalah {L}.", "Jawaban yang benar adalah {L}. {T}", "{T}",
           "Pilihan {W} kurang tepat karena {WT}. Jadi jawabannya {L}.", "Saya pilih {L}"],
    "vi": ["{L}", "Đáp án là {L}.", "Chọn {L}", "Đáp án đúng: {L}. {T}", "{T}",
           "Phương án {W} sai vì {WT}. Vậy đáp án là {L}.", "Câu trả lời: ({L})"],
    "th": ["{L}", "คำตอบคือ ข้อ {L}", "ตอบ {TH}.", "คำตอบที่ถูกต้องคือ {L} {T}", "{T}",
           "ข้อ {W} ไม่ถูกต้องเพราะ{WT} ดังนั้นคำตอบคือ {L}", "ตอบ ข้อ {TH}"],
    "pt": ["{L}", "A resposta correta é a letra {L}.", "Alternativa {L}", "Resposta: {L}. {T}", "{T}",
           "A alternativa {W} está incorreta, pois {WT}. Portanto, a resposta é a {L}.", "Letra {L}."],
    "ms": ["{L}", "Jawapannya ialah {L}.", "Jawapan: {L}", "Jawapan yang betul ialah {L}. {T}", "{T}",
           "Pilihan {W} tidak tepat kerana {WT}. Jadi jawapannya ialah {L}.", "Saya pilih {L}"],
}


def load_items(data: Path, limit: int | None) -> dict[str, list[tuple[list[str], int]]]:
    """Per language: (option texts, gold index) items. XCOPA id/th/vi/zh; TMMLU + TTQA zh-TW;
    en / pt / ms reuse the Indonesian XCOPA items with their own templates (none of those sets exist)."""
    items: dict[str, list[tuple[list[str], int]]] = {}
    for lang in ("id", "th", "vi", "zh"):
        rows = [json.loads(line) for line in (data / "mc_xcopa" / f"test.{lang}.jsonl").read_text().splitlines()
                if line.strip()]
        items[f"xcopa-{lang}"] = [([r["choice1"], r["choice2"]], int(r["label"])) for r in rows]
    tw = []
    for line in (data / "mc_tmmlu_zh_tw" / "tmmlu.jsonl").read_text().splitlines():
        r = json.loads(line)
        parts = re.split(r"\(([A-D])\)", r["question"])
        if len(parts) == 9 and [parts[i] for i in (1, 3, 5, 7)] == list("ABCD") and r["answer"] in "ABCD":
            tw.append(([parts[i].strip(" 。") for i in (2, 4, 6, 8)], "ABCD".index(r["answer"])))
    ttqa = json.loads((data / "mc_tmmlu_zh_tw" / "TTQA_mc.json").read_text())
    tw += [(q["choices"], int(q["answer"])) for q in ttqa.values()]
    items["tmmlu-zh-TW"] = tw
    for lang in ("en", "pt", "ms"):
        items[f"xcopa-id-as-{lang}"] = items["xcopa-id"]
    return {k: v[:limit] if limit else v for k, v in items.items()}


def synth(rng: random.Random, lang: str, options: list[str], gold: int) -> str:
    from compass.gym.mcq_choice.keywords import STEM_LABELS, THAI_LABELS
    wrong = rng.choice([i for i in range(len(options)) if i != gold])
    tpl = rng.choice(TEMPLATES[lang])
    return tpl.format(L=LETTERS[gold], W=LETTERS[wrong], T=options[gold], WT=options[wrong],
                      TH=THAI_LABELS[gold], S=STEM_LABELS[gold])


def score_synthetic(items: dict, seed: int = 0) -> list[dict]:
    from compass.gym.mcq_choice.extract import predict
    rng = random.Random(seed)
    template_lang = {"xcopa-id": "id", "xcopa-th": "th", "xcopa-vi": "vi", "xcopa-zh": "zh", "tmmlu-zh-TW": "zh",
                     "xcopa-id-as-en": "en", "xcopa-id-as-pt": "pt", "xcopa-id-as-ms": "ms"}
    out = []
    for name, rows in items.items():
        lang = template_lang[name]
        ok, misses = 0, []
        t0 = time.perf_counter()
        for options, gold in rows:
            resp = synth(rng, lang, options, gold)
            got = predict(resp, options)
            if got == LETTERS[gold]:
                ok += 1
            elif len(misses) < 3:
                misses.append((resp[:120], got, LETTERS[gold]))
        out.append({"set": name, "lang": {"zh": "zh-TW" if "TW" in name else "zh"}.get(lang, lang), "n": len(rows),
                    "accuracy": ok / len(rows) if rows else 0.0, "seconds": time.perf_counter() - t0,
                    "misses": misses})
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench gym-mcq")
    ap.add_argument("--data", type=Path, default=None, help="reference data folder (default <repo>/../shared/data)")
    ap.add_argument("--limit", type=int, default=None, help="at most N responses per report and items per set")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=40, help="disagreements to list")
    args = ap.parse_args(argv)
    data = args.data or default_data()
    needed = [data / "mc_enem_pt" / "model_responses_2022", data / "mc_xcopa", data / "mc_tmmlu_zh_tw"]
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        print(f"error: reference data missing: {', '.join(missing)} (pass --data DIR holding mc_enem_pt, mc_xcopa, "
              f"mc_tmmlu_zh_tw)")
        return 2

    options, reports = load_enem(data)
    enem = score_enem(options, reports, args.limit)
    print("ENEM 2022 (pt): agreement with the authors' extracted letter; accuracy vs gold")
    print(f"{'report':<32} {'n':>5} {'agree':>8} {'ours':>8} {'theirs':>8}")
    for r in enem["reports"]:
        print(f"{r['report']:<32} {r['n']:>5} {r['agreement']:>8.4f} {r['ours_acc']:>8.4f} {r['theirs_acc']:>8.4f}")
    n = enem["n"]
    ours = sum(r["ours_acc"] * r["n"] for r in enem["reports"]) / n if n else 0.0
    theirs = sum(r["theirs_acc"] * r["n"] for r in enem["reports"]) / n if n else 0.0
    print(f"{'all':<32} {n:>5} {enem['agreement']:>8.4f} {ours:>8.4f} {theirs:>8.4f}   "
          f"({n / max(enem['seconds'], 1e-9):.0f} responses/s)")
    if enem["disagreements"]:
        print(f"\n{len(enem['disagreements'])} disagreements (ours / theirs / gold, end of response):")
        for d in enem["disagreements"][:args.show]:
            print(f"  {d['report']:<30} {d['id']:<14} {d['ours']!s:>4} {d['theirs']!s:>5} {d['gold']!s:>4}  "
                  f"...{d['tail'][-90:]}")

    synthetic = score_synthetic(load_items(data, args.limit), args.seed)
    print("\nSelf-check on synthetic responses (templates written from the gold; not model outputs)")
    print(f"{'set':<22} {'lang':<6} {'n':>6} {'accuracy':>9} {'resp/s':>9}")
    for s in synthetic:
        print(f"{s['set']:<22} {s['lang']:<6} {s['n']:>6} {s['accuracy']:>9.4f} "
              f"{s['n'] / max(s['seconds'], 1e-9):>9.0f}")
        for resp, got, want in s["misses"]:
            print(f"    miss: {resp!r} -> {got} (want {want})")
    by_lang: dict[str, list[float]] = {}
    for s in synthetic:
        by_lang.setdefault(s["lang"], []).append(s["accuracy"] * s["n"])
        by_lang.setdefault(s["lang"] + "#n", []).append(s["n"])
    per_lang = {k: round(sum(v) / max(sum(by_lang[k + "#n"]), 1), 4) for k, v in by_lang.items()
                if not k.endswith("#n")}
    print(json.dumps({"bench": "gym-mcq", "agreement": round(enem["agreement"], 4), "enem_n": n,
                      "enem_ours_accuracy": round(ours, 4), "enem_theirs_accuracy": round(theirs, 4),
                      "responses_per_s": round(n / max(enem["seconds"], 1e-9)),
                      "synthetic_accuracy": per_lang}))
    return 0
