"""Dependency graphs, built from code and models, and drawn by the book.

A framework knows which operations depend on which: that graph is what lets it run
independent operations at the same time. Two graphs appear in the chapters:

- :func:`program_graph`: a few lines of tensor code as a graph (the seed's
  ``x = ones; y = ones; z = x * y + 2``);
- :func:`mlp_step_graph`: one data-parallel training step of a model on a CPU and two
  GPUs (the seed's figure of a two-layer MLP), built from the model's own layers and
  parameters, so a different model gives a different graph.

:func:`concurrent_groups` lists the operations that may run at the same time (the
topological generations: nothing in a group depends on anything else in it), and
:func:`draw` lays the graph out in those generations, coloured by device.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import networkx as nx

__all__ = ["program_graph", "model_layers", "mlp_step_graph", "concurrent_groups",
           "critical_path", "draw"]

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


def model_layers(model: Any) -> list[tuple[str, list[str]]]:
    """``[(layer name, [parameter names])]`` of a ``Sequential`` model, in order.

    Works for ``torch.nn.Sequential`` and ``paddle.nn.Sequential`` alike: both have
    ``named_children`` and ``named_parameters``.
    """
    layers = []
    for name, child in model.named_children():
        params = [f"{name}.{p}" for p, _ in child.named_parameters()]
        layers.append((f"{name}:{type(child).__name__}", params))
    if not layers:
        raise ValueError("model has no child layers; give a Sequential")
    return layers


def mlp_step_graph(layers: Sequence[tuple[str, Sequence[str]]],
                   devices: Sequence[str] = ("gpu:0", "gpu:1"), host: str = "cpu") -> nx.DiGraph:
    """One data-parallel training step of ``layers`` on ``devices``, driven from ``host``.

    The host splits the minibatch and sends one half to each device; each device runs the
    forward pass layer by layer, the loss, and the backward pass in reverse, producing a
    gradient per parameter; each parameter's gradients are summed across devices (over the
    link: an all-reduce, or copies to the host); each device then updates its copy of that
    parameter. Nodes carry ``device`` and ``kind`` (compute / copy / comm).
    """
    g = nx.DiGraph()

    def node(name: str, device: str, kind: str = "compute") -> str:
        g.add_node(name, device=device, kind=kind)
        return name

    split = node("split batch", host)
    grads: dict[str, list[str]] = {}
    for d in devices:
        prev = node(f"send X/{len(devices)} -> {d}", "link", "copy")
        g.add_edge(split, prev)
        acts = []
        for lname, _ in layers:
            cur = node(f"fwd {lname} @{d}", d)
            g.add_edge(prev, cur)
            acts.append(cur)
            prev = cur
        loss = node(f"loss @{d}", d)
        g.add_edge(prev, loss)
        prev = loss
        for (lname, params), act in zip(reversed(layers), reversed(acts)):
            cur = node(f"bwd {lname} @{d}", d)
            g.add_edge(prev, cur)
            g.add_edge(act, cur)  # backward reads the activations the forward kept
            for p in params:
                gp = node(f"grad {p} @{d}", d)
                g.add_edge(cur, gp)
                grads.setdefault(p, []).append(gp)
            prev = cur
    for p, parts in grads.items():
        red = node(f"all-reduce grad {p}", "link", "comm")
        g.add_edges_from((gp, red) for gp in parts)
        for d in devices:
            upd = node(f"update {p} @{d}", d)
            g.add_edge(red, upd)
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
    nx.draw_networkx_labels(g, {n: (x, y + 0.28) for n, (x, y) in pos.items()},
                            labels={n: n.split(" @")[0] for n in g}, ax=ax, font_size=font_size)
    ax.legend(handles=[Patch(color=DEVICE_COLORS.get(d, "#CCB974"), label=d) for d in devices],
              loc="lower right", fontsize="small", frameon=False, ncol=len(devices))
    ys = [y for _, y in pos.values()]
    ax.set_ylim(min(ys) - 0.5, max(ys) + 0.6)  # room for the labels above the top nodes
    ax.set_xlim(-0.6, len(groups) - 0.3)  # and for the last column's labels
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize="medium", loc="left")
    ax.figure.tight_layout()
    return ax


def edges_between(g: nx.DiGraph, a: Iterable[str], b: Iterable[str]) -> bool:
    """True when some node of ``a`` reaches some node of ``b`` (or the other way)."""
    a, b = list(a), list(b)
    return any(nx.has_path(g, x, y) or nx.has_path(g, y, x) for x in a for y in b)
