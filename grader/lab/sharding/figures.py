"""The sharding chapter's figures: memory per rank as stacked bars (measured, and the
planner's formula beside it), pipeline timelines, and the bubble against its formula."""
from __future__ import annotations

from .measure import KINDS, MemoryRow, PipeRow, pipeline_rows, timeline
from grader.lab.core.timeline import COLORS

__all__ = ["memory_figure", "pipeline_figure", "bubble_figure"]

KIND_COLORS = {"params": "#4C72B0", "grads": "#DD8452", "optimizer": "#55A868",
               "activations": "#C7C7C7"}
MIB = 2**20


def memory_figure(rows_by_world: dict[str, list[MemoryRow]], title: str = ""):
    """One panel per run: for each strategy a stacked bar of what the busiest rank held
    (measured) and, hatched beside it, what the planner's formula says."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(1, len(rows_by_world), sharey=True, squeeze=False,
                             figsize=(4.2 * len(rows_by_world) + 1.5, 3.4))
    for ax, (label, rows) in zip(axes[0], rows_by_world.items()):
        for i, row in enumerate(rows):
            for offset, values, hatch in ((-0.2, row.measured, None),
                                          (0.2, row.predicted, "//")):
                bottom = 0.0
                for kind in KINDS:
                    h = values[kind] / MIB
                    ax.bar(i + offset, h, 0.38, bottom=bottom, color=KIND_COLORS[kind],
                           hatch=hatch, edgecolor="white" if hatch is None else "black",
                           linewidth=0.4)
                    bottom += h
        ax.set_xticks(range(len(rows)), [r.strategy for r in rows], fontsize=8)
        ax.set_title(label, fontsize=9)
    axes[0][0].set_ylabel("MiB on the busiest rank")
    handles = [Patch(color=KIND_COLORS[k], label=k) for k in KINDS]
    handles += [Patch(facecolor="white", edgecolor="black", label="measured (left)"),
                Patch(facecolor="white", edgecolor="black", hatch="//",
                      label="formula (right)")]
    axes[0][-1].legend(handles=handles, fontsize=7, frameon=False, loc="upper left",
                       bbox_to_anchor=(1.01, 1.0))
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def pipeline_figure(run: dict, micro: int, title: str = ""):
    """The last timed step of each schedule with ``micro`` micro-batches, one panel per
    schedule, on the run's own clock (milliseconds from the step's first start)."""
    import matplotlib.pyplot as plt

    COLORS.setdefault("forward", "#4C72B0")
    COLORS.setdefault("backward", "#DD8452")
    picked = [e for e in run["runs"] if e[0]["micro"] == micro]
    if not picked:
        raise ValueError(f"the run has no schedule with {micro} micro-batches")
    fig, axes = plt.subplots(len(picked), 1, figsize=(8, 1.5 * len(picked) + 0.6),
                             sharex=True, squeeze=False)
    rows = {(r.schedule, r.micro): r for r in pipeline_rows(run)}
    for ax, everyone in zip(axes[:, 0], picked):
        name = everyone[0]["schedule"]
        row = rows[(name, micro)]
        tl = timeline([r["steps"][-1] for r in everyone], "")
        tl.plot(ax=ax, labels=True)
        ax.set_title(f"{name}: idle {row.bubbles[-1]:.0%} of this step "
                     f"(formula {row.formula:.0%})", fontsize=9, loc="left")
        if ax is not axes[-1, 0]:
            ax.set_xlabel("")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def bubble_figure(rows_by_framework: dict[str, list[PipeRow]]):
    """Measured bubble (median over the timed steps, range as whiskers) against the
    formula, by number of micro-batches."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    markers = {"GPipe": "o", "1F1B": "s"}
    shift = {"GPipe": -0.04, "1F1B": 0.04}
    micros = set()
    for fw, rows in rows_by_framework.items():
        for sched in ("GPipe", "1F1B"):
            pts = sorted((r.micro, r) for r in rows if r.schedule == sched)
            if not pts:
                continue
            xs = [m * (1 + shift[sched]) for m, _ in pts]
            ys = [r.bubble for _, r in pts]
            lo = [r.bubble - min(r.bubbles) for _, r in pts]
            hi = [max(r.bubbles) - r.bubble for _, r in pts]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker=markers[sched], capsize=3,
                        linestyle="none", label=f"{fw} {sched}")
            micros.update(m for m, _ in pts)
            stages = pts[0][1].stages
    xs = sorted(micros)
    ax.plot(xs, [(stages - 1) / (m + stages - 1) for m in xs], "k--",
            label="(p-1)/(m+p-1)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(m) for m in xs])
    ax.set_xlabel("micro-batches per step (m)")
    ax.set_ylabel("idle share of the step")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig
