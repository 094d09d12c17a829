"""IFEval verifier benchmark: agreement with IFEval's reference labels, unit cases, speed, and lm-eval as a peer.

Data (``--data``, default ``<repo>/../shared/data/ifeval``): IFEval's 541
prompts, the 541 GPT-4 responses Google shipped with it, the official strict
and loose evaluation of 540 of them (labels per instruction), and the
labelled cases of the reference checkers' unit tests.

- agreement: the fraction of instructions (instruction level) and of prompts
  (prompt level: "follows all" matches) where our verdict equals the
  reference label, strict and loose;
- unit cases: checker unit tests whose checker is one of IFEval's 25
  instructions (the file also tests four unregistered checkers; skipped);
- the peer: lm-eval 0.4.13's IFEval checks (``lm_eval.tasks.ifeval``) on the
  same rows in the same run. Its sentence counter and its capital-word
  counter need NLTK's punkt data, which is not installed here and is never
  downloaded by this bench (``nltk.download`` is disabled while lm-eval is
  imported, since its import tries); an instruction it cannot check
  (LookupError) counts as a peer disagreement and is reported;
- speed: rows per second of both on the same work (every response, both
  modes, the punkt-dependent instructions left out for both so neither is
  timed on work the other skips), best of ``--repeat``; langdetect is seeded
  (0) for both, our language cache cleared before each repetition.

Ends with one JSON line; ``agreement_strict`` is our instruction-level strict agreement.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import sys
import time
from collections import Counter
from pathlib import Path

DEFAULT_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "ifeval"
FILES = ("input_data.jsonl", "input_response_data_gpt4_20231107_145030.jsonl", "eval_results_strict_reference.jsonl",
         "eval_results_loose_reference.jsonl", "instructions_unit_test_cases.jsonl")
# Checker class of the reference unit tests -> its instruction id (the tests name a few ids loosely).
CHECKER_IDS = {
    "CapitalWordFrequencyChecker": "change_case:capital_word_frequency",
    "CapitalLettersEnglishChecker": "change_case:english_capital",
    "LowercaseLettersEnglishChecker": "change_case:english_lowercase",
    "RepeatPromptThenAnswer": "combination:repeat_prompt",
    "TwoResponsesChecker": "combination:two_responses",
    "PlaceholderChecker": "detectable_content:number_placeholders",
    "PostscriptChecker": "detectable_content:postscript",
    "ConstrainedResponseChecker": "detectable_format:constrained_response",
    "SectionChecker": "detectable_format:multiple_sections",
    "BulletListChecker": "detectable_format:number_bullet_lists",
    "HighlightSectionChecker": "detectable_format:number_highlighted_sections",
    "TitleChecker": "detectable_format:title",
    "KeywordChecker": "keywords:existence",
    "ForbiddenWords": "keywords:forbidden_words",
    "KeywordFrequencyChecker": "keywords:frequency",
    "LetterFrequencyChecker": "keywords:letter_frequency",
    "ResponseLanguageChecker": "language:response_language",
    "ParagraphFirstWordCheck": "length_constraints:nth_paragraph_first_word",
    "ParagraphChecker": "length_constraints:number_paragraphs",
    "NumberOfSentences": "length_constraints:number_sentences",
    "NumberOfWords": "length_constraints:number_words",
    "CommaChecker": "punctuation:no_comma",
    "EndChecker": "startend:end_checker",
    "QuotationChecker": "startend:quotation",
}
# What the peer cannot check without NLTK's punkt data.
PUNKT_IDS = ("length_constraints:number_sentences", "change_case:capital_word_frequency")
MODES = ("strict", "loose")


def load(data: Path, limit: int | None = None) -> dict:
    """Rows (prompt, ids, kwargs, response, reference labels per mode) and the unit cases."""
    read = lambda name: [json.loads(line) for line in (data / name).read_text(encoding="utf-8").splitlines() if line]
    inputs = {r["prompt"]: r for r in read(FILES[0])}
    refs = {mode: {r["prompt"]: r["follow_instruction_list"] for r in read(name)}
            for mode, name in zip(MODES, FILES[2:4])}
    rows, unmatched = [], 0
    for r in read(FILES[1])[:limit]:
        inp = inputs.get(r["prompt"])
        if inp is None:   # one response answers an older wording of prompt 2785; the reference skips it too
            unmatched += 1
            continue
        rows.append({"key": inp["key"], "prompt": r["prompt"], "ids": inp["instruction_id_list"],
                     "kwargs": inp["kwargs"],
                     "response": r["response"], "ref": {m: refs[m].get(r["prompt"]) for m in MODES}})
    return {"rows": rows, "unit": read(FILES[4]), "unmatched": unmatched}


# -- ours --------------------------------------------------------------------------------
def run_ours(rows: list[dict], mode: str, skip: tuple[str, ...] = ()) -> list[list[bool]]:
    from compass.gym.instructions.ifeval import evaluate
    out = []
    for r in rows:
        keep = [i for i, iid in enumerate(r["ids"]) if iid not in skip]
        out.append(evaluate([r["ids"][i] for i in keep], [r["kwargs"][i] for i in keep], r["response"], mode))
    return out


def unit_cases(cases: list[dict]) -> tuple[int, int, int, list[dict]]:
    """(passed, applicable, skipped, failures) of the reference checkers' labelled unit cases."""
    from compass.gym.instructions.ifeval import RULES
    passed, failures, skipped = 0, [], 0
    for c in cases:
        iid = CHECKER_IDS.get(c["checker_class"])
        if iid is None:
            skipped += 1
            continue
        rule = RULES[iid]
        ok = rule.fn(c["response"], **rule.bind(c["kwargs"])) == c["expected_followed"]
        passed += ok
        if not ok:
            failures.append(c)
    return passed, len(cases) - skipped, skipped, failures


# -- the peer: lm-eval's IFEval ----------------------------------------------------------
def load_peer():
    """lm-eval's IFEval ``utils`` module and a note, or (None, why not)."""
    try:
        import nltk
    except ImportError:
        return None, "nltk is not installed"
    real_download = nltk.download
    nltk.download = lambda *a, **k: False   # its import fetches punkt: never from a bench (offline it may hang)
    try:
        with contextlib.redirect_stdout(io.StringIO()):   # and then says it did
            from lm_eval.tasks.ifeval import utils
    except Exception as e:   # lm-eval is a test extra; the bench runs without it
        return None, f"lm-eval's IFEval is not importable ({type(e).__name__}: {e})"
    finally:
        nltk.download = real_download
    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
        note = "punkt data present"
    except LookupError:
        note = "punkt data absent: sentence and capital-word counts fail (LookupError)"
    return utils, note


def run_peer(utils, rows: list[dict], mode: str, skip: tuple[str, ...] = ()) -> list[list[bool | None]]:
    """lm-eval's verdicts, one instruction at a time so that one LookupError loses only its instruction (None)."""
    test = utils.test_instruction_following_strict if mode == "strict" else utils.test_instruction_following_loose
    out = []
    for r in rows:
        verdicts = []
        for iid, kw in zip(r["ids"], r["kwargs"]):
            if iid in skip:
                continue
            ex = utils.InputExample(key=r["key"], instruction_id_list=[iid], prompt=r["prompt"], kwargs=[kw])
            try:
                verdicts.append(test(ex, r["response"]).follow_instruction_list[0])
            except LookupError:
                verdicts.append(None)
        out.append(verdicts)
    return out


def without(row: dict, skip: tuple[str, ...]) -> dict:
    """``row`` with the instructions ``skip`` names (and their kwargs and labels) left out."""
    keep = [i for i, iid in enumerate(row["ids"]) if iid not in skip]
    pick = lambda xs: None if xs is None else [xs[i] for i in keep]
    return dict(row, ids=pick(row["ids"]), kwargs=pick(row["kwargs"]), ref={m: pick(row["ref"][m]) for m in MODES})


# -- scoring -----------------------------------------------------------------------------
def agreement(rows: list[dict], verdicts: list[list], mode: str) -> dict:
    """Instruction- and prompt-level agreement with the reference labels, per-id disagreements, accuracies."""
    n = agree = prompts = prompts_agree = failed = 0
    per_id, acc = Counter(), Counter()
    for r, got in zip(rows, verdicts):
        ref = r["ref"][mode]
        if ref is None:
            continue
        prompts += 1
        prompts_agree += all(g is not None for g in got) and all(got) == all(ref)
        for iid, g, e in zip(r["ids"], got, ref):
            n += 1
            agree += g == e
            failed += g is None
            acc["ref"] += e
            acc["got"] += bool(g)
            if g != e:
                per_id[iid] += 1
    return {"instruction": agree / n, "prompt": prompts_agree / prompts, "instructions": n, "prompts": prompts,
            "failed": failed, "per_id": per_id, "ref_accuracy": acc["ref"] / n, "accuracy": acc["got"] / n}


def timed(fn, repeat: int, before=lambda: None) -> float:
    best = float("inf")
    for _ in range(repeat):
        before()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench gym-ifeval")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder with IFEval's files (see SOURCE.txt)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N responses (a smoke run)")
    ap.add_argument("--repeat", type=int, default=5, help="timing repetitions (best is reported)")
    ap.add_argument("--no-peer", action="store_true", help="skip lm-eval")
    args = ap.parse_args(argv)
    missing = [f for f in FILES if not (args.data / f).is_file()]
    if missing:
        print(f"error: IFEval data not found in {args.data} (missing {', '.join(missing)}); "
              f"pass --data DIR with IFEval's files", file=sys.stderr)
        return 2
    logging.getLogger("lm_eval").setLevel(logging.CRITICAL)   # it logs every undetectable language
    from compass.gym.instructions.text import _detect_cached, detect_language

    data = load(args.data, args.limit)
    rows = data["rows"]
    detect_language("warm up")           # load langdetect's profiles (and seed it) before any timing
    ours = {m: agreement(rows, run_ours(rows, m), m) for m in MODES}
    passed, applicable, skipped, failures = unit_cases(data["unit"])

    peer, peer_note = (None, "skipped (--no-peer)") if args.no_peer else load_peer()
    theirs, subset = {}, {}
    if peer:
        theirs = {m: agreement(rows, run_peer(peer, rows, m), m) for m in MODES}
        # the same comparison without the instructions the peer cannot check here
        sub_rows = [without(r, PUNKT_IDS) for r in rows]
        sub_rows = [r for r in sub_rows if r["ids"]]
        subset = {"ours": agreement(sub_rows, run_ours(sub_rows, "strict"), "strict"),
                  "peer": agreement(sub_rows, run_peer(peer, sub_rows, "strict"), "strict")}

    # speed: every response, both modes, without the punkt-dependent instructions (the peer's same work)
    both = lambda fn: [fn(rows, m, PUNKT_IDS) for m in MODES]
    t_ours = timed(lambda: both(run_ours), args.repeat, _detect_cached.cache_clear)
    t_ours_full = timed(lambda: [run_ours(rows, m) for m in MODES], args.repeat, _detect_cached.cache_clear)
    t_peer = timed(lambda: both(lambda r, m, s: run_peer(peer, r, m, s)), args.repeat) if peer else None
    rps = lambda t: len(rows) / t if t else 0.0

    print(f"IFEval: {len(rows)} GPT-4 responses ({data['unmatched']} without a matching prompt left out), "
          f"{ours['strict']['prompts']} with reference labels, "
          f"{ours['strict']['instructions']} instructions; peer lm-eval: {peer_note}")
    print(f"{'':<30}{'ours':>20}{'lm-eval':>20}")
    print(f"{'':<30}{'instr':>10}{'prompt':>10}{'instr':>10}{'prompt':>10}")
    for m in MODES:
        t = theirs.get(m)
        peer_cols = f"{t['instruction']:>10.4f}{t['prompt']:>10.4f}" if t else f"{'-':>10}{'-':>10}"
        print(f"{'agreement ' + m:<30}{ours[m]['instruction']:>10.4f}{ours[m]['prompt']:>10.4f}{peer_cols}")
    for m in MODES:
        t = theirs.get(m)
        print(f"{'GPT-4 accuracy ' + m:<30}{ours[m]['accuracy']:>10.4f}{'':>10}"
              f"{(format(t['accuracy'], '>10.4f') if t else format('-', '>10'))}{'':>10}"
              f"   reference {ours[m]['ref_accuracy']:.4f}")
    if subset:
        so, sp = subset["ours"], subset["peer"]
        print(f"{'agreement strict w/o punkt ids':<30}{so['instruction']:>10.4f}"
              f"{so['prompt']:>10.4f}{sp['instruction']:>10.4f}{sp['prompt']:>10.4f}"
              f"   ({subset['ours']['instructions']} instructions)")
        print(f"peer could not check {theirs['strict']['failed']} strict / {theirs['loose']['failed']} loose "
              f"instructions (LookupError: punkt); counted as disagreements above")
    print(f"unit cases: {passed}/{applicable} pass ({passed / applicable:.4f}); {skipped} cases of checkers outside "
          f"IFEval's 25 instructions skipped")
    for c in failures:
        print(f"  unit case failed: {c['checker_class']} {c['kwargs']} {c['response'][:60]!r}")
    print(f"rows/s, strict+loose, w/o punkt ids: ours {rps(t_ours):.1f}   lm-eval "
          f"{(format(rps(t_peer), '.1f') if t_peer else '-')}   speedup "
          f"{(format(t_peer / t_ours, '.2f') + 'x') if t_peer else '-'}   (ours, all ids: {rps(t_ours_full):.1f})")
    print("disagreements with the reference per instruction id (strict/loose):")
    ids = sorted(set().union(*(a["per_id"] for a in list(ours.values()) + list(theirs.values()))))
    for iid in ids:
        peer_part = f"   lm-eval {theirs['strict']['per_id'][iid]}/{theirs['loose']['per_id'][iid]}" if theirs else ""
        print(f"  {iid:<46} ours {ours['strict']['per_id'][iid]}/{ours['loose']['per_id'][iid]}{peer_part}")

    r4 = lambda x: None if x is None else round(x, 4)
    out = {"bench": "gym-ifeval", "agreement_strict": r4(ours["strict"]["instruction"]),
           "agreement_strict_prompt": r4(ours["strict"]["prompt"]),
           "agreement_loose": r4(ours["loose"]["instruction"]), "agreement_loose_prompt": r4(ours["loose"]["prompt"]),
           "instructions": ours["strict"]["instructions"], "prompts": ours["strict"]["prompts"],
           "unit_pass_rate": r4(passed / applicable), "unit_cases": applicable, "unit_cases_skipped": skipped,
           "rows_per_s": round(rps(t_ours), 1), "rows_per_s_all_ids": round(rps(t_ours_full), 1),
           "peer": "lm-eval 0.4.13" if peer else None,
           "peer_agreement_strict": r4(theirs["strict"]["instruction"]) if theirs else None,
           "peer_agreement_strict_prompt": r4(theirs["strict"]["prompt"]) if theirs else None,
           "peer_agreement_loose": r4(theirs["loose"]["instruction"]) if theirs else None,
           "peer_agreement_loose_prompt": r4(theirs["loose"]["prompt"]) if theirs else None,
           "peer_unchecked_strict": theirs["strict"]["failed"] if theirs else None,
           "agreement_strict_without_punkt_ids": r4(subset["ours"]["instruction"]) if subset else None,
           "peer_agreement_strict_without_punkt_ids": r4(subset["peer"]["instruction"]) if subset else None,
           "peer_rows_per_s": round(rps(t_peer), 1) if t_peer else None,
           "speedup": round(t_peer / t_ours, 2) if t_peer else None}
    print(json.dumps(out))
    return 0
