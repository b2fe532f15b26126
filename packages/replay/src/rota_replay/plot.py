"""One figure per replay or comparison: wait CDFs by tier, and busy GPUs over time by policy."""

from __future__ import annotations

from pathlib import Path

from rota.contracts.common import TIER_ORDER

from rota_replay.replay import ReplayRun

__all__ = ["plot_runs"]

DAY = 86_400.0


def plot_runs(runs: list[ReplayRun], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: the CLI may run without a display
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.8), constrained_layout=True)
    colors = {"rota": "#d62728", "fifo": "#7f7f7f", "kueue": "#1f77b4", "slurm": "#2ca02c"}
    for ax, tier in zip(axes[:3], TIER_ORDER, strict=True):
        for run in runs:
            name = str(run.result["policy"])
            waits = sorted(max(w, 1.0) for w in run.waits_by_tier.get(tier.value, []))
            if not waits:
                continue
            ys = [(i + 1) / len(waits) for i in range(len(waits))]
            ax.step(waits, ys, where="post", label=name, color=colors.get(name))
        ax.set_xscale("log")
        ax.set_xlabel("wait (s, log; 0 shown at 1 s)")
        ax.set_ylabel("fraction of jobs")
        ax.set_title(f"{tier.value}: wait CDF")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
    ax = axes[3]
    for run in runs:
        name = str(run.result["policy"])
        xs = [t / DAY for t, _ in run.busy_timeline]
        ys = [b for _, b in run.busy_timeline]
        ax.plot(xs, ys, label=name, color=colors.get(name), linewidth=0.8)
    if runs:
        ax.axhline(runs[0].capacity, color="black", linestyle="--", linewidth=0.8, label="capacity")
    ax.set_xlabel("day of trace")
    ax.set_ylabel("busy GPUs")
    ax.set_title("busy GPUs over time")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.suptitle(title)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
