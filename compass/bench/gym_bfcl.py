"""BFCL verifier benchmark: our ``bfcl_ast`` (with type checks), ``bfcl_exec`` and ``bfcl_multi_turn``
against BFCL's own checkers, on BFCL's gold and on wrong calls planted in it.

Cases per row: the gold itself (first allowed value of each parameter for AST; the ground-truth calls
for exec and multi-turn), and planted wrong answers: AST - a described integer/float/boolean given as
text (a type error), a string value changed, a required parameter dropped; exec - a number argument
moved by one (a string one changed); multi-turn - the last call of the last turn with calls dropped,
one string argument changed, one turn's calls emptied. "agree" = our pass/fail equals BFCL's checker's
on the same case; "expected" = gold passes and a planted case fails. BFCL retired its executable
checker from its package in 2025: give its last ``executable_checker.py`` (``--exec-checker``) to compare
exec too (cases whose ground truth needs the network are left out of that comparison).

Data, never committed: ``--bfcl-eval DIR`` the unpacked ``bfcl-eval`` wheel (its data and checkers;
``pip download --no-deps bfcl-eval`` then unzip), ``--exec DIR`` BFCL v3's executable categories and
their reference functions (question files, ``possible_answer/``, a functions file given by
``--functions``). Ends with one JSON line.
"""
from __future__ import annotations

import argparse
import ast
import collections
import copy
import importlib
import json
import random
import sys
import time
import types
from pathlib import Path

AST_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple")
EXEC_CATEGORIES = ("exec_simple", "exec_multiple", "exec_parallel", "exec_parallel_multiple")


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _block(name: str, args: dict) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


# -- AST -------------------------------------------------------------------------------------------
def _first(v):
    """The first allowed value, with objects (and lists of objects) in BFCL's per-key form resolved."""
    if isinstance(v, dict) and v and all(isinstance(x, list) for x in v.values()):
        return {k: _first(x[0]) for k, x in v.items() if x and x[0] != ""}
    if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
        return [_first(x) for x in v]
    return v


def ast_cases(question: dict, answer: dict, rng: random.Random) -> list[tuple[str, list[dict]]]:
    """(case name, calls as [{name: {param: value}}]) - the gold, then each plant that applies."""
    props = {f["name"]: f.get("parameters", {}).get("properties", {}) for f in question["function"]}
    needed = {f["name"]: set(f.get("parameters", {}).get("required", [])) for f in question["function"]}
    # each parameter the ground truth requires, or the description does, at its first allowed value
    gold = [{n: {p: _first(next(x for x in v if x != "")) for p, v in params.items()
                 if any(x != "" for x in v) and ("" not in v or p in needed.get(n, ()))}}
            for g in answer["ground_truth"] for n, params in g.items()]
    cases = [("gold", gold)]
    typed = [(i, n, p) for i, c in enumerate(gold) for n, a in c.items() for p, v in a.items()
             if props.get(n, {}).get(p, {}).get("type") in ("integer", "float", "boolean") and not isinstance(v, str)]
    if typed:
        i, n, p = rng.choice(typed)
        bad = copy.deepcopy(gold)
        bad[i][n][p] = str(bad[i][n][p])
        cases.append(("type", bad))
    strings = [(i, n, p) for i, c in enumerate(gold) for n, a in c.items() for p, v in a.items() if isinstance(v, str)]
    if strings:
        i, n, p = rng.choice(strings)
        bad = copy.deepcopy(gold)
        bad[i][n][p] = bad[i][n][p] + " planted"
        cases.append(("value", bad))
    required = [(i, n, p) for i, c in enumerate(gold) for n, a in c.items() for p in a
                if "" not in answer["ground_truth"][i][n][p]]
    if required:
        i, n, p = rng.choice(required)
        bad = copy.deepcopy(gold)
        del bad[i][n][p]
        cases.append(("missing", bad))
    return cases


def run_ast(root: Path, limit: int | None, rng: random.Random, theirs: bool) -> list[dict]:
    from compass.gym.verifiers.bfcl_ast import check, descriptions, ground_truth
    if theirs:
        from bfcl_eval.constants.enums import Language
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    out = []
    for cat in AST_CATEGORIES:
        qs = _lines(root / "data" / f"BFCL_v4_{cat}.json")[:limit]
        answers = {a["id"]: a for a in _lines(root / "data" / "possible_answer" / f"BFCL_v4_{cat}.json")}
        for q in qs:
            a = answers[q["id"]]
            gold, described = ground_truth(a["ground_truth"]), descriptions(q["function"])
            for case, calls in ast_cases(q, a, rng):
                response = "".join(_block(n, args) for c in calls for n, args in c.items())
                ours = check(response, gold, described)
                row = {"set": "ast", "category": cat, "id": q["id"], "case": case, "ours": ours[0], "reason": ours[1]}
                if theirs:
                    row["theirs"] = bool(ast_checker(q["function"], calls, a["ground_truth"], Language.PYTHON,
                                                     cat, "compass")["valid"])
                out.append(row)
    return out


# -- exec ------------------------------------------------------------------------------------------
def _literal_call(text: str) -> tuple[str, dict] | None:
    """A ground-truth call as (name, keyword values), when its values are literals or arithmetic on them."""
    node = ast.parse(text, mode="eval").body
    try:
        args = {k.arg: eval(compile(ast.Expression(k.value), "<gt>", "eval"), {"__builtins__": {}})  # noqa: S307
                for k in node.keywords}
    except Exception:   # noqa: BLE001 - a value that names something: not a plain literal
        return None
    return (ast.unparse(node.func), args) if not node.args else None


def _nudge(args: dict, rng: random.Random) -> dict | None:
    keys = [k for k, v in args.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)]
    if not keys:
        return None
    k = rng.choice(keys)
    bad = dict(args)
    bad[k] = bad[k] + 1 if not isinstance(bad[k], str) else bad[k] + "x"
    return bad


def their_exec_checker(checker: Path, functions: Path):
    """BFCL's retired executable checker (its ``executable_checker.py``, from the gorilla repository before
    the categories were retired), loaded with stand-ins for the package modules it imports: its constants
    (the 0.2 real-time difference), its exception, and ``functions`` as the module of executable functions
    it runs calls in. Returns ``check(call_strings, expected_results, kinds, category) -> bool``."""
    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m
        return m
    for pkg in ("bfcl", "bfcl.constants", "bfcl.eval_checker", "bfcl.eval_checker.executable_eval"):
        module(pkg, __path__=[])
    module("bfcl.constants.eval_config", POSSIBLE_ANSWER_PATH="", REAL_TIME_MATCH_ALLOWED_DIFFERENCE=0.2)
    module("bfcl.eval_checker.executable_eval.custom_exception", NoAPIKeyError=type("NoAPIKeyError", (Exception,), {}))
    module("bfcl.utils", find_file_with_suffix=lambda *a: None, load_file=lambda *a: [])
    fns = module("bfcl.eval_checker.executable_eval.executable_python_function")
    exec(compile(functions.read_text(), str(functions), "exec"), fns.__dict__)   # noqa: S102 - their functions
    theirs = module("bfcl_exec_checker")
    exec(compile(checker.read_text(), str(checker), "exec"), theirs.__dict__)    # noqa: S102 - their checker

    def check(calls: list[str], gold: list[str], kinds: list[str], category: str) -> bool | None:
        try:
            expected = [eval(g, dict(fns.__dict__)) for g in gold]                  # noqa: S307
        except Exception:   # noqa: BLE001 - a ground truth that cannot run here: not compared
            return None
        expected = [list(e) if isinstance(e, tuple) else e for e in expected]
        verdict = theirs.executable_checker_non_rest(
            calls, {"execution_result": expected, "execution_result_type": kinds}, category)
        return bool(verdict["valid"])
    return check


def run_exec(root: Path, functions: Path, limit: int | None, rng: random.Random, theirs=None) -> list[dict]:
    from compass.gym.verifiers.bfcl_exec import answer_of, check
    out = []
    for cat in EXEC_CATEGORIES:
        answers = _lines(root / "possible_answer" / f"BFCL_v3_{cat}.json")[:limit]
        for a in answers:
            calls = [_literal_call(c) for c in a["ground_truth"]]
            if any(c is None for c in calls):
                continue
            gold, kinds = answer_of(a)
            cases = [("gold", calls)]
            i = rng.randrange(len(calls))
            nudged = _nudge(calls[i][1], rng)
            if nudged is not None and kinds[i] != "structural_match":
                cases.append(("value", calls[:i] + [(calls[i][0], nudged)] + calls[i + 1:]))
            for case, cs in cases:
                passed, reason = check("".join(_block(n, args) for n, args in cs), gold, kinds, str(functions), 10.0)
                row = {"set": "exec", "category": cat, "id": a["id"], "case": case, "ours": passed, "reason": reason}
                if theirs is not None and reason != "bad_gold":
                    calls = [f"{n}({', '.join(f'{k}={v!r}' for k, v in args.items())})" for n, args in cs]
                    verdict = theirs(calls, gold, kinds, cat)
                    if verdict is not None:
                        row["theirs"] = verdict
                out.append(row)
    return out


# -- multi-turn ------------------------------------------------------------------------------------
def _turn_strings(turn: list[tuple[str, dict]]) -> list[str]:
    return [f"{n}({', '.join(f'{k}={v!r}' for k, v in a.items())})" for n, a in turn]


def mt_cases(gt: list[list[str]], rng: random.Random) -> list[tuple[str, list[list[tuple[str, dict]]]]] | None:
    """Cases as per-turn (name, kwargs) calls; None when a ground-truth call has positional arguments."""
    turns = []
    for turn in gt:
        calls = []
        for c in turn:
            node = ast.parse(c, mode="eval").body
            if node.args:
                return None
            calls.append((ast.unparse(node.func), {k.arg: ast.literal_eval(k.value) for k in node.keywords}))
        turns.append(calls)
    cases = [("gold", turns)]
    busy = [t for t, calls in enumerate(turns) if calls]
    last = busy[-1]
    cases.append(("drop_last", [calls[:-1] if t == last else calls for t, calls in enumerate(turns)]))
    strings = [(t, i, k) for t, calls in enumerate(turns) for i, (_, a) in enumerate(calls)
               for k, v in a.items() if isinstance(v, str)]
    if strings:
        t, i, k = rng.choice(strings)
        bad = copy.deepcopy(turns)
        bad[t][i][1][k] = bad[t][i][1][k] + "_planted"
        cases.append(("value", bad))
    t = rng.choice(busy)
    cases.append(("empty_turn", [[] if u == t else calls for u, calls in enumerate(turns)]))
    return cases


def run_multi_turn(root: Path, limit: int | None, rng: random.Random, theirs: bool) -> list[dict]:
    from compass.gym.verifiers.bfcl_multi_turn import check
    if theirs:
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
    qs = _lines(root / "data" / "BFCL_v4_multi_turn_base.json")[:limit]
    answers = {a["id"]: a for a in _lines(root / "data" / "possible_answer" / "BFCL_v4_multi_turn_base.json")}
    spec = {"classes_dir": str(root / "eval_checker" / "multi_turn_eval" / "func_source_code")}
    out = []
    for n, q in enumerate(qs):
        gt = answers[q["id"]]["ground_truth"]
        cases = mt_cases(gt, rng)
        if cases is None:
            continue
        reference = {"ground_truth": gt, "initial_config": q["initial_config"],
                     "involved_classes": q["involved_classes"]}
        for case, turns in cases:
            response = json.dumps(["".join(_block(c, a) for c, a in turn) for turn in turns])
            ours = check(response, reference, spec)
            row = {"set": "multi_turn", "category": "multi_turn_base", "id": q["id"], "case": case,
                   "ours": ours[0], "reason": ours[1]}
            if theirs:
                decoded = [[_turn_strings(turn)] if turn else [] for turn in turns]
                entry = dict(q, id=f"{q['id']}-{case}-{n}")   # BFCL keeps instances by id: one id per case
                row["theirs"] = bool(multi_turn_checker(decoded, gt, entry, "multi_turn_base", "compass")["valid"])
            out.append(row)
    return out


def import_their_checkers() -> tuple[bool, str]:
    """(whether BFCL's AST and multi-turn checkers import, what stood in for what).

    Their checker imports ``bfcl_eval.constants.model_config`` only to ask whether a model's API renames
    dotted function names; that module imports every API client (anthropic, openai, ...). A stand-in
    answers "no renaming" for every model, which is what our calls (dotted names kept) need."""
    try:
        importlib.import_module("bfcl_eval.constants.model_config")
        note = ""
    except ImportError:
        stand_in = types.ModuleType("bfcl_eval.constants.model_config")
        stand_in.MODEL_CONFIG_MAPPING = collections.defaultdict(lambda: types.SimpleNamespace(underscore_to_dot=False))
        sys.modules["bfcl_eval.constants.model_config"] = stand_in
        note = "bfcl_eval.constants.model_config (its API clients are not installed): no model renames functions"
    try:
        for name in ("ast_eval.ast_checker", "multi_turn_eval.multi_turn_checker"):
            importlib.import_module("bfcl_eval.eval_checker." + name)
    except Exception as e:   # noqa: BLE001 - their package does not load here: ours alone, say why
        print(f"BFCL's checkers do not import here ({type(e).__name__}: {e}); ours only")
        return False, note
    return True, note


def summarize(rows: list[dict]) -> list[dict]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["set"], r["case"]), []).append(r)
    out = []
    for (s, case), rs in groups.items():
        expected = [r["ours"] == (case == "gold") for r in rs]
        row = {"set": s, "case": case, "n": len(rs), "ours_pass": sum(r["ours"] for r in rs),
               "expected": sum(expected) / len(rs)}
        both = [r for r in rs if "theirs" in r]
        if both:
            row["theirs_pass"] = sum(r["theirs"] for r in both)
            row["agree"] = sum(r["ours"] == r["theirs"] for r in both) / len(both)
        out.append(row)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench gym-bfcl")
    ap.add_argument("--bfcl-eval", type=Path, required=True,
                    help="the unpacked bfcl-eval wheel (the folder holding bfcl_eval/)")
    ap.add_argument("--exec", type=Path, default=None, help="BFCL v3 executable categories (question files, "
                    "possible_answer/); skipped when not given")
    ap.add_argument("--functions", type=Path, default=None, help="their reference functions file "
                    "(default <exec>/executable_python_function.py)")
    ap.add_argument("--exec-checker", type=Path, default=None, help="BFCL's retired executable_checker.py, "
                    "to compare with (its ground truth runs in this process, as BFCL ran it)")
    ap.add_argument("--limit", type=int, default=None, help="at most N rows per category")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=15, help="disagreements to list")
    args = ap.parse_args(argv)
    root = args.bfcl_eval / "bfcl_eval"
    if not (root / "data").is_dir():
        print(f"error: {root / 'data'} not found (pass --bfcl-eval, the folder holding bfcl_eval/)")
        return 2
    sys.path.insert(0, str(args.bfcl_eval))
    theirs, note = import_their_checkers()
    if theirs and note:
        print(f"stand-in: {note}")
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    rows = run_ast(root, args.limit, rng, theirs)
    t_ast = time.perf_counter() - t0
    if args.exec is not None:
        functions = args.functions or args.exec / "executable_python_function.py"
        their_exec = their_exec_checker(args.exec_checker, functions) if args.exec_checker else None
        rows += run_exec(args.exec, functions, args.limit, rng, their_exec)
    t_exec = time.perf_counter() - t0 - t_ast
    rows += run_multi_turn(root, args.limit, rng, theirs)
    t_mt = time.perf_counter() - t0 - t_ast - t_exec
    table = summarize(rows)
    print(f"{'set':<11} {'case':<11} {'n':>5} {'ours pass':>10} {'BFCL pass':>10} {'agree':>7} {'expected':>9}")
    for r in table:
        print(f"{r['set']:<11} {r['case']:<11} {r['n']:>5} {r['ours_pass']:>10} {r.get('theirs_pass', '-')!s:>10} "
              f"{(format(r['agree'], '.4f') if 'agree' in r else '-'):>7} {r['expected']:>9.4f}")
    bad_gold = sum(r["reason"] == "bad_gold" for r in rows if r["set"] == "exec")
    if bad_gold:
        print(f"exec: {bad_gold} cases where a ground-truth call fails offline (BFCL's REST-backed functions)")
    print(f"seconds: ast {t_ast:.1f}, exec {t_exec:.1f}, multi-turn {t_mt:.1f}")
    off = [r for r in rows if "theirs" in r and r["ours"] != r["theirs"]]
    if off:
        print(f"\n{len(off)} disagreements (ours / BFCL, our reason):")
        for r in off[:args.show]:
            print(f"  {r['set']:<10} {r['id']:<26} {r['case']:<10} {r['ours']!s:>5} {r['theirs']!s:>5}  {r['reason']}")
    compared = [r for r in rows if "theirs" in r]
    headline = {"bench": "gym-bfcl", "cases": len(rows),
                "agree_ast": _share([r for r in compared if r["set"] == "ast"]),
                "agree_multi_turn": _share([r for r in compared if r["set"] == "multi_turn"]),
                "agree_exec": _share([r for r in compared if r["set"] == "exec"]),
                "exec_expected": _expected([r for r in rows if r["set"] == "exec" and r["reason"] != "bad_gold"]),
                "exec_bad_gold": bad_gold}
    print(json.dumps(headline))
    return 0


def _share(rows: list[dict]) -> float | None:
    return round(sum(r["ours"] == r["theirs"] for r in rows) / len(rows), 4) if rows else None


def _expected(rows: list[dict]) -> float | None:
    return round(sum(r["ours"] == (r["case"] == "gold") for r in rows) / len(rows), 4) if rows else None
