"""Figures of the automatic-parallelism chapter: placements on a mesh, the collective
sweep with its fitted line, and the planner's predictions against the measured steps."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

from grader.lab import planner as P

__all__ = ["placements_figure", "sweep_figure", "prediction_figure"]

_RANK_COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52"]


def _block(ax, x, y, w, h, color, label="", alpha=0.85):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="black", lw=0.8,
                           alpha=alpha))
    if label:
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=8,
                color="white")


def _outline(ax, x, y, w, h):
    ax.add_patch(Rectangle((x, y), w, h, fill=False, edgecolor="grey", lw=0.8, ls="--"))


def placements_figure():
    """Left: what each rank of a 1-D mesh of 2 holds of one matrix under each placement.
    Right: a 2 x 2 (dp, tp) mesh: the batch split along dp, a column-split weight along
    tp, replicated along dp."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4), gridspec_kw={"width_ratios": [3, 2]})
    cases = ["Shard(0)", "Shard(1)", "Replicate()", "Partial()"]
    for i, name in enumerate(cases):
        x0 = i * 2.6
        a.text(x0 + 1.05, 2.45, name, ha="center", fontsize=9)
        for r in range(2):
            y0 = 1.2 - r * 1.3
            _outline(a, x0, y0, 2.1, 1.0)
            c = _RANK_COLORS[r]
            if name == "Shard(0)":
                _block(a, x0, y0 + (0.5 if r == 0 else 0), 2.1, 0.5, c, f"rank {r}")
            elif name == "Shard(1)":
                _block(a, x0 + r * 1.05, y0, 1.05, 1.0, c, f"rank {r}")
            elif name == "Replicate()":
                _block(a, x0, y0, 2.1, 1.0, c, f"rank {r}: all")
            else:
                _block(a, x0, y0, 2.1, 1.0, c, f"rank {r}: addend {r}", alpha=0.55)
    a.text(3 * 2.6 + 1.05, -0.35, "matrix = addend 0 + addend 1", ha="center", fontsize=8)
    a.set_xlim(-0.2, 4 * 2.6)
    a.set_ylim(-0.5, 2.7)
    a.axis("off")
    a.set_title("a 1-D mesh of 2 ranks: what each rank holds (dashed: the whole matrix)",
                fontsize=9)

    for dp in range(2):
        for tp in range(2):
            rank = dp * 2 + tp
            x0, y0 = tp * 2.4, (1 - dp) * 1.9
            b.add_patch(Rectangle((x0 - 0.1, y0 - 0.1), 2.2, 1.7, fill=False, lw=1.2))
            b.text(x0 + 1.0, y0 + 1.45, f"rank {rank}: dp {dp}, tp {tp}", ha="center",
                   fontsize=8)
            # activations (batch, features) [Shard(0), Replicate()]: rows by dp
            _outline(b, x0, y0, 0.8, 1.2)
            _block(b, x0, y0 + (0.6 if dp == 0 else 0), 0.8, 0.6, _RANK_COLORS[rank],
                   "x")
            # weight (out, in) [Replicate(), Shard(0)]: output features by tp
            _outline(b, x0 + 1.1, y0, 0.8, 1.2)
            _block(b, x0 + 1.1, y0 + (0.6 if tp == 0 else 0), 0.8, 0.6,
                   _RANK_COLORS[rank], "W")
    b.set_xlim(-0.3, 4.8)
    b.set_ylim(-0.3, 3.8)
    b.axis("off")
    b.set_title("a 2 x 2 mesh (dp, tp): x is [Shard(0), Replicate()],\n"
                "W (out, in) is [Replicate(), Shard(0)]", fontsize=9)
    fig.tight_layout()
    return fig


def sweep_figure(fits: dict[str, P.LinkFit]):
    """Measured collectives (points) and the fitted alpha-beta model (lines), per
    framework: seconds against bytes, log-log."""
    fig, axes = plt.subplots(1, len(fits), figsize=(5 * len(fits), 3.4), squeeze=False)
    styles = {"all_reduce": "o", "all_gather": "s"}
    for ax, (label, fit) in zip(axes[0], fits.items()):
        series = sorted({(op, p) for op, p, _, _ in fit.samples})
        for i, (op, p) in enumerate(series):
            pts = sorted((n, t) for o, q, n, t in fit.samples if (o, q) == (op, p))
            n = np.array([x for x, _ in pts], float)
            color = f"C{i}"
            ax.loglog(n, [t * 1e3 for _, t in pts], styles.get(op, "^"), color=color,
                      label=f"{op}, {p} ranks")
            grid = np.geomspace(n.min(), n.max(), 30)
            ax.loglog(grid, [fit.predict(op, p, g) * 1e3 for g in grid], "-", color=color,
                      lw=1)
        ax.set_title(f"{label}: latency {fit.latency * 1e6:.0f} us per step, "
                     f"{fit.bandwidth / 1e9:.2g} GB/s", fontsize=9)
        ax.set_xlabel("bytes of the full tensor")
        ax.set_ylabel("ms (points: measured, lines: fit)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def prediction_figure(rows_by_label: dict[str, list]):
    """Predicted and measured step time of each plan (the fastest step, whiskers to the
    range of the measured steps), per framework."""
    fig, axes = plt.subplots(1, len(rows_by_label), figsize=(5 * len(rows_by_label), 3.4),
                             squeeze=False, sharey=True)
    for ax, (label, rows) in zip(axes[0], rows_by_label.items()):
        y = np.arange(len(rows))
        ax.barh(y - 0.2, [r.predicted.step_s * 1e3 for r in rows], 0.4, label="predicted")
        med = np.array([r.measured_s * 1e3 for r in rows])
        ax.barh(y + 0.2, med, 0.4, label="measured (fastest step)")
        err = np.array([[m - r.low_s * 1e3 for m, r in zip(med, rows)],
                        [r.high_s * 1e3 - m for m, r in zip(med, rows)]])
        ax.errorbar(med, y + 0.2, xerr=err, fmt="none", ecolor="black", lw=0.8,
                    capsize=2)
        ax.set_yticks(y, [r.strategy.plan + (" *" if r.calibrates else "") for r in rows])
        ax.set_xlabel("ms per training step")
        ax.set_title(label, fontsize=9)
    axes[0][0].invert_yaxis()      # the table's order, top down (the panels share y)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=2, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return fig
