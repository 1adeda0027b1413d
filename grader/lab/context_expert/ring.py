"""Reading a ring-attention run (what ``ring_attention_{torch,paddle}.py`` write), how
even its work is across ranks, the sentence about it, and its figure."""
from __future__ import annotations

import statistics
from dataclasses import dataclass

__all__ = ["RingRow", "ring_rows", "balance", "balance_words", "ring_figure"]


@dataclass(frozen=True)
class RingRow:
    """One rank in one configuration: the chunk pairs it computed and its CPU time
    computing them, in seconds: ``busy`` the fastest of the timed repeats (the other
    processes on a shared machine can only lengthen a repeat), ``busy_median`` and
    ``busy_slowest`` beside it; ``wall`` the median wall time of the whole ring."""
    layout: str
    causal: bool
    rank: int
    pairs: int
    busy: float
    busy_median: float
    busy_slowest: float
    wall: float
    max_diff: float

    @property
    def config(self) -> str:
        return f"{self.layout}, {'causal' if self.causal else 'no mask'}"


def ring_rows(run: dict) -> list[RingRow]:
    rows = []
    for conf in run["runs"]:
        for r in conf["ranks"]:
            rows.append(RingRow(conf["layout"], conf["causal"], r["rank"], r["pairs"],
                                min(r["busy_s"]), statistics.median(r["busy_s"]),
                                max(r["busy_s"]), statistics.median(r["wall_s"]),
                                r["max_diff"]))
    return rows


def _of(rows: list[RingRow], layout: str, causal: bool) -> list[RingRow]:
    picked = sorted((r for r in rows if r.layout == layout and r.causal == causal),
                    key=lambda r: r.rank)
    if not picked:
        raise ValueError(f"no {layout} run {'with' if causal else 'without'} a mask")
    return picked


def balance(rows: list[RingRow], layout: str, causal: bool) -> dict[str, float]:
    """How uneven one configuration is: the busiest rank's work over the mean rank's,
    in chunk pairs (exact) and in CPU time (measured: each rank's fastest repeat), and
    the ring's wall time (the slowest rank's median)."""
    picked = _of(rows, layout, causal)
    pairs = [r.pairs for r in picked]
    busy = [r.busy for r in picked]
    return {"pairs_max": max(pairs), "pairs_min": min(pairs),
            "pairs_ratio": max(pairs) / statistics.mean(pairs),
            "busy_ratio": max(busy) / statistics.mean(busy) if sum(busy) > 0 else 1.0,
            "total_pairs": sum(pairs), "wall": max(r.wall for r in picked)}


def balance_words(rows: list[RingRow]) -> str:
    """What the causal runs show about the two layouts, in words chosen from the values.
    Chunk pairs are counted exactly; times are measured on a shared machine, so the
    sentence says whether they agree with the counts rather than assuming they do."""
    c, z = balance(rows, "contiguous", True), balance(rows, "zigzag", True)
    world = len(_of(rows, "zigzag", True))
    text = (f"With a causal mask on {world} ranks, the contiguous split gives the "
            f"busiest rank {c['pairs_max']} chunk pairs against the least busy's "
            f"{c['pairs_min']} ({c['pairs_ratio']:.2f} times the mean); the zig-zag "
            f"split computes the same {z['total_pairs']} pairs in all")
    text += (", as many on every rank" if z["pairs_max"] == z["pairs_min"] else
             f", {z['pairs_min']} to {z['pairs_max']} per rank")
    text += ". "
    if c["busy_ratio"] > z["busy_ratio"] * 1.1:
        text += (f"The measured CPU time follows: the busiest rank computed for "
                 f"{c['busy_ratio']:.2f} times the mean rank's time in the contiguous "
                 f"split, {z['busy_ratio']:.2f} times in the zig-zag split.")
    else:
        text += (f"The measured CPU time does not show it clearly this time (the busiest "
                 f"rank at {c['busy_ratio']:.2f} times the mean rank's time in the "
                 f"contiguous split, {z['busy_ratio']:.2f} times in the zig-zag split): "
                 f"at these sizes the machine's noise is as large as the difference.")
    return text


def ring_figure(rows: list[RingRow], title: str = ""):
    """Per rank, for the causal runs of both layouts: chunk pairs computed (left) and
    CPU time computing them (right: the fastest repeat, the whisker up to the slowest)."""
    import matplotlib.pyplot as plt

    layouts = [("contiguous", "#DD8452"), ("zigzag", "#4C72B0")]
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 2.8))
    for k, (layout, color) in enumerate(layouts):
        picked = _of(rows, layout, True)
        xs = [r.rank + (k - 0.5) * 0.38 for r in picked]
        left.bar(xs, [r.pairs for r in picked], 0.36, color=color, label=layout)
        ms = [1e3 * r.busy for r in picked]
        err = [[0.0] * len(picked), [1e3 * (r.busy_slowest - r.busy) for r in picked]]
        right.bar(xs, ms, 0.36, color=color, yerr=err, capsize=2, label=layout)
    world = len(_of(rows, "zigzag", True))
    for ax, label in ((left, "chunk pairs computed"), (right, "CPU ms computing")):
        ax.set_xticks(range(world), [f"rank {r}" for r in range(world)], fontsize=8)
        ax.set_ylabel(label, fontsize=9)
    left.legend(fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
