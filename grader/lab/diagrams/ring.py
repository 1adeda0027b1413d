"""Ring attention under a causal mask (chapters/context_expert.md): which query and key
chunks each rank holds, which chunk pairs it computes at which step of the ring, and
which are masked, for the contiguous and the zig-zag split.

The geometry is the ring scripts' (``ring_attention_{torch,paddle}.py``): the sequence
in ``2N`` chunks, rank ``r`` holding the chunks ``chunks_of(r, N, layout)`` (the
planner's :func:`~grader.lab.planner.context.chunks_of`, which the tests hold equal to
the scripts' own), at step ``s`` the key/value block of rank ``(r - s) mod N``, a pair
skipped when its key chunk comes after its query chunk, and masked inside when it is
the same chunk. The tests run the script's ``ring_attention`` and check that it
computes exactly the pairs :func:`ring_blocks` lists, and that these cover the causal
mask of the whole sequence once.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..planner.context import chunks_of as planner_chunks_of
from .draw import rank_color

__all__ = ["Block", "ring_blocks", "token_mask", "ring_diagram"]


@dataclass(frozen=True)
class Block:
    """One chunk pair a rank computes: its ``query`` chunk against the ``key`` chunk it
    holds at ring ``step``; ``diagonal``: the same chunk, masked inside (a query sees
    the keys up to its own)."""
    rank: int
    step: int
    query: int
    key: int
    diagonal: bool


def ring_blocks(world: int, layout: str, causal: bool = True,
                chunks_of=planner_chunks_of) -> list[Block]:
    """Every chunk pair the ring computes on ``world`` ranks, rank by rank, step by
    step, as the scripts' loop visits them."""
    out = []
    for rank in range(world):
        mine = chunks_of(rank, world, layout)
        for step in range(world):
            held = chunks_of((rank - step) % world, world, layout)
            for q in mine:
                for k in held:
                    if causal and k > q:            # every key after every query
                        continue
                    out.append(Block(rank, step, q, k, causal and k == q))
    return out


def token_mask(blocks: list[Block], world: int, chunk: int):
    """The (query, key) token pairs the blocks compute, as a boolean matrix of the whole
    sequence; a pair computed twice is an error (the ring would count it twice)."""
    import numpy as np

    n = 2 * world * chunk
    count = np.zeros((n, n), dtype=int)
    inner = np.tril(np.ones((chunk, chunk), dtype=int))
    for b in blocks:
        rows = slice(b.query * chunk, (b.query + 1) * chunk)
        cols = slice(b.key * chunk, (b.key + 1) * chunk)
        count[rows, cols] += inner if b.diagonal else 1
    if count.max() > 1:
        raise ValueError("a token pair is computed more than once")
    return count.astype(bool)


def _panel(ax, world: int, layout: str, chunks_of) -> list[Block]:
    from matplotlib.patches import Polygon, Rectangle

    n = 2 * world
    blocks = ring_blocks(world, layout, True, chunks_of)
    done = {(b.query, b.key) for b in blocks}
    for q in range(n):
        for k in range(n):
            if (q, k) not in done:
                ax.add_patch(Rectangle((k, q), 1, 1, facecolor="#F4F4F4", hatch="///",
                                       edgecolor="#CCCCCC", linewidth=0.5,
                                       gid=f"ring-{layout}-masked-{q}-{k}"))
    for b in blocks:
        gid = f"ring-{layout}-r{b.rank}-s{b.step}-q{b.query}-k{b.key}"
        style = dict(facecolor=rank_color(b.rank), edgecolor="white", linewidth=1.0,
                     alpha=0.85, gid=gid)
        if b.diagonal:      # keys up to the query's own: the lower triangle
            ax.add_patch(Polygon([(b.key, b.query), (b.key, b.query + 1),
                                  (b.key + 1, b.query + 1)], closed=True, **style))
            ax.add_patch(Polygon([(b.key, b.query), (b.key + 1, b.query),
                                  (b.key + 1, b.query + 1)], closed=True,
                                 facecolor="#F4F4F4", hatch="///", edgecolor="#CCCCCC",
                                 linewidth=0.5))
            x, y = b.key + 0.3, b.query + 0.72
        else:
            ax.add_patch(Rectangle((b.key, b.query), 1, 1, **style))
            x, y = b.key + 0.5, b.query + 0.5
        ax.text(x, y, str(b.step), ha="center", va="center", fontsize=7, color="white",
                weight="bold")
    owner = {c: r for r in range(world) for c in chunks_of(r, world, layout)}
    ax.set_xlim(0, n)
    ax.set_ylim(n, 0)
    ax.set_aspect("equal")
    ax.set_xticks([k + 0.5 for k in range(n)], [str(k) for k in range(n)], fontsize=7)
    ax.set_yticks([q + 0.5 for q in range(n)],
                  [f"{q} (rank {owner[q]})" for q in range(n)], fontsize=7)
    for label, q in zip(ax.get_yticklabels(), range(n)):
        label.set_color(rank_color(owner[q]))
    ax.tick_params(length=0)
    ax.xaxis.set_ticks_position("top")
    ax.set_xlabel("key chunk", fontsize=8)
    ax.xaxis.set_label_position("top")
    ax.set_ylabel("query chunk (its rank)", fontsize=8)
    for side in ax.spines.values():
        side.set_visible(False)
    pairs = [sum(1 for b in blocks if b.rank == r) for r in range(world)]
    held = "; ".join(f"{r}: {','.join(map(str, chunks_of(r, world, layout)))}"
                     for r in range(world))
    name = "zig-zag" if layout == "zigzag" else layout
    ax.set_title(f"{name}: rank holds chunks {held}\nchunk pairs per rank: "
                 f"{', '.join(map(str, pairs))}", fontsize=8)
    return blocks


def ring_diagram(world: int = 4, chunks_of=planner_chunks_of):
    """The causal mask of the sequence in ``2 world`` chunks, for the contiguous and the
    zig-zag split side by side: each computed chunk pair in its rank's colour with the
    ring step that computes it, the masked pairs hatched."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9.2, 4.6))
    for ax, layout in zip(axes, ("contiguous", "zigzag")):
        _panel(ax, world, layout, chunks_of)
    fig.text(0.5, 0.015, "number: the ring step at which the query's rank computes the "
             "pair (step 0: its own keys; at step s it holds rank r - s's)\nhatched: "
             "masked (a pair wholly after its queries is skipped; on the diagonal, the "
             "keys after each query)", ha="center", fontsize=7.5)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig
