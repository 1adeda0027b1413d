"""Megatron's f/g split of an MLP over ``tp`` ranks (chapters/tensor_parallel.md):
the column-parallel linear, then the row-parallel one, with the two operators around
them.

The geometry is the scripts': rank ``r`` holds the ``r``-th block of ``4w / tp``
hidden units (``mine_of(r, 4w / tp)`` in ``tp_torch.py`` and ``tp_paddle.py``), that
is columns of the first weight ``A`` ``(w, 4w)`` and rows of the second ``B`` ``(4w,
w)``, in the ``(in, out)`` convention of the page's text. :data:`OPERATORS` says what f
and g do in each pass; the tests run the scripts' ``Copy`` and ``Reduce`` and check
that they communicate in exactly those passes.
"""
from __future__ import annotations

from dataclasses import dataclass

from .draw import arrow, box, canvas, rank_color

__all__ = ["OPERATORS", "Shard", "mlp_shards", "fg_diagram"]

# what each operator does in each pass (Shoeybi et al. 2019)
OPERATORS = {"f": {"forward": "identity", "backward": "all-reduce"},
             "g": {"forward": "all-reduce", "backward": "identity"}}


@dataclass(frozen=True)
class Shard:
    """Rank ``rank``'s part of ``matrix`` (``A`` or ``B``): ``start:stop`` along
    ``axis`` (``"columns"`` of A, ``"rows"`` of B), of a matrix of ``shape``."""
    rank: int
    matrix: str
    axis: str
    start: int
    stop: int
    shape: tuple[int, int]


def mlp_shards(width: int, tp: int) -> list[Shard]:
    """Each rank's columns of ``A`` and rows of ``B``: the same hidden units."""
    hidden = 4 * width
    if tp < 1 or hidden % tp:
        raise ValueError(f"{hidden} hidden units do not split over tp={tp}")
    part = hidden // tp
    out = []
    for r in range(tp):
        out.append(Shard(r, "A", "columns", r * part, (r + 1) * part, (width, hidden)))
        out.append(Shard(r, "B", "rows", r * part, (r + 1) * part, (hidden, width)))
    return out


def fg_diagram(width: int, tp: int = 2):
    """One lane per rank: X whole on every rank, f, this rank's columns of A, GELU,
    its rows of B, a partial sum of Y, g, Y whole on every rank. Under f and g, what
    each does forward and backward."""
    shards = mlp_shards(width, tp)
    hidden, part = 4 * width, 4 * width // tp
    lane = 2.2
    top = tp * lane
    fig, ax = canvas(10, 1.3 + 1.05 * tp, (-0.2, 15.4), (-1.9, top + 0.3))
    mid = top / 2 - 0.1
    box(ax, 0, mid - 0.6, 1.6, 1.2, f"X\n(b, s, {width})\nwhole on\nevery rank",
        color="#EEEEEE")
    box(ax, 13.6, mid - 0.6, 1.7, 1.2, f"Y\n(b, s, {width})\nwhole on\nevery rank",
        color="#EEEEEE")
    for name, x in (("f", 2.4), ("g", 12.5)):
        ax.add_patch(_circle(x, mid, name))
        ax.text(x, mid, name, ha="center", va="center", fontsize=11, style="italic")
        for k, passname in enumerate(("forward", "backward")):
            ax.text(x, -0.75 - 0.45 * k, f"{name} {passname}: {OPERATORS[name][passname]}",
                    ha="center", va="center", fontsize=7.5, gid=f"fg-{name}-{passname}")
    arrow(ax, (1.6, mid), (2.1, mid))
    arrow(ax, (12.8, mid), (13.6, mid))
    for r in range(tp):
        y = top - (r + 1) * lane + 0.35
        color = rank_color(r)
        ax.text(3.6, y + 1.3, f"rank {r}", fontsize=8, color=color, weight="bold")
        a = next(s for s in shards if s.rank == r and s.matrix == "A")
        b = next(s for s in shards if s.rank == r and s.matrix == "B")
        # A (w, 4w): its columns drawn left to right, this rank's block filled
        ax_, aw, ah = 3.6, 2.4, 0.8
        box(ax, ax_, y + 0.35, aw, ah, color="white", linewidth=0.6)
        box(ax, ax_ + aw * a.start / hidden, y + 0.35, aw * (a.stop - a.start) / hidden,
            ah, color=color, gid=f"fg-A-{r}", alpha=0.85)
        ax.text(ax_ + aw / 2, y + 0.1, f"A[:, {a.start}:{a.stop}]  ({width} x {part})",
                ha="center", va="center", fontsize=7)
        box(ax, 6.6, y + 0.45, 1.1, 0.6, "GELU", fontsize=7)
        # B (4w, w): its rows drawn top to bottom, this rank's block filled
        bx, bw, bh = 8.3, 0.8, 1.5
        box(ax, bx, y, bw, bh, color="white", linewidth=0.6)
        box(ax, bx, y + bh * (1 - b.stop / hidden), bw, bh * (b.stop - b.start) / hidden,
            color=color, gid=f"fg-B-{r}", alpha=0.85)
        ax.text(bx + bw / 2, y - 0.22, f"B[{b.start}:{b.stop}, :]  ({part} x {width})",
                ha="center", va="center", fontsize=7)
        box(ax, 9.8, y + 0.3, 1.9, 0.9, f"Y{r}: partial sum\n(b, s, {width})", fontsize=7,
            color="#FFFFFF", edgecolor=color)
        arrow(ax, (2.7, mid), (ax_, y + 0.75), color=color)
        arrow(ax, (ax_ + aw, y + 0.75), (6.6, y + 0.75), color=color)
        arrow(ax, (7.7, y + 0.75), (bx, y + 0.75), color=color)
        arrow(ax, (bx + bw, y + 0.75), (9.8, y + 0.75), color=color)
        arrow(ax, (11.7, y + 0.75), (12.2, mid), color=color)
    ax.text(7.6, -1.65, f"{hidden} hidden units, {part} on each of {tp} ranks: one "
            "all-reduce forward (g) and one backward (f) per column-then-row pair",
            ha="center", va="center", fontsize=7.5)
    fig.tight_layout()
    return fig


def _circle(x: float, y: float, name: str):
    from matplotlib.patches import Circle

    return Circle((x, y), 0.3, facecolor="#FFF2CC", edgecolor="black", linewidth=0.8,
                  gid=f"fg-op-{name}")
