"""The page's table and figures: each schedule's timeline, and the schedules side by
side (bubble: formula, the order replayed, measured; activations in flight)."""
from __future__ import annotations

import textwrap

from .measure import ScheduleRow, rows, timeline

__all__ = ["schedule_table", "timelines_figure", "comparison_figure", "MIB"]

MIB = 2**20


def schedule_table(rows_by_framework: dict[str, list[ScheduleRow]]) -> str:
    """Every schedule of every run: the bubble by formula, by replaying the run's order
    (equal stages; the stages' measured times) and measured (median of the timed steps,
    their range), and the activations each rank held at most."""
    # at most 100 characters a line (an output box cuts what is longer): the framework
    # heads its rows, and the notes are wrapped
    head = (f"{'schedule':<24} {'m':>2} {'v':>1} {'formula':>7} {'equal':>6} "
            f"{'unequal':>7} {'measured':>8} {'(range)':<11} {'held':<6} MiB held")
    lines = [head, "-" * len(head)]
    for fw, rs in rows_by_framework.items():
        lines.append(f"{fw}:")
        for r in rs:
            spread = f"({min(r.bubbles):.0%}-{max(r.bubbles):.0%})"
            held = ", ".join(str(n) for n in r.in_flight)
            mib = ", ".join(f"{b / MIB:.2f}" for b in r.in_flight_bytes)
            lines.append(f"{r.schedule:<24} {r.micro:>2} {r.virtual:>1} "
                         f"{r.formula:>7.1%} {r.equal:>6.1%} {r.unequal:>7.1%} "
                         f"{r.bubble:>8.1%} {spread:<11} {held:<6} {mib}")
    notes = ("formula, equal, unequal, measured: the idle share of a step (the bubble). "
             "equal: the run's own order replayed on equal stages with free transfers "
             "(where W is split off, f = b = w); unequal: replayed on the stages' "
             "measured pass times. held: micro-batches one rank held activations of at "
             "most, per rank (one per stage it holds); MiB held: the bytes their "
             "forwards saved.")
    lines += textwrap.wrap(notes, 96)
    return "\n".join(lines)


def timelines_figure(run: dict, micro: int, title: str = ""):
    """The last timed step of each schedule with ``micro`` micro-batches, one panel per
    schedule, each from its step's start, all panels on one time range (the longest
    step's): a shorter step is a shorter row, as it is in time."""
    import matplotlib.pyplot as plt

    picked = [e for e in run["runs"] if e[0]["micro"] == micro]
    if not picked:
        raise ValueError(f"the run has no schedule with {micro} micro-batches")
    fig, axes = plt.subplots(len(picked), 1, figsize=(9, 1.35 * len(picked) + 0.7),
                             squeeze=False)
    found = {(r.schedule, r.micro): r for r in rows(run)}
    for ax, everyone in zip(axes[:, 0], picked):
        row = found[(everyone[0]["schedule"], micro)]
        tl = timeline([list(map(tuple, r["steps"][-1])) for r in everyone])
        tl.plot(ax=ax, labels=True)
        ax.set_title(f"{row.schedule}: idle {row.bubbles[-1]:.0%} of this step "
                     f"(formula {row.formula:.0%}, this order on its stages' times "
                     f"{row.unequal:.0%})", fontsize=9, loc="left")
        if ax is not axes[-1, 0]:
            ax.set_xlabel("")
    lo = min(ax.get_xlim()[0] for ax in axes[:, 0])
    hi = max(ax.get_xlim()[1] for ax in axes[:, 0])
    for ax in axes[:, 0]:
        ax.set_xlim(lo, hi)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def comparison_figure(rows_by_framework: dict[str, list[ScheduleRow]], micro: int):
    """Left: each schedule's bubble with ``micro`` micro-batches, by formula, replayed
    on the measured stage times, and measured (whiskers: the timed steps' range).
    Right: the most activation bytes one rank held."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.9))
    names = list(dict.fromkeys(r.schedule for rs in rows_by_framework.values()
                               for r in rs))
    groups = [(fw, r) for fw, rs in rows_by_framework.items() for r in rs
              if r.micro == micro]
    width = 0.8 / max(1, len(rows_by_framework))
    for k, fw in enumerate(rows_by_framework):
        mine = {r.schedule: r for f, r in groups if f == fw}
        xs = [names.index(n) + (k - (len(rows_by_framework) - 1) / 2) * width
              for n in mine]
        rs = list(mine.values())
        measured = [r.bubble for r in rs]
        err = [[r.bubble - min(r.bubbles) for r in rs],
               [max(r.bubbles) - r.bubble for r in rs]]
        left.bar(xs, measured, width * 0.9, yerr=err, capsize=2, alpha=0.75,
                 label=f"{fw} measured")
        left.scatter(xs, [r.unequal for r in rs], marker="o", color="black", zorder=3,
                     s=14, label="order on measured stage times" if k == 0 else None)
        left.scatter(xs, [r.formula for r in rs], marker="_", color="red", zorder=3,
                     s=160, label="formula (equal stages)" if k == 0 else None)
        right.bar(xs, [max(r.in_flight_bytes) / MIB for r in rs], width * 0.9,
                  alpha=0.75, label=fw)
    for ax in (left, right):
        ax.set_xticks(range(len(names)), [n.replace(" ", "\n", 1) for n in names],
                      fontsize=7)
    left.set_ylabel(f"idle share of the step (m = {micro})")
    left.set_ylim(0, 1)
    left.legend(fontsize=7, frameon=False, loc="lower left", bbox_to_anchor=(0, 1.0),
                ncol=2)
    right.set_ylabel("activations held, busiest rank (MiB)")
    right.legend(fontsize=7, frameon=False, loc="lower left", bbox_to_anchor=(0, 1.0),
                 ncol=2)
    fig.tight_layout()
    return fig
