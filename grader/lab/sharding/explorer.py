"""An ipywidgets explorer of the sharding planner (:mod:`.planner.sharded`).

``explorer(model, cluster)`` shows sliders (the model's width and number of blocks,
devices, memory per device, link bandwidth) and, under them, the plans that fit, fastest
first, and how many were refused. In JupyterLab it is live. The book build
(``COURSE_BOOK_BUILD``) and a plain Python run print the table of the default settings
only: a static page cannot move sliders, and an Output widget written to while the book
executes once left nbclient waiting (see :mod:`.widgets`).
"""
from __future__ import annotations

import os
from dataclasses import replace

from grader.lab import planner as P
from grader.lab.core.notes import fit_width
from .tables import plans_table
from grader.lab.auto_parallel.widgets import _in_a_kernel

__all__ = ["explorer", "explore"]


def explore(model: P.Transformer, cluster: P.Cluster, limit: int = 6) -> str:
    best, preds = P.plan_search(model, cluster)
    head = (f"{model.blocks} blocks of width {model.width} "
            f"({model.params / 1e9:.2f} billion parameters), {model.batch} sequences of "
            f"{model.seq} tokens,\non {cluster.describe()}")
    choice = f"choice: {best.plan}" if best else "choice: none fits; add devices or memory"
    # the table's lines fit an output box; a long line (the refused plans') is wrapped
    return fit_width("\n".join([head, plans_table(preds, limit), choice]))


def explorer(model: P.Transformer, cluster: P.Cluster):
    """Display the explorer and, always, the table for its defaults."""
    print("Default settings (static rendering; move the sliders in JupyterLab):")
    print(explore(model, cluster))
    if os.environ.get("COURSE_BOOK_BUILD") or not _in_a_kernel():
        print("(the interactive explorer appears when this notebook runs in JupyterLab)")
        return None
    import ipywidgets as w
    from IPython.display import display

    style = {"description_width": "150px"}
    ctl = {
        "width": w.IntSlider(model.width, 256, 16384, 256, description="width",
                             style=style),
        "blocks": w.IntSlider(model.blocks, 2, 128, 2, description="blocks", style=style),
        "devices": w.SelectionSlider(options=[1, 2, 4, 8, 16, 32, 64], value=cluster.n,
                                     description="devices", style=style),
        "memory": w.FloatLogSlider(cluster.memory / 2**30, base=2, min=2, max=8,
                                   description="GiB per device", style=style),
        "bandwidth": w.FloatLogSlider(cluster.intra.bandwidth / 1e9, base=10, min=0,
                                      max=3, description="link GB/s", style=style),
    }
    out = w.Output()

    def redraw(*_):
        m = replace(model, width=ctl["width"].value, blocks=ctl["blocks"].value,
                    heads=max(1, ctl["width"].value // 128))
        link = replace(cluster.intra, bandwidth=ctl["bandwidth"].value * 1e9)
        c = replace(cluster, n=ctl["devices"].value, memory=ctl["memory"].value * 2**30,
                    intra=link, inter=None, per_node=None)
        out.clear_output(wait=True)
        with out:
            try:
                print(explore(m, c))
            except ValueError as e:
                print(f"no plan: {e}")

    for c in ctl.values():
        c.observe(redraw, "value")
    display(w.VBox([*ctl.values(), out]))
    redraw()
    return None
