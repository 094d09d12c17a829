"""The merge sweep: candidates, the dev draw, scoring, the selection rule and its report.

Scores are mean verifier scores (0..1; the evaluation stage's ``mean_score``, which is
the accuracy for pass/fail verifiers) per dev domain. A parent's *home score* is the
mean over its home domains (each domain counts once, whatever its size); a model's
*mean* is the mean of its two home scores. A candidate's margin to a parent is its
home score there minus that parent's; the kept candidate has the largest smallest
margin (ties: larger mean, then the earlier candidate).
"""
from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass

from stages.merge.config import MergeConfig, SweepConfig

HOMES = ("thinking", "domain")


@dataclass(frozen=True)
class Candidate:
    method: str
    thinking_weight: float
    domain_weight: float
    density: float | None          # None: task arithmetic (keeps every delta)

    @property
    def name(self) -> str:
        d = "" if self.density is None else f" d={self.density:.2f}"
        # the domain weight is shown only when it is not 1 - w (the names of complementary sweeps do not change)
        dw = "" if abs(self.thinking_weight + self.domain_weight - 1) < 1e-9 else f" dw={self.domain_weight:.2f}"
        return f"{self.method} w={self.thinking_weight:.2f}{dw}{d}"

    def merge_config(self, base: MergeConfig) -> MergeConfig:
        upd = {"method": self.method, "thinking_weight": self.thinking_weight, "domain_weight": self.domain_weight,
               "sweep": None}
        if self.density is not None:
            upd["density"] = self.density
        return base.model_copy(update=upd)


def candidates(config: MergeConfig) -> list[Candidate]:
    """Every candidate of ``config.sweep``, in a fixed order: method, then thinking weight, then
    domain weight (``sweep.domain_weights``; None: the single 1 - w), then density."""
    sw = config.sweep
    densities = sw.densities or [config.density]
    out = []
    for method in sw.methods:
        for w in sw.thinking_weights:
            for dw in (sw.domain_weights or [round(1.0 - w, 10)]):
                for d in ([None] if method == "task_arithmetic" else densities):
                    out.append(Candidate(method, w, dw, d))
    return out


def draw_dev(rows: list[dict], sweep: SweepConfig) -> list[dict]:
    """``dev_per_suite`` rows per task of the home domains, drawn with ``sweep.seed``; in table order.

    Only the columns scoring needs are kept (no ``suite`` column: results group by domain).
    """
    homes = set(sweep.thinking_domains) | set(sweep.domain_domains)
    by_task: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        if r["domain"] in homes:
            by_task[r["task"]].append(i)
    picked: list[int] = []
    for task in sorted(by_task):
        idx = by_task[task]
        k = min(sweep.dev_per_suite, len(idx))
        picked += random.Random(f"{sweep.seed}:dev:{task}").sample(idx, k)
    keep = ("id", "domain", "task", "prompt", "reference", "verifier", "difficulty")
    return [{k: rows[i][k] for k in keep} for i in sorted(picked)]


def check_dev(dev: list[dict], sweep: SweepConfig, uri: str) -> list[str]:
    """Raise ValueError when a parent has no home domain in ``dev``; returns warnings for missing ones."""
    present = {r["domain"] for r in dev}
    warnings = []
    for home, domains in (("thinking", sweep.thinking_domains), ("domain", sweep.domain_domains)):
        have = [d for d in domains if d in present]
        if not have:
            raise ValueError(f"merge: the dev table {uri} has no prompts in the {home} parent's home domains "
                             f"{domains} (its domains: {sorted(present)}); the sweep cannot score that parent")
        missing = [d for d in domains if d not in present]
        if missing:
            warnings.append(f"dev table {uri} has no prompts in {home} home domain(s) {missing}; "
                            f"the {home} home score uses {have}")
    return warnings


def domain_scores(summary: dict) -> dict[str, dict]:
    """Per dev domain: mean score, accuracy and prompt count, from a ``greedy_score`` summary."""
    return {name: {"score": s["mean_score"], "accuracy": s["accuracy"], "prompts": s["prompts"]}
            for name, s in summary["suites"].items()}


def home_scores(per_domain: dict[str, dict], sweep: SweepConfig) -> dict[str, float]:
    out = {}
    for home, domains in (("thinking", sweep.thinking_domains), ("domain", sweep.domain_domains)):
        xs = [per_domain[d]["score"] for d in domains if d in per_domain]
        out[home] = sum(xs) / len(xs)
    out["mean"] = (out["thinking"] + out["domain"]) / 2
    return out


def margins(home: dict[str, float], parents: dict[str, dict]) -> dict[str, float]:
    """Candidate home score minus the parent's own, per parent, and their minimum."""
    m = {h: home[h] - parents[h]["home"][h] for h in HOMES}
    m["min"] = min(m["thinking"], m["domain"])
    return m


def select(scored: list[tuple[Candidate, dict]]) -> int:
    """Index of the kept candidate: largest min margin, then largest mean, then the earliest
    (compared at 1e-9, so that float rounding does not break a tie)."""
    return max(range(len(scored)), key=lambda i: (round(scored[i][1]["margins"]["min"], 9),
                                                  round(scored[i][1]["home"]["mean"], 9), -i))


def best_per_method(scored: list[tuple[Candidate, dict]]) -> dict[str, int]:
    """Per method, the index in ``scored`` of its best candidate by ``select``'s rule."""
    idx: dict[str, list[int]] = defaultdict(list)
    for i, (c, _) in enumerate(scored):
        idx[c.method].append(i)
    return {m: ix[select([scored[i] for i in ix])] for m, ix in idx.items()}


def from_table(rows: list[dict]) -> tuple[dict[str, dict], list[tuple[Candidate, dict]], int | None]:
    """A ``merge_sweep`` table (``table_rows``) read back: the parents' results, the scored candidates
    in table order (``domains`` without accuracy, ``home`` and ``margins``) and the selected index."""
    by: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        by[r["candidate"]][r["suite"]] = r
    results = {}
    for name, rs in by.items():
        results[name] = {"domains": {d: {"score": r["score"], "prompts": r["prompts"]} for d, r in rs.items()
                                     if d not in ("thinking_home", "domain_home", "mean")},
                         "home": {"thinking": rs["thinking_home"]["score"], "domain": rs["domain_home"]["score"],
                                  "mean": rs["mean"]["score"]}}
    parents = {h: results[f"{h} (parent)"] for h in HOMES}
    scored, chosen = [], None
    for name, rs in by.items():
        r = rs["mean"]
        if r["method"] == "parent":
            continue
        if r["selected"]:
            chosen = len(scored)
        res = {**results[name], "margins": margins(results[name]["home"], parents)}
        scored.append((Candidate(r["method"], r["thinking_weight"], r["domain_weight"], r["density"]), res))
    return parents, scored, chosen


def table_rows(parents: dict[str, dict], scored: list[tuple[Candidate, dict]], chosen: int | None,
               sweep: SweepConfig) -> list[dict]:
    """merge_sweep rows: per model, one row per dev domain, then thinking_home, domain_home and mean."""
    rows = []

    def emit(name, method, tw, dw, density, res, selected):
        for dom, s in sorted(res["domains"].items()):
            rows.append(dict(candidate=name, method=method, thinking_weight=tw, domain_weight=dw, density=density,
                             suite=dom, score=s["score"], prompts=s["prompts"], selected=selected))
        homes = {"thinking": sweep.thinking_domains, "domain": sweep.domain_domains}
        n = {h: sum(s["prompts"] for d, s in res["domains"].items() if d in homes[h]) for h in HOMES}
        for h in HOMES:
            rows.append(dict(candidate=name, method=method, thinking_weight=tw, domain_weight=dw, density=density,
                             suite=f"{h}_home", score=res["home"][h], prompts=n[h], selected=selected))
        rows.append(dict(candidate=name, method=method, thinking_weight=tw, domain_weight=dw, density=density,
                         suite="mean", score=res["home"]["mean"], prompts=n["thinking"] + n["domain"],
                         selected=selected))
    for h in HOMES:
        emit(f"{h} (parent)", "parent", None, None, None, parents[h], False)
    for i, (c, res) in enumerate(scored):
        emit(c.name, c.method, c.thinking_weight, c.domain_weight, c.density, res, i == chosen)
    return rows


def render_summary(parents: dict[str, dict], scored: list[tuple[Candidate, dict]], chosen: int,
                   sweep: SweepConfig, dev_uri: str, n_dev: int, resumed: int) -> str:
    c, res = scored[chosen]
    lines = ["# Merge sweep", "",
             f"Dev suite: {n_dev} prompts from `{dev_uri}` (up to {sweep.dev_per_suite} per task, seed {sweep.seed}), "
             f"greedy, at most {sweep.max_new_tokens} new tokens. Scores are mean verifier scores x 100.", "",
             f"Homes: thinking = {', '.join(sweep.thinking_domains)}; domain = {', '.join(sweep.domain_domains)}. "
             "A home score is the mean over its domains; margin = candidate minus that parent on its home.", "",
             "| model | method | w thinking | w domain | density | thinking home | domain home | mean "
             "| margin thinking | margin domain | min margin | |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for h in HOMES:
        p = parents[h]["home"]
        lines.append(f"| {h} (parent) | parent | | | | {100 * p['thinking']:.1f} | {100 * p['domain']:.1f} | "
                     f"{100 * p['mean']:.1f} | | | | |")
    for i, (cand, r) in enumerate(scored):
        m, hs = r["margins"], r["home"]
        dens = "" if cand.density is None else f"{cand.density:.2f}"
        lines.append(f"| {cand.name} | {cand.method} | {cand.thinking_weight:.2f} | {cand.domain_weight:.2f} | {dens} | "
                     f"{100 * hs['thinking']:.1f} | {100 * hs['domain']:.1f} | {100 * hs['mean']:.1f} | "
                     f"{100 * m['thinking']:+.1f} | {100 * m['domain']:+.1f} | {100 * m['min']:+.1f} | "
                     f"{'**selected**' if i == chosen else ''} |")
    lines += ["", f"Selected: **{c.name}**: the largest smallest margin to a parent "
                  f"({100 * res['margins']['min']:+.1f} points; ties go to the larger mean, then the earlier candidate)."
                  + (" It keeps both parents' skills on dev (within 2 points)." if res["margins"]["min"] >= -0.02
                     else " No candidate is within 2 points of both parents on dev.")]
    if resumed:
        lines += ["", f"{resumed} candidate(s) were scored before an interruption and taken from the saved state."]
    lines += ["", "## Per dev domain", "", "| model | " + " | ".join(sorted(res["domains"])) + " |",
              "|---|" + "---:|" * len(res["domains"])]
    for name, r in [(f"{h} (parent)", parents[h]) for h in HOMES] + [(cand.name, r) for cand, r in scored]:
        lines.append(f"| {name} | " + " | ".join(f"{100 * r['domains'][d]['score']:.1f}" if d in r["domains"] else ""
                                                 for d in sorted(res["domains"])) + " |")
    return "\n".join(lines) + "\n"
