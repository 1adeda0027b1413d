"""The fitting chapter's figures: memory over one training step, activations per layer
against the formula, memory by setting as stacked bars beside the model states, the
recomputation trade-off, and loss curves."""
from __future__ import annotations

import statistics

__all__ = ["step_figure", "layer_figure", "memory_bars", "tradeoff_figure", "loss_figure"]

MIB = 2**20
KIND_COLORS = {"params": "#4C72B0", "grads": "#DD8452", "optimizer": "#55A868",
               "activations": "#C7C7C7"}


def step_figure(curves: dict[str, list[tuple[float, int]]], title: str = ""):
    """Bytes held for backward over one step, one line per run (rising through the
    forward pass, falling through the backward pass), each run's time as a share of its
    own step: the runs took from tens of ms to over a second (Paddle's hooks, a busy
    machine), and on one ms axis the fast runs' curves were squashed against the left
    edge. The shape, not the duration, is the lesson."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3))
    for label, curve in curves.items():
        if not curve:
            continue
        t0, span = curve[0][0], (curve[-1][0] - curve[0][0]) or 1.0
        ax.step([(t - t0) / span for t, _ in curve], [b / MIB for _, b in curve],
                where="post", label=label)
    ax.set_xlabel("share of the run's step (each run on its own clock)")
    ax.set_ylabel("MiB saved for backward")
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def layer_figure(measured: dict[str, dict[str, int]], predicted: dict[str, float],
                 title: str = ""):
    """Per layer: each framework's measured bytes, and the formula's prediction."""
    import matplotlib.pyplot as plt

    layers = list(predicted)
    groups = list(measured) + ["formula"]
    width = 0.8 / len(groups)
    fig, ax = plt.subplots(figsize=(7, 3))
    for g, name in enumerate(groups):
        values = predicted if name == "formula" else measured[name]
        ax.bar([i + (g - (len(groups) - 1) / 2) * width for i in range(len(layers))],
               [values.get(layer, 0) / MIB for layer in layers], width, label=name,
               hatch="//" if name == "formula" else None,
               color="white" if name == "formula" else None, edgecolor="black",
               linewidth=0.5)
    ax.set_xticks(range(len(layers)), layers, fontsize=8)
    ax.set_ylabel("MiB saved for backward")
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def memory_bars(rows: dict[str, dict[str, float]], title: str = ""):
    """One stacked bar per setting: parameters, gradients, optimizer state, activations."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(1.3 * len(rows) + 2.5, 3.2))
    for i, values in enumerate(rows.values()):
        bottom = 0.0
        for kind, color in KIND_COLORS.items():
            h = values.get(kind, 0) / MIB
            ax.bar(i, h, 0.6, bottom=bottom, color=color, edgecolor="white",
                   linewidth=0.4)
            bottom += h
    ax.set_xticks(range(len(rows)), list(rows), fontsize=7)
    ax.set_ylabel("MiB")
    ax.legend(handles=[Patch(color=c, label=k) for k, c in KIND_COLORS.items()],
              fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1))
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def tradeoff_figure(points: dict[str, dict[str, tuple[float, list[float]]]]):
    """Per framework and mode: bytes saved for backward against the step's time (median
    of the repeats, whiskers from the fastest to the slowest)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    for fw, modes in points.items():
        for mode, (saved, times) in modes.items():
            med = statistics.median(times) * 1e3
            ax.errorbar(saved / MIB, med, yerr=[[med - min(times) * 1e3],
                                                [max(times) * 1e3 - med]],
                        fmt="o", capsize=3, color="#4C72B0" if fw == "PyTorch" else
                        "#C44E52")
            ax.annotate(f"{fw}: {mode}", (saved / MIB, med), fontsize=7,
                        xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("MiB saved for backward")
    ax.set_ylabel("ms per forward and backward")
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    return fig


def loss_figure(curves: dict[str, list[float]], title: str = ""):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    for label, losses in curves.items():
        ax.plot(range(1, len(losses) + 1), losses, label=label, marker=".")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend(fontsize=8, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
