"""The layers page's figure: activation memory per rank against the tensor-parallel
degree, measured and predicted."""
from __future__ import annotations

import matplotlib.pyplot as plt

from ..planner.layers import LayerPlan, activation_bytes
from .results import MODEL


def activation_points(runs: list[dict]) -> dict[str, dict[int, float]]:
    """{how: {tp: activation bytes of a rank}}, the one-process model as tp 1 of each,
    for the runs on one tp group (dp 1)."""
    out: dict[str, dict[int, float]] = {}
    for r in runs:
        if r.get("dp", 1) == 1:
            out.setdefault(r["how"], {1: r["ref_activations"]})[r["tp"]] = r["activations"]
    return out


def activation_figure(runs: list[dict], title: str):
    points = activation_points(runs)
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for (how, by_tp), marker in zip(sorted(points.items()), "osd^"):
        tps = sorted(by_tp)
        ax.plot(tps, [by_tp[t] / 2**20 for t in tps], marker, label=f"{how}, measured")
        sp, vocab = "SP" in how, how != "by hand"
        ax.plot(tps, [activation_bytes(MODEL, LayerPlan(t, sp and t > 1,
                                                        vocab_parallel=vocab and t > 1))
                      / 2**20 for t in tps], "-", color=ax.lines[-1].get_color(),
                alpha=0.5, label=f"{how}, planner")
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4], ["1", "2", "4"])
    ax.set_xlabel("tensor-parallel degree (ranks)")
    ax.set_ylabel("saved activations per rank (MiB)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
