"""PNGs: held-out curves per regime, and the paper's Fig. 3 (zero-variance rate, pass@N, |advantage| per
token against N) from the grader's groups, the beliefs on them, and the runs' own groups."""
from __future__ import annotations

from pathlib import Path


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def curves(summary: dict, path: Path, title: str) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 5))
    for m, v in summary["methods"].items():
        xs = [t for t, _ in v["mean_curve"]]
        ys = [r for _, r in v["mean_curve"]]
        style = "--" if m.startswith("ours-no") else "-"
        line, = ax.plot(xs, ys, style, marker="o", markersize=3, label=m)
        ax.fill_between(xs, [y - s for y, s in zip(ys, v["std_curve"])], [y + s for y, s in zip(ys, v["std_curve"])],
                        color=line.get_color(), alpha=0.08)
    ax.axhline(summary["target"], color="grey", linestyle=":", label="target")
    ax.set_xlabel("rollout tokens")
    ax.set_ylabel("held-out reward: mean start + mean gain (± std of the gain over runs)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run_points(runs: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Per method, per group size it generated at: the measured zero-variance share of its groups and its
    token-weighted mean |advantage| per token, over all its runs."""
    out: dict[str, list[dict]] = {}
    for m, rs in runs.items():
        by: dict[int, list[float]] = {}
        for r in rs:
            for x in r["steps"]:
                b = by.setdefault(int(x["group_size"]), [0, 0, 0.0, 0])
                b[0] += x["zero_variance_all_pass"] + x["zero_variance_all_fail"]
                b[1] += x["groups"]
                b[2] += x.get("adv_abs_token_mean", 0.0) * x["tokens"]
                b[3] += x["tokens"]
        out[m] = [{"n": n, "zero_variance": zv / max(g, 1), "abs_adv_per_token": a / max(t, 1), "groups": g}
                  for n, (zv, g, a, t) in sorted(by.items())]
    return out


GRPO_ADVANTAGE = ("grpo", "greso", "ours", "ours+espo")    # RL-ZVP gives zero-variance groups |A| too: not comparable


def fig3(rows: list[dict], points: dict[str, list[dict]], path: Path, title: str) -> None:
    """``rows``: :func:`compass.bench.learning_efficiency.signal_vs_n.curves`; ``points``: :func:`run_points`
    (zero-variance: every method given; |advantage|: those with GRPO's advantages)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ns = [r["n"] for r in rows]
    panels = (("zero_variance", "zero-variance rate"), ("pass_at_n", "pass@N"),
              ("abs_adv_per_token", "|advantage| per generated token"))
    for ax, (key, label) in zip(axes, panels):
        meas = [(r["n"], r[key]) for r in rows if r[key] is not None]
        if meas:
            ax.plot(*zip(*meas), "o-", label="grader's groups (SFT model)")
        ax.plot(ns, [r[f"belief_{key}"] for r in rows], "s--", label="Beta beliefs on them")
        if key != "pass_at_n":
            for m, pts in points.items():
                if pts and (key == "zero_variance" or m in GRPO_ADVANTAGE):
                    ax.plot([p["n"] for p in pts], [p[key] for p in pts], "x", markersize=9,
                            label=f"{m}'s own groups (whole run)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns)
        ax.set_xticklabels([str(n) for n in ns])
        ax.set_xlabel("group size N")
        ax.set_title(label)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
