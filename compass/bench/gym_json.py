"""JSON-schema verifier benchmark: does ``valid`` agree with the official JSON Schema conformance suite?

The suite (JSON-Schema-Test-Suite, MIT) ships inside the ``jsonschema`` sdist under ``json/``.
``--suite DIR`` names a copy (the suite's root, the sdist's ``json/``, or the ``draft2020-12`` folder
itself); by default it is read from ``~/.cache/compass/json-schema-test-suite`` and, when absent there,
fetched into it with ``pip download jsonschema==<installed version> --no-binary :all: --no-deps``
(``--fetch-only`` does just that, for ``make install-test``; ``--no-fetch`` never fetches). The suite is
never part of the repository.

Cases: the ``draft2020-12`` files outside ``optional/`` and without ``refRemote.json``, minus the
groups whose schema needs the suite's remote server (``http://localhost:1234/...``: the verifier never
fetches), and only tests whose instance is a JSON object (an extraction answer is an object; the
verifier scores anything else ``valid: false``, out of scope). Each is scored through the verifier's row
form (``response`` = the instance as JSON text, ``schema`` = the case's schema), and ``valid`` is
compared with the suite's verdict: agreement overall and per file, and every disagreeing case listed.
A row the verifier refuses (``error``) counts with ``valid: false``, and is listed either way.

Ends with one JSON line; ``agreement`` is the overall fraction.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from importlib.metadata import version
from pathlib import Path, PurePosixPath

import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema_specifications import REGISTRY as SPECIFICATIONS

DEFAULT_SUITE = Path.home() / ".cache" / "compass" / "json-schema-test-suite"
DRAFT = "draft2020-12"
SKIPPED_FILES = ("refRemote.json",)      # every case there needs the remote server
REMOTE = "localhost:1234"                # the suite's stand-in remote server


def tests_dir(root: Path) -> Path | None:
    """The ``draft2020-12`` folder of a suite copy at ``root`` (any of its usual layouts), or None."""
    for cand in (root / "tests" / DRAFT, root / "json" / "tests" / DRAFT, root):
        if cand.name == DRAFT and (cand / "allOf.json").is_file():
            return cand
    return None


def fetch(dest: Path, pin: str | None = None) -> Path:
    """Download the ``jsonschema`` sdist (the installed version unless ``pin``) and keep its suite's
    ``draft2020-12`` tests, README and LICENSE under ``dest`` (written whole, then renamed into place)."""
    pin = pin or version("jsonschema")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".fetch-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", f"jsonschema=={pin}", "--no-binary", ":all:",
               "--no-deps", "--disable-pip-version-check", "-q", "--retries", "1", "--timeout", "20", "-d", tmp]
        done = subprocess.run(cmd, capture_output=True, text=True)
        sdists = list(Path(tmp).glob("jsonschema-*.tar.gz"))
        if done.returncode != 0 or not sdists:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no sdist saved"]
            raise RuntimeError(f"pip download jsonschema=={pin} failed: {tail[0]}")
        staged = Path(tmp) / "suite"
        _extract_suite(sdists[0], staged)
        (staged / "SOURCE.txt").write_text(
            f"JSON-Schema-Test-Suite (MIT, see LICENSE), the json/ folder of the {sdists[0].name} sdist "
            f"(pip download jsonschema=={pin} --no-binary :all: --no-deps); only tests/{DRAFT} kept.\n")
        if dest.exists():                      # resolve_suite fetches only into an absent or empty folder
            dest.rmdir()
        staged.rename(dest)
    return dest


def _extract_suite(sdist: Path, out: Path) -> None:
    """Plain files under ``<top>/json/`` that the bench needs, written by hand: no member can land outside
    ``out`` (absolute names, ``..``, links are never followed)."""
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts
            if not member.isfile() or len(parts) < 3 or parts[1] != "json" or ".." in parts:
                continue
            rel = PurePosixPath(*parts[2:])
            if not (str(rel) in ("LICENSE", "README.md") or rel.parts[:2] == ("tests", DRAFT)):
                continue
            target = out.joinpath(*rel.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(tar.extractfile(member).read())


def _needs_remote(schema) -> bool:
    """Whether the schema needs a document from the suite's remote server: its ``$schema`` is one, or one
    of its references asks for one. The suite also uses that server's URIs as plain ``$id`` base URIs;
    those need nothing remote, so the question is put to ``referencing`` (with a registry that records
    what it would have to retrieve), not to a text search."""
    if isinstance(schema, dict) and REMOTE in str(schema.get("$schema", "")):
        return True
    asked = []

    def retrieve(uri):
        asked.append(uri)
        raise referencing.exceptions.NoSuchResource(ref=uri)

    root = referencing.jsonschema.DRAFT202012.create_resource(schema)
    registry = SPECIFICATIONS.combine(referencing.Registry(retrieve=retrieve))
    stack = [(root, registry.resolver_with_root(root))]
    while stack:
        resource, resolver = stack.pop()
        if not isinstance(resource.contents, dict):
            continue
        resolver = resolver.in_subresource(resource)
        for key in ("$ref", "$dynamicRef"):
            if isinstance(resource.contents.get(key), str):
                try:
                    resolver.lookup(resource.contents[key])
                except referencing.exceptions.Unresolvable:
                    pass
        stack.extend((sub, resolver) for sub in resource.subresources())
    return any(REMOTE in uri for uri in asked)


def load_cases(draft_dir: Path) -> dict:
    """``cases`` (file, group, test, schema, instance, expected) and what was left out, with counts."""
    cases, skipped_groups, non_object = [], [], 0
    for path in sorted(draft_dir.glob("*.json")):            # glob("*.json"): optional/ is a folder
        if path.name in SKIPPED_FILES:
            continue
        for group in json.loads(path.read_text(encoding="utf-8")):
            if _needs_remote(group["schema"]):
                skipped_groups.append(f"{path.stem}: {group['description']}")
                continue
            for test in group["tests"]:
                if not isinstance(test["data"], dict):
                    non_object += 1
                    continue
                cases.append({"file": path.stem, "group": group["description"], "test": test["description"],
                              "schema": group["schema"], "instance": test["data"], "expected": test["valid"]})
    return {"cases": cases, "skipped_groups": skipped_groups, "non_object": non_object,
            "skipped_files": [f for f in SKIPPED_FILES if (draft_dir / f).is_file()]}


def run(cases: list[dict]) -> list[dict]:
    """Each case scored by the verifier's row form: the case with ``got`` (its ``valid``) and ``error``."""
    from compass.gym.rows import score_row
    out = []
    for c in cases:
        row = score_row("json_schema", {"response": json.dumps(c["instance"]), "schema": c["schema"]})
        out.append({**c, "got": row["valid"], "error": row.get("error"), "reason": row.get("reason")})
    return out


def agreement(results: list[dict]) -> dict:
    """Overall and per-file agreement of ``valid`` with the suite, and the disagreeing cases."""
    per_file = defaultdict(lambda: [0, 0])
    for r in results:
        per_file[r["file"]][0] += r["got"] == r["expected"]
        per_file[r["file"]][1] += 1
    agree = sum(a for a, _ in per_file.values())
    return {"agreement": agree / len(results) if results else 0.0, "cases": len(results), "agree": agree,
            "per_file": {f: (a, n) for f, (a, n) in sorted(per_file.items())},
            "disagreements": [r for r in results if r["got"] != r["expected"]],
            "errors": [r for r in results if r["error"]]}


def resolve_suite(suite: Path, may_fetch: bool) -> Path:
    """The ``draft2020-12`` folder under ``suite``, fetched there first when absent and allowed."""
    found = tests_dir(suite)
    # never into a folder that holds something else: the fetch replaces the folder it fills
    if found is None and may_fetch and not (suite.exists() and any(suite.iterdir())):
        print(f"fetching the JSON Schema test suite into {suite} ...", file=sys.stderr)
        found = tests_dir(fetch(suite))
    if found is None:
        why = "" if may_fetch is False or not suite.exists() else " (not fetched: the folder holds other files)"
        raise FileNotFoundError(f"no JSON Schema test suite ({DRAFT} tests) in {suite}{why}")
    return found


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="compass bench gym-json")
    ap.add_argument("--suite", type=Path, default=DEFAULT_SUITE,
                    help=f"JSON-Schema-Test-Suite copy (default {DEFAULT_SUITE}, fetched there when absent)")
    ap.add_argument("--fetch-only", action="store_true", help="only make sure the suite is in --suite")
    ap.add_argument("--no-fetch", action="store_true", help="never download; fail when --suite holds no suite")
    ap.add_argument("--show", type=int, default=50, help="disagreeing cases listed (default 50)")
    args = ap.parse_args(argv)
    try:
        draft_dir = resolve_suite(args.suite, may_fetch=not args.no_fetch)
    except (FileNotFoundError, RuntimeError, OSError, tarfile.TarError) as e:
        print(f"error: {e}; pass --suite DIR with the suite (the jsonschema sdist's json/ folder)", file=sys.stderr)
        return 2
    if args.fetch_only:
        print(f"JSON Schema test suite: {draft_dir}")
        return 0

    data = load_cases(draft_dir)
    t0 = time.perf_counter()
    results = run(data["cases"])
    seconds = time.perf_counter() - t0
    a = agreement(results)

    print(f"JSON Schema test suite {DRAFT} ({draft_dir}): {a['cases']} cases with an object instance; left out: "
          f"{', '.join(data['skipped_files'])}, optional/, {len(data['skipped_groups'])} groups needing the "
          f"remote server, {data['non_object']} non-object instances")
    print(f"{'file':<28}{'cases':>7}{'agree':>7}{'rate':>9}")
    for f, (ok, n) in a["per_file"].items():
        print(f"{f:<28}{n:>7}{ok:>7}{ok / n:>9.4f}")
    print(f"{'overall':<28}{a['cases']:>7}{a['agree']:>7}{a['agreement']:>9.4f}")
    print(f"{a['cases'] / seconds:.0f} cases/s (schemas built and cached as they come)")
    if a["disagreements"]:
        print(f"disagreements ({len(a['disagreements'])}, first {args.show}):")
    for r in a["disagreements"][:args.show]:
        why = f"  [{r['reason']}: {r['error'][:120]}]" if r["error"] else ""
        print(f"  {r['file']}: {r['group']} / {r['test']}: suite {r['expected']}, verifier {r['got']}{why}")
    refused = [r for r in a["errors"] if r["got"] == r["expected"]]
    if refused:
        print(f"refused by the verifier but counted as agreeing (the suite says invalid too): {len(refused)}")
        for r in refused[:args.show]:
            print(f"  {r['file']}: {r['group']} / {r['test']}  [{r['reason']}: {r['error'][:120]}]")
    below = {f: round(ok / n, 4) for f, (ok, n) in a["per_file"].items() if ok < n}
    print(json.dumps({"bench": "gym-json", "suite": f"JSON-Schema-Test-Suite {DRAFT} (jsonschema sdist)",
                      "agreement": round(a["agreement"], 4), "cases": a["cases"],
                      "disagreements": len(a["disagreements"]), "refused": len(a["errors"]),
                      "files": len(a["per_file"]), "files_below_1": below,
                      "skipped_remote_groups": len(data["skipped_groups"]), "non_object_cases": data["non_object"],
                      "cases_per_s": round(a["cases"] / seconds, 1)}))
    return 0
