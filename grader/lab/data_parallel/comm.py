"""Figures for what data-parallel training communicates (the chapter's launcher scripts
measure it; this module only draws).

- :func:`plot_buckets`: which parameters travel together, one row per setting, one box
  per bucket (DDP) or group (Paddle), each parameter a segment as wide as its bytes.
- :func:`plot_allreduces`: backward passes and all-reduces per run, side by side, for
  gradient accumulation with and without ``no_sync``.
"""
from __future__ import annotations

from typing import Any, Sequence

__all__ = ["plot_buckets", "plot_allreduces"]

_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860")


def plot_buckets(rows: Sequence[tuple[str, Sequence[Sequence[str]]]], sizes: dict[str, int],
                 title: str = "", ax: Any = None) -> Any:
    """``rows``: (label, buckets), each bucket the names of its parameters in the order
    they are packed; ``sizes``: bytes per parameter name. Buckets are drawn left to right
    in the order they are all-reduced."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    names = list(sizes)
    color = {n: _COLORS[i % len(_COLORS)] for i, n in enumerate(names)}
    mib = 2 ** 20
    total = sum(sizes.values()) / mib
    gap = 0.04 * total
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.7 + 0.55 * len(rows)))
    for y, (label, buckets) in enumerate(rows):
        x = 0.0
        for i, bucket in enumerate(buckets):
            start = x
            for name in bucket:
                w = sizes[name] / mib
                ax.add_patch(Rectangle((x, y - 0.3), w, 0.6, facecolor=color[name],
                                       edgecolor="white", linewidth=0.5))
                x += w
            ax.add_patch(Rectangle((start, y - 0.36), x - start, 0.72, fill=False,
                                   edgecolor="black", linewidth=1.0))
            if x - start > 0.06 * total:            # the bucket's number inside it
                ax.text((start + x) / 2, y, f"{i}", ha="center", va="center", fontsize=8,
                        color="white", fontweight="bold")
            else:                                   # too thin: above it
                ax.text((start + x) / 2, y - 0.42, f"{i}", ha="center", va="bottom",
                        fontsize=7)
            x += gap
    ax.set_xlim(-gap, total + gap * (1 + max(len(b) for _, b in rows)))
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
    ax.set_xlabel("MiB of gradients (boxes: buckets, numbered in the order they are "
                  "all-reduced)")
    ax.legend(handles=[Patch(color=color[n], label=f"{n} ({sizes[n] / 1024:g} KiB)")
                       for n in names], ncol=len(names), fontsize="small", frameon=False,
              loc="lower left", bbox_to_anchor=(0, 1.0))
    if title:
        ax.set_title(title, fontsize="medium", loc="left", pad=22)
    ax.figure.tight_layout()
    return ax


def plot_allreduces(runs: Sequence[dict], title: str = "", ax: Any = None) -> Any:
    """``runs``: dicts with ``label``, ``backwards`` and ``allreduces`` (counts over the
    same epoch); bars side by side per run."""
    import matplotlib.pyplot as plt
    import numpy as np

    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 2.8))
    x = np.arange(len(runs))
    for offset, key, color in ((-0.2, "backwards", "#8C8C8C"), (0.2, "allreduces",
                                                                "#55A868")):
        values = [r[key] for r in runs]
        bars = ax.bar(x + offset, values, width=0.4, color=color,
                      label="backward passes" if key == "backwards" else "all-reduces")
        ax.bar_label(bars, fontsize=8)
    ax.set_xticks(x, [r["label"] for r in runs], fontsize=8)
    ax.set_ylabel("per epoch, per rank")
    ax.legend(fontsize="small", frameon=False)
    if title:
        ax.set_title(title, fontsize="medium", loc="left")
    ax.figure.tight_layout()
    return ax
