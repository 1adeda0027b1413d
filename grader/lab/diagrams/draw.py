"""The few shapes every diagram draws: a labelled box, an arrow, a colour per rank.

Each shape that stands for a piece of the data (a rank's shard, a computed block, a
mesh cell) is drawn with a ``gid`` naming what it shows, so that the tests read the
drawing back (:func:`drawn`) and compare it with the code the page teaches, rather than
trusting that the picture and the data agree.
"""
from __future__ import annotations

__all__ = ["RANK_COLORS", "rank_color", "canvas", "box", "arrow", "drawn"]

# one colour per rank, rank 0 first (matplotlib's tab10 without its grey)
RANK_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860",
               "#DA8BC3", "#CCB974", "#64B5CD")


def rank_color(rank: int) -> str:
    return RANK_COLORS[rank % len(RANK_COLORS)]


def canvas(width: float, height: float, xlim: tuple[float, float],
           ylim: tuple[float, float]):
    """One figure with one axis-free panel in data units."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height))
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.axis("off")
    return fig, ax


def box(ax, x: float, y: float, w: float, h: float, text: str = "", color: str = "white",
        gid: str | None = None, fontsize: float = 8, **kw):
    """A rectangle with its lower left corner at (x, y), the text at its centre (its
    gid, if any, is the rectangle's with ``:text`` added)."""
    from matplotlib.patches import Rectangle

    rect = Rectangle((x, y), w, h, facecolor=color, edgecolor=kw.pop("edgecolor", "black"),
                     linewidth=kw.pop("linewidth", 0.8), gid=gid, **kw)
    ax.add_patch(rect)
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize,
                gid=None if gid is None else f"{gid}:text")
    return rect


def arrow(ax, start: tuple[float, float], end: tuple[float, float], color: str = "black",
          text: str = "", rad: float = 0.0, style: str = "-", fontsize: float = 7):
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=10,
                                 color=color, linestyle=style, linewidth=1.0,
                                 connectionstyle=f"arc3,rad={rad}"))
    if text:
        ax.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2, text, ha="center",
                va="center", fontsize=fontsize, color=color, backgroundcolor="white")


def drawn(fig, prefix: str) -> dict[str, object]:
    """The patches and texts of ``fig`` (its panels' and its own) whose gid starts with
    ``prefix``, by gid."""
    out = {}
    artists = [a for ax in fig.axes for a in [*ax.patches, *ax.texts]] + list(fig.texts)
    for artist in artists:
        gid = artist.get_gid()
        if gid and gid.startswith(prefix):
            if gid in out:
                raise ValueError(f"two artists are drawn as {gid!r}")
            out[gid] = artist
    return out
