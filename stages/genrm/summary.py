"""``summary.md`` of a GenRM stage run: data, warm start, GRPO, held-out GenRM vs Bradley–Terry, flips."""
from __future__ import annotations


def _f(x, pct=True) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.1f}%" if pct else f"{x:.3f}"


def _short(s: str, n: int = 80) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[:n - 1] + "…"


def render(m: dict, genrm: dict, bt: dict | None, flips: dict | None) -> str:
    lines = ["# GenRM stage run", "",
             "## Data", "",
             f"- rows: {m['rows']}, quarantined: {m['quarantined']} ({m['quarantine_reasons']}), "
             f"too long: {m['skipped_too_long']}",
             f"- training pairs: {m['train_pairs']} (labels {m['label_counts_train']}), held-out pairs: "
             f"{m['holdout_pairs']} (judged: {genrm['pairs']})", "",
             "## Training", "",
             f"- warm start: {m.get('warm_start_steps', 0)} SFT steps on {m.get('warm_start_examples', 0)} "
             f"structured judgements, loss {_f(m.get('warm_start_loss_first5_mean'), False)} → "
             f"{_f(m.get('warm_start_loss_last5_mean'), False)}",
             f"- GRPO: {m['grpo_steps']} steps, reward = 1[verdict == label]"
             f"{' with format weight ' + str(m['format_reward']) if m['format_reward'] else ''}; "
             f"mean reward first step {_f(m['grpo_reward_first'], False)}, last step "
             f"{_f(m['grpo_reward_last'], False)}",
             f"- Bradley–Terry: {m.get('bt_steps', 0)} steps on {m.get('bt_train_pairs', 0)} non-tie pairs, "
             f"tie threshold τ = {_f(m.get('bt_tau'), False)} (training ternary accuracy "
             f"{_f(m.get('bt_train_accuracy'))})", "",
             "## Held-out pairs", "",
             "| judge | overall | tie | non-tie | swap consistency | format |",
             "|---|---|---|---|---|---|",
             f"| GenRM | {_f(genrm['accuracy'])} | {_f(genrm['tie_accuracy'])} | {_f(genrm['non_tie_accuracy'])} "
             f"| {_f(genrm['swap_consistency'])} | {_f(m.get('genrm_format_rate'))} |"]
    if bt:
        lines.append(f"| Bradley–Terry | {_f(bt['accuracy'])} | {_f(bt['tie_accuracy'])} | "
                     f"{_f(bt['non_tie_accuracy'])} | {_f(bt['swap_consistency'])} (by construction) | – |")
    if flips:
        b, g = flips["bradley_terry"], flips["genrm"]
        lines += ["", "## Advantage flipping (held-out pairs as GRPO groups of their two responses)", "",
                  "| reward | groups | responses flipped | groups with a flip | flips in all-correct groups "
                  "| no signal (mixed groups, advantage 0) |",
                  "|---|---|---|---|---|---|",
                  f"| Bradley–Terry scalar | {b['groups']} | {b['flips']} | {b['groups_flipped']} | "
                  f"{b['flips_all_correct']} | {b['missed']} |",
                  f"| GenRM vs reference (A/TIE → 1) | {g['groups']} | {g['flips']} | {g['groups_flipped']} | "
                  f"{g['flips_all_correct']} | {g['missed']} |", "",
                  f"Flips avoided (BT flips where the GenRM's advantage has the true sign, 0 in uniform groups): "
                  f"{flips['flips_avoided']}.", ""]
        for c in flips["examples"]:
            lines += [f"- `{c['pair_id']}` — {_short(c['prompt'])} (reference `{_short(c['reference'], 30)}`)"]
            for k in range(2):
                lines.append(f"  - response {k + 1}: `{_short(c['responses'][k], 60)}` true {c['true_reward'][k]:.0f};"
                             f" BT score {c['bt_score'][k]:+.3f} → advantage {c['bt_advantage'][k]:+.2f}; "
                             f"GenRM verdict {c['genrm_verdict'][k]} → advantage {c['genrm_advantage'][k]:+.2f}")
    return "\n".join(lines) + "\n"
