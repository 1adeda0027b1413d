"""Dependency graphs, built from code and models, and drawn by the book.

A framework knows which operations depend on which: that graph is what lets it run
independent operations at the same time. :func:`program_graph` turns a few lines of
tensor code into such a graph (the original section's ``x = ones; y = ones;
z = x * y + 2``); :func:`grader.lab.communication.training_step_graph` builds one
data-parallel training step from the backward graph a framework recorded.

:func:`concurrent_groups` lists the operations that may run at the same time (the
topological generations: nothing in a group depends on anything else in it), and
:func:`draw` lays the graph out in those generations, coloured by device.
"""
from __future__ import annotations

from typing import Any, Sequence

import networkx as nx

__all__ = ["program_graph", "concurrent_groups", "critical_path", "draw"]

DEVICE_COLORS = {"cpu": "#8C8C8C", "gpu:0": "#4C72B0", "gpu:1": "#55A868", "link": "#DD8452"}


def program_graph(steps: Sequence[tuple[str, Sequence[str]]], device: str = "cpu") -> nx.DiGraph:
    """``steps`` are ``(name, inputs)`` in program order; an edge runs from each input to
    the step that reads it. Unknown inputs are an error (a typo would drop an edge)."""
    g = nx.DiGraph()
    for name, inputs in steps:
        for i in inputs:
            if i not in g:
                raise ValueError(f"step {name!r} reads {i!r}, which no earlier step makes")
        g.add_node(name, device=device, cost=1.0)
        g.add_edges_from((i, name) for i in inputs)
    return g


def concurrent_groups(g: nx.DiGraph) -> list[list[str]]:
    """Groups of operations that may run at the same time, in the order they can start."""
    return [sorted(gen) for gen in nx.topological_generations(g)]


def critical_path(g: nx.DiGraph) -> list[str]:
    """The longest chain of dependent operations: no schedule can be shorter than it."""
    return nx.dag_longest_path(g)


def draw(g: nx.DiGraph, ax: Any = None, title: str = "", font_size: float = 7.0) -> Any:
    """Draw ``g`` left to right by generation; colour = device, shape = kind."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    groups = concurrent_groups(g)
    pos: dict[str, tuple[float, float]] = {}
    for x, gen in enumerate(groups):
        for k, n in enumerate(sorted(gen, key=lambda n: (g.nodes[n].get("device", ""), n))):
            pos[n] = (x, -(k - (len(gen) - 1) / 2))
    if ax is None:
        height = max(2.5, 0.55 * max(len(gen) for gen in groups) + 1)
        _, ax = plt.subplots(figsize=(min(14, 1.6 + 1.35 * len(groups)), height))
    devices = sorted({g.nodes[n].get("device", "cpu") for n in g})
    colors = [DEVICE_COLORS.get(g.nodes[n].get("device", "cpu"), "#CCB974") for n in g]
    nx.draw_networkx_edges(g, pos, ax=ax, arrows=True, arrowsize=8, edge_color="#999999",
                           node_size=300)
    nx.draw_networkx_nodes(g, pos, ax=ax, node_color=colors, node_size=300)
    # A node's "label" attribute, if any, else its name up to " @device". Graphs that ask
    # for it (graph attribute "stagger_labels") put every other column's labels below
    # the nodes, so that long names in a row do not run into each other.
    stagger = g.graph.get("stagger_labels", False)
    nx.draw_networkx_labels(
        g, {n: (x, y + (-0.34 if stagger and x % 2 else 0.28)) for n, (x, y) in pos.items()},
        labels={n: g.nodes[n].get("label", n.split(" @")[0]) for n in g}, ax=ax,
        font_size=font_size)
    ax.legend(handles=[Patch(color=DEVICE_COLORS.get(d, "#CCB974"), label=d) for d in devices],
              loc=g.graph.get("legend_loc", "lower right"), fontsize="small", frameon=False,
              ncol=len(devices))
    ys = [y for _, y in pos.values()]
    ax.set_ylim(min(ys) - 0.5, max(ys) + 0.6)  # room for the labels above the top nodes
    ax.set_xlim(-0.6, len(groups) - 0.3)  # and for the last column's labels
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize="medium", loc="left")
    ax.figure.tight_layout()
    return ax

