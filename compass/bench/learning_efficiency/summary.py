"""One regime's runs reduced to what the report shows: curves, tokens-to-target, ratios with their
paired bootstrap intervals, and the training-side zero-variance measurements."""
from __future__ import annotations

from compass.bench.learning_efficiency import stats

Z_START_STEPS = 10          # "at the start": GRPO's first steps


def curve(run: dict, eval0: dict, milestones) -> stats.Curve:
    """A run's held-out curve at the milestones (the SFT model's evaluation at 0 tokens)."""
    pts = [(0, eval0["reward"])] + [(e["tokens"], e["reward"]) for e in run["evals"]]
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


def summarize(runs: dict[str, list[dict]], eval0: dict, milestones, *, reference: str = "grpo",
              n_boot: int = 2000) -> dict:
    """``runs``: method -> its runs, one per seed (every method ran the same seeds). The target is half the
    reference method's final gain over the SFT model (its mean curve), the same for every method."""
    methods = list(runs)
    seeds = {m: [r["seed"] for r in runs[m]] for m in methods}
    curves = {m: [curve(r, eval0, milestones) for r in runs[m]] for m in methods}
    means = {m: stats.mean_curve(c) for m, c in curves.items()}
    ref = reference if reference in runs else max(methods, key=lambda m: means[m][-1][1])
    target = stats.target_from_gain(eval0["reward"], means[ref][-1][1])
    out: dict = {"milestones": list(milestones), "target": target, "reference": ref,
                 "reward_sft": eval0["reward"], "se_sft": eval0["se"], "by_group_sft": eval0["by_group"],
                 "methods": {}}
    for m in methods:
        finals = [c[-1][1] for c in curves[m]]
        per_seed = [stats.tokens_to_target(c, target) for c in curves[m]]
        side = [train_side(r) for r in runs[m]]
        last_groups = [r["evals"][-1]["by_group"] if r["evals"] else eval0["by_group"] for r in runs[m]]
        out["methods"][m] = {
            "seeds": seeds[m],
            "mean_curve": means[m],
            "std_curve": [stats.mean_std([c[i][1] for c in curves[m]])[1] for i in range(len(milestones))],
            "final": stats.mean_std(finals), "finals": finals,
            "final_by_group": {g: sum(x[g] for x in last_groups) / len(last_groups) for g in last_groups[0]},
            "to_target": stats.tokens_to_target(means[m], target),
            "to_target_per_seed": per_seed,
            "se_eval": sum(e["se"] for r in runs[m] for e in r["evals"]) / max(1, sum(len(r["evals"])
                                                                                       for r in runs[m])),
            **{k: sum(x[k] for x in side) / len(side) for k in side[0]},
        }
    for base in ("grpo", "dapo"):
        if base not in runs:
            continue
        for m in methods:
            if m == base:
                continue
            common = [s for s in seeds[m] if s in seeds[base]]
            num = [curves[m][seeds[m].index(s)] for s in common]
            den = [curves[base][seeds[base].index(s)] for s in common]
            if not common:
                continue
            boot = stats.paired_bootstrap_ratio(num, den, target, n_boot=n_boot)
            seed_ratios = [a / b if b > 0 else None for (a, _), (b, _) in
                           zip((stats.tokens_to_target(c, target) for c in num),
                               (stats.tokens_to_target(c, target) for c in den))]
            delta = stats.paired_bootstrap_delta([c[-1][1] for c in num], [c[-1][1] for c in den], n_boot=n_boot)
            out["methods"][m][f"vs_{base}"] = {**boot, "per_seed": seed_ratios, "final_delta": delta}
    if "grpo" in runs:
        g = out["methods"]["grpo"]
        out["z_grpo"], out["z_grpo_start"] = g["zero_variance"], g["zero_variance_start"]
        out["bound_ratio"] = stats.zero_variance_bound(g["zero_variance"])
    return out
