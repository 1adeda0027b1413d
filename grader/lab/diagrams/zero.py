"""ZeRO's stages as memory bars (chapters/sharding.md): what one rank holds of the
parameters, gradients and optimizer state at stages 0 to 3 on ``N`` data-parallel
ranks, each bar the planner's own number (:func:`~grader.lab.planner.sharded.
predict_plan`'s ``memory_terms``, the formulas the page prints above the figure).
Activations do not depend on the stage and are left out.
"""
from __future__ import annotations

from ..planner.cluster import PRESETS, with_devices
from ..planner.sharded import Plan, Transformer, predict_plan

__all__ = ["STATES", "zero_bars", "zero_diagram"]

STATES = ("params", "grads", "optimizer")
COLORS = {"params": "#4C72B0", "grads": "#DD8452", "optimizer": "#55A868"}
MIB = 2**20
CLUSTER = "8 GPUs NVLink"      # the page's: memory does not depend on the links


def zero_bars(model: Transformer, ranks: int) -> dict[int, dict[str, float]]:
    """{stage: {state: bytes on a rank}} for ZeRO stages 0 to 3 on ``ranks`` ranks."""
    gpus = with_devices(PRESETS[CLUSTER], ranks)
    out = {}
    for stage in range(4):
        terms = predict_plan(model, Plan(dp=ranks, zero=stage), gpus).memory_terms
        out[stage] = {k: terms[k] for k in STATES}
    return out


def zero_diagram(model: Transformer, ranks: tuple[int, ...] = (2, 4)):
    """One group of four stacked bars (stages 0 to 3) per number of ranks, in MiB."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(1, len(ranks), figsize=(3.4 * len(ranks) + 1.6, 3.0),
                             sharey=True, squeeze=False)
    for ax, n in zip(axes[0], ranks):
        for stage, held in zero_bars(model, n).items():
            bottom = 0.0
            for kind in STATES:
                h = held[kind] / MIB
                ax.bar(stage, h, 0.6, bottom=bottom, color=COLORS[kind],
                       edgecolor="white", linewidth=0.5, gid=f"zero-{n}-{stage}-{kind}")
                bottom += h
            ax.text(stage, bottom, f"{bottom:.2f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(4), [f"ZeRO-{s}" for s in range(4)], fontsize=8)
        ax.set_title(f"{n} data-parallel ranks", fontsize=9)
        ax.spines[["top", "right"]].set_visible(False)
    axes[0][0].set_ylabel("MiB on one rank (planner)", fontsize=8)
    axes[0][-1].legend(handles=[Patch(color=COLORS[k], label=k) for k in STATES],
                       fontsize=7, frameon=False, loc="upper left",
                       bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig
