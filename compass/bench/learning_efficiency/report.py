"""The readable tables of one regime and the headline JSON of the bench."""
from __future__ import annotations

from compass.bench.learning_efficiency.methods import ABLATIONS, CONTROLS, VARIANTS

GAIN_OVER_SE_WANTED = 5.0       # issue 29: GRPO's held-out gain at least 5 standard errors of its final milestone


def _r(x, nd=3):
    return None if x is None else round(x, nd)


def _ratio(v: dict | None) -> str:
    if not v or v.get("ratio") is None:
        return "—"
    ci = "" if v.get("ci_low") is None else f" [{v['ci_low']:.2f}, {v['ci_high']:.2f}]"
    return f"{v['ratio']:.2f}{ci}"


def _saving(ratio: float) -> str:
    return f"{1 / ratio:.2f}x" if ratio > 0 else "unbounded"


def _bound(v: dict | None, key: str = "predicted") -> str:
    b = (v or {}).get(key)
    return "—" if b is None else f"{b:.2f}"


def amortized_with_grader(s: dict, setup: dict) -> tuple[float, float] | None:
    """ours/grpo tokens ratio with the grader's tokens (per start) charged to ours: all of them to one run,
    and their share when the runs of a start that read the same grades split them."""
    M = s["methods"]
    if "ours" not in M or "grpo" not in M or M["grpo"]["to_target"][0] <= 0:
        return None
    t_ours, t_grpo, g = M["ours"]["to_target"][0], M["grpo"]["to_target"][0], setup["grader_tokens"]
    share = g / max(1, setup.get("grader_runs_sharing", 1))
    return (t_ours + g) / t_grpo, (t_ours + share) / t_grpo


def tables(s: dict, setup: dict) -> str:
    """Everything a reader needs about one regime, as text."""
    M = s["methods"]
    sfts = ", ".join(f"{a}: {v['reward_sft']:.3f}" for a, v in s["per_start"].items())
    lines = [f"== regime {setup['regime']}: {setup['description']}",
             f"pool {setup['pool']} prompts ({setup['pool_mix']}); held out {setup['heldout']} prompts "
             f"({setup['heldout_mix']}) x {setup['eval_samples']} samples; {setup['settings']}",
             f"grader: {setup['grader_k']} samples per pool prompt, {setup['grader_tokens']:,.0f} tokens per start "
             f"(the data filter's cost, not RL rollouts); pass rates: {setup['grader_hist']}; "
             f"predicted zero-variance at N={setup['group_size']}: {setup['z_predicted']:.2f}",
             f"starts {len(s['starts'])} (SFT held-out reward "
             f"{sfts}); "
             f"mean {s['reward_sft']:.3f} [{', '.join(f'{g} {v:.3f}' for g, v in s['by_group_sft'].items())}]; "
             f"target {s['target']:.3f} (+{s['target_gain']:.3f}: half {s['reference']}'s mean final gain, read "
             f"on each start's gain); SE of one held-out estimate {_se(s):.3f}, of a "
             f"{len(M[s['reference']]['units'])}-run mean {_se(s) / len(M[s['reference']]['units']) ** 0.5:.3f}"]
    if s.get("gain_over_se") is not None:
        g = M["grpo"]["final_gain"]
        k = s.get("gain_over_se_milestone")
        ok = "met" if k is not None and k >= GAIN_OVER_SE_WANTED else "MISSED"
        lines.append(f"GRPO's held-out gain over the budget: {g:+.3f} = "
                     + ("—" if k is None else f"{k:.1f}") + f" standard errors of its final milestone (SE "
                     f"{s['se_gain']:.4f}, bootstrap over starts and seeds; wanted >= {GAIN_OVER_SE_WANTED:.0f}: "
                     f"{ok}) = {s['gain_over_se']:.1f} SE of one evaluation (sampling only)")
    if "z_grpo" in s:
        ours = M.get("ours", {}).get("vs_grpo")
        lines.append(f"GRPO zero-variance share z = {s['z_grpo']:.2f} over the run, {s['z_grpo_start']:.2f} in its "
                     f"first steps: skipping every zero-variance group for free could at best give a tokens ratio "
                     f"of 1 - z = {s['bound_ratio']:.2f} (a saving of 1/(1-z) = {_saving(s['bound_ratio'])})"
                     + (f"; ours measured {ours['ratio']:.2f} (saving {_saving(ours['ratio'])}). Predicted from "
                        f"ours' informative token share alone (the same steps per token): "
                        f"{_bound(ours, 'informative_bound')}; with its steps per token too: {_bound(ours)}"
                        if ours and ours.get("ratio") else ""))
    head = (f"{'method':<18} {'final ± std':>13} {'Δ vs grpo [95% CI]':>22} {'to target':>10} "
            f"{'vs grpo [95% CI]':>18} {'pred.':>5} {'vs dapo [95% CI]':>18} {'zero-var':>8} {'pass/fail':>9} {'skipped':>7} "
            f"{'dropped':>7} {'N':>5} {'inform.':>7} {'steps':>5} {'time s':>6}")
    lines += ["", head, "-" * len(head)]
    for m, v in M.items():
        d = v.get("vs_grpo", {}).get("final_delta")
        dtxt = "—" if d is None else f"{d['delta']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"
        tt, ok = v["to_target"]
        lines.append(f"{m:<18} {v['final'][0]:>7.3f} ± {v['final'][1]:.3f} {dtxt:>22} "
                     f"{tt:>9,.0f}{'' if ok else '*'} {_ratio(v.get('vs_grpo')):>18} {_bound(v.get('vs_grpo')):>5} "
                     f"{_ratio(v.get('vs_dapo')):>18} "
                     f"{v['zero_variance']:>8.2f} {v['all_pass']:>4.2f}/{v['all_fail']:.2f} {v['skipped']:>7.2f} "
                     f"{v['dropped']:>7.2f} {v['group_size']:>5.1f} {v['informative_tokens']:>7.2f} "
                     f"{v['steps']:>5.0f} {v['time_s']:>6.0f}")
    lines.append("(to target: rollout tokens where the mean curve over starts and seeds reaches the target, * never: "
                 "the budget; ratios: tokens to target over the baseline's, paired two-stage bootstrap over starts "
                 "and seeds; pred.: the ratio to grpo predicted by informative token share x steps per token "
                 "(stats.predicted_ratio; not for methods that drop groups); zero-var: share of "
                 "generated groups; skipped: share of drawn prompts skipped before rollout; dropped: generated "
                 "groups left out of the update; N: mean group size; inform.: share of rollout tokens in groups "
                 "with reward spread)")
    ms = s["milestones"]
    lines += ["", "held-out reward, mean ± std over starts and seeds, at rollout-token milestones:",
              f"{'tokens':<18} " + " ".join(f"{t:>13,}" for t in ms)]
    for m, v in M.items():
        lines.append(f"{m:<18} " + " ".join(f"{a:>7.3f}±{sd:.3f}" for (_, a), sd in zip(v["mean_curve"],
                                                                                        v["std_curve"])))
    groups = list(s["by_group_sft"])
    if len(groups) > 1:
        lines += ["", "final held-out reward by group (mean over starts and seeds):",
                  f"{'':<18} " + " ".join(f"{g:>14}" for g in groups),
                  f"{'SFT':<18} " + " ".join(f"{s['by_group_sft'][g]:>14.3f}" for g in groups)]
        for m, v in M.items():
            lines.append(f"{m:<18} " + " ".join(f"{v['final_by_group'].get(g, float('nan')):>14.3f}"
                                                for g in groups))
    lines += ["", "per start: SFT held-out reward, each method's mean final gain, and its tokens ratio to grpo "
                  "[95% CI over that start's seeds]:"]
    for a, ps in s["per_start"].items():
        cells = []
        for m, v in ps["methods"].items():
            r = _ratio(v.get("vs_grpo")) if "vs_grpo" in v else "—"
            cells.append(f"{m} {v['final_gain']:+.3f}" + ("" if m == "grpo" else f" ({r})"))
        lines.append(f"  start {a}: SFT {ps['reward_sft']:.3f}; " + "; ".join(cells))
    lines += ["", "tokens to target per (start, seed) (* not reached: the budget) and ratio to grpo's:"]
    for m, v in M.items():
        per = ", ".join(f"{a}/{sd}: {t:,.0f}{'' if ok else '*'}" for (a, sd), (t, ok) in zip(v["units"],
                                                                                           v["to_target_per_seed"]))
        rs = v.get("vs_grpo", {}).get("per_seed")
        lines.append(f"{m:<18} {per}" + ("" if not rs else "  (" + ", ".join("—" if r is None else f"{r:.2f}"
                                                                             for r in rs) + ")"))
    w = amortized_with_grader(s, setup)
    if w:
        lines.append(f"\nthe grader: {setup['grader_tokens']:,.0f} tokens per start (the data filter's cost). "
                     f"ours / grpo with all of them charged to one run of ours: {w[0]:.2f}; amortized over the "
                     f"{setup['grader_runs_sharing']} runs of a start that read its grades: {w[1]:.2f}")
    return "\n".join(lines)


def _se(s: dict) -> float:
    M = s["methods"]
    return sum(m["se_eval"] for m in M.values()) / len(M)


def headline(s: dict, setup: dict) -> dict:
    """The regime's headline numbers."""
    M = s["methods"]
    out: dict = {"z_grpo": _r(s.get("z_grpo")), "z_grpo_start": _r(s.get("z_grpo_start")),
                 "bound_ratio": _r(s.get("bound_ratio")), "z_predicted": _r(setup["z_predicted"]),
                 "reward_sft": _r(s["reward_sft"], 4), "target": _r(s["target"], 4),
                 "gain_grpo": _r(s["methods"]["grpo"]["final_gain"], 4) if "grpo" in s["methods"] else None,
                 "gain_over_se_milestone": _r(s.get("gain_over_se_milestone"), 2),
                 "gain_over_se_eval": _r(s.get("gain_over_se"), 2), "se_eval": _r(_se(s), 4),
                 "final": {m: _r(v["final"][0], 4) for m, v in M.items()},
                 "tokens_to_target": {m: round(v["to_target"][0]) for m, v in M.items()},
                 "reached": {m: v["to_target"][1] for m, v in M.items()},
                 "grader_tokens": setup["grader_tokens"]}
    ours = M.get("ours", {})
    if "vs_grpo" in ours:
        v = ours["vs_grpo"]
        out.update(tokens_ratio_vs_grpo=_r(v["ratio"]), tokens_ratio_vs_grpo_ci_low=_r(v["ci_low"]),
                   tokens_ratio_vs_grpo_ci_high=_r(v["ci_high"]),
                   final_reward_delta_vs_grpo=_r(v["final_delta"]["delta"], 4),
                   final_reward_delta_vs_grpo_ci_low=_r(v["final_delta"]["ci_low"], 4))
        out["informative_bound_vs_grpo"] = _r(v.get("informative_bound"))
        out["predicted_ratio_vs_grpo"] = _r(v.get("predicted"))
        out["tokens_ratio_vs_grpo_per_start"] = {str(a): _r(ps["methods"]["ours"]["vs_grpo"]["ratio"])
                                                 for a, ps in s["per_start"].items()
                                                 if "vs_grpo" in ps["methods"].get("ours", {})}
        w = amortized_with_grader(s, setup)
        if w:
            out["tokens_ratio_vs_grpo_with_grader"] = _r(w[0])
            out["tokens_ratio_vs_grpo_with_grader_amortized"] = _r(w[1])
    if "vs_dapo" in ours:
        out.update(tokens_ratio_vs_dapo=_r(ours["vs_dapo"]["ratio"]),
                   tokens_ratio_vs_dapo_ci_high=_r(ours["vs_dapo"]["ci_high"]))
    if ours:
        out["residual_zero_variance"] = _r(ours["zero_variance"])
    for m in ("dapo", "greso", *ABLATIONS, *VARIANTS, *CONTROLS):
        if "vs_grpo" in M.get(m, {}):
            v = M[m]["vs_grpo"]
            out[f"tokens_ratio_vs_grpo_{m}"] = _r(v["ratio"])
            out[f"tokens_ratio_vs_grpo_{m}_ci"] = [_r(v["ci_low"]), _r(v["ci_high"])]
            out[f"final_reward_delta_vs_grpo_{m}"] = _r(v["final_delta"]["delta"], 4)
    return out
