"""``summary.md`` of an SFT run: what it trained on, how fast, and what it learned."""
from __future__ import annotations


def _f(x, fmt: str = ".4f") -> str:
    return "–" if x is None else format(x, fmt)


def render_summary(title: str, m: dict, eval_summary: dict | None = None, base_summary: dict | None = None) -> str:
    lines = [f"# SFT: {title}", "",
             "| | |", "|---|---:|",
             f"| steps | {m['steps']} |",
             f"| samples per step | {m['samples_per_step']} ({m['grad_accum_steps']} micro-batch(es)) |",
             f"| training samples / held-out / skipped (too long) | {m['train_samples']} / {m['heldout_samples']} / "
             f"{m['skipped_too_long']} |",
             f"| backend, forward | {m.get('backend', 'torch')}, {m['mode']} |",
             f"| tokens (supervised) | {m['tokens']} ({m['supervised_tokens']}) |",
             f"| packing efficiency (real / computed tokens) | {_f(m['packing_efficiency'], '.3f')} |",
             f"| training time | {m['train_s']:.1f} s |",
             f"| tokens/s | {m['tokens_per_s']:.0f} |",
             f"| train loss first 5 → last 5 (mean) | {_f(m['loss_first5_mean'])} → {_f(m['loss_last5_mean'])} |",
             f"| held-out loss before → after | {_f(m['heldout_loss_first'])} → {_f(m['heldout_loss_last'])} |",
             f"| lr peak → last | {m['lr_peak']:.2e} → {m['lr_last']:.2e} |",
             f"| resumed from step | {m['resumed_from_step'] if m['resumed_from_step'] is not None else '–'} |"]
    if m.get("fallback_reason"):
        lines += ["", f"Note: {m['fallback_reason']}."]
    if len(m.get("heldout_curve") or []) > 2:
        lines += ["", "## Held-out loss", "", "| step | loss |", "|---:|---:|"]
        lines += [f"| {h['step']} | {h['loss']:.4f} |" for h in m["heldout_curve"]]
    if eval_summary is not None:
        lines += ["", "## Held-out suites (greedy, scored by the gym's verifiers)", ""]
        head = "| suite | prompts | accuracy | mean score | finished | closed </think> |"
        sep = "|---|---:|---:|---:|---:|---:|"
        if base_summary is not None:
            head, sep = head + " base accuracy |", sep + "---:|"
        lines += [head, sep]
        for name, s in eval_summary["suites"].items():
            row = (f"| {name} | {s['prompts']} | {s['accuracy']:.3f} | {s['mean_score']:.3f} | "
                   f"{s['finished_rate']:.2f} | {s['closed_think_rate']:.2f} |")
            if base_summary is not None:
                b = base_summary["suites"].get(name)
                row += f" {_f(b and b['accuracy'], '.3f')} |"
            lines.append(row)
        if eval_summary["overall_accuracy"] is not None:
            lines += ["", f"Overall accuracy: **{eval_summary['overall_accuracy']:.3f}** over "
                          f"{eval_summary['samples']} prompts."]
    return "\n".join(lines) + "\n"
