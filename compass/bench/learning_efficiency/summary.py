"""One regime's runs reduced to what the report shows: curves, tokens-to-target, ratios with their
paired bootstrap intervals, and the training-side zero-variance measurements."""
from __future__ import annotations

from compass.bench.learning_efficiency import stats

Z_START_STEPS = 10          # "at the start": GRPO's first steps


def unit(run: dict) -> tuple[int, int]:
    """A run's (start, seed): the pairing key across methods."""
    return run.get("start", 0), run["seed"]


def curve(run: dict, eval0: dict, milestones) -> stats.Curve:
    """A run's held-out gain over its start (the SFT model's evaluation at 0 tokens), read at the milestones."""
    base = eval0["reward"]
    pts = [(0, 0.0)] + [(e["tokens"], e["reward"] - base) for e in run["evals"]]
    return stats.at_milestones(pts, milestones)


def train_side(run: dict) -> dict:
    """Training-side measurements of one run (every generated group and token counts, kept or not)."""
    s = run["steps"]
    groups = max(1, sum(x["groups"] for x in s))
    tokens = max(1, sum(x["tokens"] for x in s))
    zv = sum(x["zero_variance_all_pass"] + x["zero_variance_all_fail"] for x in s)
    drawn = sum(x["groups"] + x.get("prompts_skipped", 0) for x in s)
    first = s[:Z_START_STEPS]
    g0 = max(1, sum(x["groups"] for x in first))
    return {
        "zero_variance": zv / groups,
        "zero_variance_start": sum(x["zero_variance_all_pass"] + x["zero_variance_all_fail"] for x in first) / g0,
        "all_pass": sum(x["zero_variance_all_pass"] for x in s) / groups,
        "all_fail": sum(x["zero_variance_all_fail"] for x in s) / groups,
        "dropped": 1.0 - sum(x["groups_kept"] for x in s) / groups,
        "skipped": sum(x.get("prompts_skipped", 0) for x in s) / max(1, drawn),
        "group_size": sum(x["group_size"] * x["groups"] for x in s) / groups,
        "informative_tokens": sum(x.get("informative_token_share", 0.0) * x["tokens"] for x in s) / tokens,
        "adv_abs_token_mean": sum(x.get("adv_abs_token_mean", 0.0) * x["tokens"] for x in s) / tokens,
        "steps": len(s), "updates": sum(x.get("updated", 0) for x in s),
        "tokens": s[-1]["rollout_tokens_total"] if s else 0,
        "time_s": run["time_s"], "eval_time_s": run["eval_time_s"],
    }


def summarize(runs: dict[str, list[dict]], eval0s: dict[int, dict], milestones, *, reference: str = "grpo",
              n_boot: int = 2000) -> dict:
    """``runs``: method -> its runs, one per unit (start, seed), every method on the same units; ``eval0s``:
    start -> its SFT model's held-out evaluation. Curves are gains over each run's start; the target is
    half the reference method's mean final gain, the same for every method and start. Rewards shown are
    the starts' mean SFT reward plus the mean gain (the mean reward when every start has as many seeds)."""
    methods = list(runs)
    runs = {m: sorted(rs, key=unit) for m, rs in runs.items()}
    units = {m: [unit(r) for r in runs[m]] for m in methods}
    curves = {m: [curve(r, eval0s[unit(r)[0]], milestones) for r in runs[m]] for m in methods}
    means = {m: stats.mean_curve(c) for m, c in curves.items()}
    ref = reference if reference in runs else max(methods, key=lambda m: means[m][-1][1])
    starts = sorted({u[0] for m in methods for u in units[m]})
    ref_units = units[ref]
    sft = sum(eval0s[a]["reward"] for a, _ in ref_units) / len(ref_units)     # unit-weighted
    target_gain = stats.target_from_gain(0.0, means[ref][-1][1])
    groups_sft = _mean_dicts([eval0s[a]["by_group"] for a, _ in ref_units])
    out: dict = {"milestones": list(milestones), "target": sft + target_gain, "target_gain": target_gain,
                 "reference": ref, "reward_sft": sft,
                 "by_group_sft": groups_sft, "starts": starts, "methods": {},
                 "per_start": {a: {"reward_sft": eval0s[a]["reward"], "se_sft": eval0s[a]["se"],
                                   "by_group_sft": eval0s[a]["by_group"], "methods": {}} for a in starts}}
    for m in methods:
        finals = [sft + c[-1][1] for c in curves[m]]
        per_unit = [stats.tokens_to_target(c, target_gain) for c in curves[m]]
        side = [train_side(r) for r in runs[m]]
        last_groups = [r["evals"][-1]["by_group"] if r["evals"] else eval0s[unit(r)[0]]["by_group"]
                       for r in runs[m]]
        out["methods"][m] = {
            "units": units[m], "seeds": sorted({s for _, s in units[m]}),
            "mean_curve": [(t, sft + g) for t, g in means[m]],
            "mean_gain_curve": means[m],
            "std_curve": [stats.mean_std([c[i][1] for c in curves[m]])[1] for i in range(len(milestones))],
            "final": stats.mean_std(finals), "finals": finals, "final_gain": means[m][-1][1],
            "final_by_group": _mean_dicts(last_groups),
            "to_target": stats.tokens_to_target(means[m], target_gain),
            "to_target_per_seed": per_unit,
            "se_eval": sum(e["se"] for r in runs[m] for e in r["evals"]) / max(1, sum(len(r["evals"])
                                                                                       for r in runs[m])),
            **{k: sum(x[k] for x in side) / len(side) for k in side[0]},
        }
        for a in starts:
            idx = [i for i, u in enumerate(units[m]) if u[0] == a]
            if idx:
                mc = stats.mean_curve([curves[m][i] for i in idx])
                out["per_start"][a]["methods"][m] = {"final_gain": mc[-1][1],
                                                     "to_target": stats.tokens_to_target(mc, target_gain)}
    for base in ("grpo", "dapo"):
        if base not in runs:
            continue
        for m in methods:
            if m == base:
                continue
            common = [u for u in units[m] if u in units[base]]
            if not common:
                continue
            num = [curves[m][units[m].index(u)] for u in common]
            den = [curves[base][units[base].index(u)] for u in common]
            by_start = _by_start(common)
            clusters = list(by_start.values())
            boot = stats.paired_bootstrap_ratio(num, den, target_gain, n_boot=n_boot, clusters=clusters)
            unit_ratios = [a / b if b > 0 else None for (a, _), (b, _) in
                           zip((stats.tokens_to_target(c, target_gain) for c in num),
                               (stats.tokens_to_target(c, target_gain) for c in den))]
            delta = stats.paired_bootstrap_delta([c[-1][1] for c in num], [c[-1][1] for c in den], n_boot=n_boot,
                                                 clusters=clusters)
            b, x = out["methods"][base], out["methods"][m]
            bound = stats.informative_ratio_bound(b["informative_tokens"], x["informative_tokens"])
            pred = (None if b["dropped"] > 0 or x["dropped"] > 0 else
                    stats.predicted_ratio(b["informative_tokens"], b["steps"] / max(1, b["tokens"]),
                                          x["informative_tokens"], x["steps"] / max(1, x["tokens"])))
            out["methods"][m][f"vs_{base}"] = {**boot, "per_seed": unit_ratios, "final_delta": delta,
                                               "informative_bound": bound, "predicted": pred}
            if base == "grpo":
                for a, c in by_start.items():
                    sb = stats.paired_bootstrap_ratio([num[i] for i in c], [den[i] for i in c], target_gain,
                                                      n_boot=n_boot)
                    out["per_start"][a]["methods"][m]["vs_grpo"] = sb
    if "grpo" in runs:
        g = out["methods"]["grpo"]
        out["z_grpo"], out["z_grpo_start"] = g["zero_variance"], g["zero_variance_start"]
        out["bound_ratio"] = stats.zero_variance_bound(g["zero_variance"])
        out["gain_over_se"] = g["final_gain"] / g["se_eval"] if g["se_eval"] > 0 else None
        # the standard error of the milestone itself: GRPO's mean final gain over its runs, two-stage bootstrap
        gains = [c[-1][1] for c in curves["grpo"]]
        out["se_gain"] = stats.bootstrap_se(gains, clusters=list(_by_start(units["grpo"]).values()), n_boot=n_boot)
        out["gain_over_se_milestone"] = g["final_gain"] / out["se_gain"] if out["se_gain"] > 1e-9 else None
    return out


def _by_start(units: list[tuple[int, int]]) -> dict[int, list[int]]:
    """Start -> the indices of its units in ``units`` (the bootstrap's clusters), starts in order."""
    out: dict[int, list[int]] = {}
    for i, (a, _) in enumerate(units):
        out.setdefault(a, []).append(i)
    return dict(sorted(out.items()))


def _mean_dicts(ds: list[dict]) -> dict:
    """Key-wise mean of dicts with the same keys (the first one's)."""
    return {k: sum(d[k] for d in ds) / len(ds) for k in ds[0]} if ds else {}
