"""Compass-Gym math verifier against independent references, and its speed against math-verify.

Reference sets (``<repo>/../shared/data``, or ``--data DIR``; never copied into the repo):

- ``gsm8k``: OpenAI's labelled GSM8K model solutions (4 per test question, ``is_correct``
  by OpenAI) against the test set's ``#### N`` answers: plain-number pairs.
- ``math500``: every MATH-500 answer against itself in several LaTeX renderings
  (``\\dfrac``/``\\frac``, ``\\left``/``\\right``, ``$..$``, ``\\boxed{}`` in a sentence,
  spacing, ``a/b``, units, thousands separators, degrees), all expected equal, plus one
  perturbed wrong answer per problem, expected unequal.
- ``mixed``: Math-Verify's mixed-number cases (``4 4/9``, ``11 6/6``, ``28%``).
- ``hendrycks``: the MATH paper's ``is_equiv`` unit cases.
- ``forms``: our own labelled cases (``compass/bench/data/math_forms.jsonl``, in the repository, so this
  set needs no ``--data``), grouped by the form of the answer: decimal commas, running text and other
  languages, chains and labelled answers, sets/tuples/intervals, inequalities, matrices, numeric golds.
  Agreement is also reported per kind. A numeric gold goes through our row form (which writes it as
  text); math-verify gets that same text.
- ``forms-heldout``: the same kinds plus plain answers, labelled by a writer who saw neither the verifier's
  code nor its cases (``compass/bench/data/math_forms_heldout.jsonl``): the check the code was not built
  against.
- ``real-tune`` / ``real-heldout``: real model outputs (whole responses of public models on MATH, GSM8K and
  the like, collected from public repositories with their sources and licences, each label checked by
  hand; ``--real FILE``, default ``<repo>/../realmath/real_outputs.jsonl``, never copied into the repo:
  docs/benchmarks.md says how it was built). Split in two by a hash of each row's id: the verifier may be
  changed after reading ``real-tune``'s disagreements, never ``real-heldout``'s, so the latter stays a
  figure the code was not tuned to. Agreement is also reported per source.

Agreement is the share of pairs where the verdict equals the reference label. math-verify
gets each gold as ``$gold$`` (its LaTeX extraction needs delimiters); responses are passed as
they are, except the two bare answers of a hendrycks case, which are both wrapped. The
``math500-delim`` row is the math500 pairs whose response has ``$..$`` or ``\\boxed``. Speed is
pairs per second on the same pairs in the same run, both verifiers cold: before every
pair, math-verify's parse caches (``parser.parse_latex_cached``, ``parser.parse_expr_cached``,
``parser.extract_latex``, all ``functools.lru_cache``) and ours (``compass.gym.math_answers.parse.parse_answer``)
are cleared, so neither wins by memoising repeated gold answers. math-verify's compiled-regex
caches (``lazy_*_regex``) are kept, as ours are compiled once at import.

``speedup_vs_math_verify`` in the JSON line is the smaller of the two speedups (plain
numbers on gsm8k, LaTeX on math500).
"""
from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO.parent / "shared" / "data"
# the labelled answer-form sets: our own cases (written with the verifier), and a held-out set written
# blind to the verifier's code and cases, so its agreement is not one the code was tuned to
FORMS = {"forms": Path(__file__).resolve().parent / "data" / "math_forms.jsonl",
         "forms-heldout": Path(__file__).resolve().parent / "data" / "math_forms_heldout.jsonl"}
GSM8K_MODELS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")
DEFAULT_REAL = REPO.parent / "realmath" / "real_outputs.jsonl"
_real_path = [DEFAULT_REAL]         # --real sets it


# -- reference pairs: (response, gold, expected) ---------------------------------------------------
def _jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def gsm8k_pairs(data: Path, limit: int | None = None) -> list[tuple[str, str, bool]]:
    labelled = _jsonl(data / "gsm8k" / "example_model_solutions_labeled.jsonl")
    tests = _jsonl(data / "gsm8k" / "test.jsonl")
    gold_of = {t["question"]: t["answer"].rsplit("####", 1)[1].strip() for t in tests}
    pairs = []
    for row in labelled:
        gold = gold_of[row["question"]]
        for model in GSM8K_MODELS:
            pairs.append((row[model]["solution"], gold, bool(row[model]["is_correct"])))
    return pairs[:limit] if limit else pairs


def _balanced_swap(gold: str) -> str | None:
    """gold with \\left/\\right added to every bracket, when it has none and they balance."""
    if "\\left" in gold or "\\begin" in gold or "\\text" in gold:
        return None
    opens, closes = re.findall(r"(?<!\\)[(\[]", gold), re.findall(r"(?<!\\)[)\]]", gold)
    if not opens or len(opens) != len(closes):
        return None
    s = re.sub(r"(?<!\\)([(\[])", r"\\left\1", gold)
    return re.sub(r"(?<!\\)([)\]])", r"\\right\1", s)


def _compact(gold: str) -> str:
    """Spaces removed except where they end a command name (\\cot x)."""
    s = re.sub(r"\s+", " ", gold.strip())
    return re.sub(r"(?<=[^a-zA-Z]) | (?=[^a-zA-Z])", "", s)


_PLAIN_NUM = re.compile(r"-?(?:\d+|\d{1,3}(?:,\\!\s?\d{3})+)(?:\.\d+)?|-?\.\d+")


def renderings(gold: str) -> list[str]:
    """Equivalent ways to write ``gold``, as a model might (the gold itself included)."""
    forms = [gold, f"${gold}$", f"The final answer is $\\boxed{{{gold}}}$.",
             f"Therefore, the answer is ${gold}$.", f"<think>Try 1, 2, 3.</think>\n\\boxed{{{gold}}}",
             gold.replace("\\dfrac", "\\frac").replace("\\frac", "\\dfrac"), gold.replace("\\dfrac", "\\frac"),
             re.sub(r"\\left|\\right", "", gold), _compact(gold),
             re.sub(r"\s*([+=])\s*", r" \1 ", re.sub(r",(?!\\!|\d{3}(?!\d))\s*", ", ", gold))]
    swapped = _balanced_swap(gold)
    if swapped:
        forms.append(swapped)
    slash = re.sub(r"(\d?)\s*\\d?frac\{(\d+)\}\{(\d+)\}(?![a-zA-Z\\(])",
                   lambda m: (m.group(1) + " " if m.group(1) else "") + f"{m.group(2)}/{m.group(3)}", gold)
    forms.append(slash)
    forms.append(re.sub(r"\\sqrt\{(\d)\}", r"\\sqrt\1", gold))
    if "^\\circ" in gold:
        forms += [gold.replace("^\\circ", ""), gold.replace("^\\circ", "^{\\circ}"),
                  gold.replace("^\\circ", " degrees")]
    if _PLAIN_NUM.fullmatch(gold.replace("\\$", "")):
        plain = re.sub(r",\\!\s?", "", gold.replace("\\$", ""))
        forms += [plain, f"{plain}\\text{{ units}}", f"{plain} cm", f"\\${plain}"]
        if re.fullmatch(r"-?\d{4,}", plain):
            forms.append(f"{int(plain):,}")
    if re.search(r"\\(?:text|mbox)\{", gold):
        stripped = re.sub(r"\s*\\(?:text|mbox)\{\s*([^{}]*?)\s*\}(\^\d)?", r" \1", gold).strip()
        forms.append(stripped)
        if re.match(r"[\d\\-]", gold):          # a quantity with a unit: the bare quantity
            forms.append(re.sub(r"\s*\\(?:text|mbox)\{[^{}]*\}(\^\d)?", "", gold).strip())
    out = []
    for f in forms:
        if f and f not in out:
            out.append(f)
    return out


def perturbed(gold: str) -> str:
    """A wrong answer close to ``gold``: its last integer plus one, else a changed sign or word."""
    if _PLAIN_NUM.fullmatch(gold) and "." not in gold:       # 10,\!080 -> 10081
        return str(int(re.sub(r"[^\d-]", "", gold)) + 1)
    m = None
    for m in re.finditer(r"(?<![\d^_])(?<![_^]\{)\d+", gold):     # not an exponent or a base (cm^2, 204_5)
        pass
    if m is not None:
        return gold[:m.start()] + str(int(m.group(0)) + 1) + gold[m.end():]
    choice = re.fullmatch(r"\\text\{\(([A-E])\)\}", gold)
    if choice:
        return f"\\text{{({'B' if choice.group(1) != 'B' else 'C'})}}"
    if gold.startswith("\\text{"):
        return "\\text{none of these}"
    if " - " in gold:
        return gold.replace(" - ", " + ", 1)
    return gold + " + 1"


def math500_pairs(data: Path, limit: int | None = None) -> list[tuple[str, str, bool]]:
    rows = _jsonl(data / "math500" / "test.jsonl")
    rows = rows[:limit] if limit else rows
    pairs = []
    for row in rows:
        gold = row["answer"]
        pairs += [(form, gold, True) for form in renderings(gold)]
        pairs.append((f"The final answer is $\\boxed{{{perturbed(gold)}}}$.", gold, False))
    return pairs


def math500_delimited_pairs(data: Path, limit: int | None = None) -> list[tuple[str, str, bool]]:
    """The math500 pairs whose response marks its math ($..$ or \\boxed): math-verify needs that."""
    return [p for p in math500_pairs(data, limit) if "$" in p[0].replace("\\$", "") or "\\boxed" in p[0]]


def mixed_pairs(data: Path, limit: int | None = None) -> list[tuple[str, str, bool]]:
    rows = _jsonl(data / "math_verify_mixed_numbers" / "math_verify_main_mixed_number_cases.jsonl")
    pairs = [(r["pred"], r["gold"], bool(r["expected"])) for r in rows]
    return pairs[:limit] if limit else pairs


def hendrycks_pairs(data: Path, limit: int | None = None) -> list[tuple[str, str, bool]]:
    rows = _jsonl(data / "math_hendrycks_equivalence_tests" / "math_equivalence_test_cases.jsonl")
    pairs = [(r["b"], r["a"], bool(r["expected_equivalent"])) for r in rows]
    return pairs[:limit] if limit else pairs


def forms_rows(name: str = "forms", limit: int | None = None) -> list[dict]:
    """The labelled answer-form cases of set ``name``: ``kind``, ``gold`` (text or a number), ``pred``,
    ``expected``."""
    rows = _jsonl(FORMS[name])
    return rows[:limit] if limit else rows


def forms_pairs(data: Path, limit: int | None = None, name: str = "forms") -> list[tuple[str, str | int | float, bool]]:
    return [(r["pred"], r["gold"], bool(r["expected"])) for r in forms_rows(name, limit)]


def heldout_pairs(data: Path, limit: int | None = None) -> list[tuple[str, str | int | float, bool]]:
    return forms_pairs(data, limit, "forms-heldout")


def real_part(row_id: str) -> str:
    """``tune`` or ``heldout``: a fixed split of the real outputs by a hash of the row's id."""
    import hashlib
    return "heldout" if hashlib.sha256(row_id.encode()).digest()[0] % 2 else "tune"


def real_rows(part: str, limit: int | None = None) -> list[dict]:
    """The real outputs of one part of the split (rows with ``id``, ``source``, ``gold``, ``output``,
    ``label``)."""
    rows = [r for r in _jsonl(_real_path[0]) if real_part(str(r["id"])) == part]
    return rows[:limit] if limit else rows


def real_pairs(part: str):
    def load(data: Path, limit: int | None = None) -> list[tuple[str, str, bool]]:
        return [(r["output"], str(r["gold"]), bool(r["label"])) for r in real_rows(part, limit)]
    return load


# set name -> (loader, how math-verify sees the gold and the response)
SETS = {
    "gsm8k": (gsm8k_pairs, "plain"),
    "math500": (math500_pairs, "latex"),
    "math500-delim": (math500_delimited_pairs, "latex"),
    "mixed": (mixed_pairs, "expr"),
    "hendrycks": (hendrycks_pairs, "latex-both"),
    "forms": (forms_pairs, "latex"),
    "forms-heldout": (heldout_pairs, "latex"),
    "real-tune": (real_pairs("tune"), "latex"),
    "real-heldout": (real_pairs("heldout"), "latex"),
}
REAL = ("real-tune", "real-heldout")
NEEDS_DATA = {"gsm8k", "math500", "math500-delim", "mixed", "hendrycks"}     # forms ships with the repo


# -- the two verifiers ------------------------------------------------------------------------------
def run_ours(pairs) -> tuple[list[bool], float]:
    from compass.gym.math_answers.equal import math_equal
    from compass.gym.math_answers.parse import parse_answer
    from compass.gym.rows import get_scorer, score_fields
    get_scorer("math")          # loads the verifier registry once, outside the timing (imports are not scoring)
    verdicts = []
    t0 = time.perf_counter()
    for response, gold, _ in pairs:
        parse_answer.cache_clear()
        if isinstance(gold, str):
            verdicts.append(math_equal(response, gold))
        else:      # a numeric gold: the row form writes it as text (the spec form takes text only)
            verdicts.append(bool(score_fields("math", {"response": response, "gold": gold}).get("correct")))
    return verdicts, time.perf_counter() - t0


def _gold_text(gold) -> str:
    from compass.gym.verifiers.math import number_as_text
    return gold if isinstance(gold, str) else number_as_text(gold)


def run_math_verify(pairs, mode: str) -> tuple[list[bool], float]:
    from math_verify import ExprExtractionConfig, parse, verify
    from math_verify import parser as mv_parser
    caches = (mv_parser.parse_latex_cached, mv_parser.parse_expr_cached, mv_parser.extract_latex)
    expr_only = [ExprExtractionConfig()]
    verdicts = []
    t0 = time.perf_counter()
    for response, gold, _ in pairs:
        gold = _gold_text(gold)
        for cache in caches:
            cache.cache_clear()
        try:
            if mode == "expr":      # Math-Verify's own mixed-number tests use expression extraction only
                ok = verify(parse(gold, expr_only), parse(response, expr_only))
            elif mode == "latex":   # a bare LaTeX gold is wrapped in $..$, as math-verify expects
                ok = verify(parse(f"${gold}$"), parse(response))
            elif mode == "latex-both":   # two bare answers (is_equiv cases): both wrapped
                ok = verify(parse(f"${gold}$"), parse(f"${response}$"))
            else:
                ok = verify(parse(gold), parse(response))
        except Exception:
            ok = False
        verdicts.append(bool(ok))
    return verdicts, time.perf_counter() - t0


def evaluate(name: str, pairs, with_math_verify: bool = True) -> dict:
    mode = SETS[name][1]
    ours, t_ours = run_ours(pairs)
    labels = [p[2] for p in pairs]
    res = {"set": name, "n": len(pairs), "ours_agreement": _agreement(ours, labels),
           "ours_pairs_per_s": len(pairs) / max(t_ours, 1e-9), "ours": ours}
    if with_math_verify:
        mv, t_mv = run_math_verify(pairs, mode)
        res.update(mv_agreement=_agreement(mv, labels), mv_pairs_per_s=len(pairs) / max(t_mv, 1e-9), mv=mv)
        res["speedup"] = res["ours_pairs_per_s"] / res["mv_pairs_per_s"]
    return res


def forms_by_kind(rows: list[dict], res: dict) -> dict:
    """Agreement of both verifiers with the labels, per kind of answer form (in the file's order)."""
    out: dict = {}
    for row, ours, mv in zip(rows, res["ours"], res["mv"]):
        k = out.setdefault(row["kind"], {"n": 0, "ours": 0, "mv": 0})
        k["n"] += 1
        k["ours"] += ours == bool(row["expected"])
        k["mv"] += mv == bool(row["expected"])
    return {kind: {"n": k["n"], "ours_agreement": round(k["ours"] / k["n"], 4),
                   "math_verify_agreement": round(k["mv"] / k["n"], 4)} for kind, k in out.items()}


def real_by_source(rows: list[dict], res: dict) -> dict:
    """Agreement of both verifiers with the labels per source repository (``owner/name``)."""
    out: dict = {}
    for row, ours, mv in zip(rows, res["ours"], res["mv"]):
        k = out.setdefault(str(row["source"]).split()[0].split(":")[0].rstrip("/"), {"n": 0, "ours": 0, "mv": 0})
        k["n"] += 1
        k["ours"] += ours == bool(row["label"])
        k["mv"] += mv == bool(row["label"])
    return {src: {"n": k["n"], "ours_agreement": round(k["ours"] / k["n"], 4),
                  "math_verify_agreement": round(k["mv"] / k["n"], 4)} for src, k in sorted(out.items())}


def _agreement(verdicts, labels) -> float:
    return sum(v == lab for v, lab in zip(verdicts, labels)) / max(len(labels), 1)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench gym-math")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="reference data directory (default: %(default)s)")
    ap.add_argument("--limit", type=int, default=None, help="use the first N items of each set (quick runs)")
    ap.add_argument("--sets", default=None, help="comma-separated subset of: " + ", ".join(SETS) +
                    " (default: all; the real sets only where --real exists)")
    ap.add_argument("--real", type=Path, default=DEFAULT_REAL, help="real model outputs, JSONL with id, source, "
                    "gold, output, label (default: %(default)s)")
    ap.add_argument("--show", type=int, default=0, help="print up to N disagreements per set")
    args = ap.parse_args(argv)
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    _real_path[0] = args.real
    default = [n for n in SETS if n not in REAL or args.real.is_file()]
    names = [s.strip() for s in (args.sets or ",".join(default)).split(",") if s.strip()]
    unknown = [s for s in names if s not in SETS]
    if unknown:
        print(f"error: unknown set(s) {', '.join(unknown)}; known: {', '.join(SETS)}", file=sys.stderr)
        return 2
    if NEEDS_DATA & set(names) and not args.data.is_dir():
        print(f"error: reference data directory {args.data} is missing; pass --data DIR "
              f"(it holds gsm8k/, math500/, math_verify_mixed_numbers/, math_hendrycks_equivalence_tests/)",
              file=sys.stderr)
        return 2
    from compass.gym.math_answers import sympy_worker

    results = {}
    for name in names:
        try:
            pairs = SETS[name][0](args.data, args.limit)
        except FileNotFoundError as e:
            hint = " (pass --real FILE)" if name in REAL else ""
            print(f"error: reference set '{name}' is missing: {e}{hint}", file=sys.stderr)
            return 2
        results[name] = res = evaluate(name, pairs)
        if args.show:
            shown = 0
            for (resp, gold, lab), o, m in zip(pairs, res["ours"], res["mv"]):
                if (o != lab or m != lab) and shown < args.show:
                    shown += 1
                    print(f"  [{name}] label={lab} ours={o} math-verify={m} gold={gold!r} "
                          f"response=...{resp[-90:]!r}")

    print(f"{'set':<14} {'n':>6} {'ours agree':>11} {'m-v agree':>10} {'ours pairs/s':>13} "
          f"{'m-v pairs/s':>12} {'speedup':>8}")
    for name, r in results.items():
        print(f"{name:<14} {r['n']:>6} {r['ours_agreement']:>11.4f} {r['mv_agreement']:>10.4f} "
              f"{r['ours_pairs_per_s']:>13.0f} {r['mv_pairs_per_s']:>12.0f} {r['speedup']:>7.1f}x")
    by_kind = {name: forms_by_kind(forms_rows(name, args.limit), results[name]) for name in FORMS if name in results}
    for name, kinds in by_kind.items():
        print(f"\n{name + ': kind':<28} {'n':>4} {'ours agree':>11} {'m-v agree':>10}")
        for kind, k in kinds.items():
            print(f"{kind:<28} {k['n']:>4} {k['ours_agreement']:>11.4f} {k['math_verify_agreement']:>10.4f}")
    by_source = {name: real_by_source(real_rows(name.split("-")[1], args.limit), results[name])
                 for name in REAL if name in results}
    for name, sources in by_source.items():
        print(f"\n{name + ': source':<48} {'n':>4} {'ours agree':>11} {'m-v agree':>10}")
        for source, k in sources.items():
            print(f"{source[:48]:<48} {k['n']:>4} {k['ours_agreement']:>11.4f} {k['math_verify_agreement']:>10.4f}")
    print(f"symbolic (sympy) fallbacks: {sympy_worker.calls['symbolic']}, timed out: {sympy_worker.calls['timeouts']}")
    speedups = {k: results[k]["speedup"] for k in ("gsm8k", "math500") if k in results}
    out = {"bench": "gym-math",
           "speedup_vs_math_verify": round(min(speedups.values()), 2) if speedups else None,
           "speedup_plain_gsm8k": round(speedups["gsm8k"], 2) if "gsm8k" in speedups else None,
           "speedup_latex_math500": round(speedups["math500"], 2) if "math500" in speedups else None,
           "agreement": round(results["gsm8k"]["ours_agreement"], 4) if "gsm8k" in results else None,
           "limit": args.limit,
           "sets": {k: {"n": r["n"], "ours_agreement": round(r["ours_agreement"], 4),
                        "math_verify_agreement": round(r["mv_agreement"], 4),
                        "ours_pairs_per_s": round(r["ours_pairs_per_s"], 1),
                        "math_verify_pairs_per_s": round(r["mv_pairs_per_s"], 1),
                        "speedup": round(r["speedup"], 2)} for k, r in results.items()}}
    for name, kinds in by_kind.items():
        out[f"{name.replace('-', '_')}_by_kind"] = kinds
    for name, sources in by_source.items():
        out[f"{name.replace('-', '_')}_by_source"] = sources
    print(json.dumps(out))
    return 0
