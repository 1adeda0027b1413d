"""The capstone's mesh (chapters/capstone.md): every rank of a
:class:`~grader.lab.planner.composed.Layout` at its place in the
``pp x dp_replicate x dp_shard x tp`` mesh, and which of the script's three functions
owns which dimension.

Ranks fill the mesh in row-major order of :data:`~grader.lab.planner.composed.
DIM_NAMES`, as ``init_device_mesh("cpu", layout.mesh_shape, mesh_dim_names=DIM_NAMES)``
lays them out; :data:`OWNERS` is what ``capstone_torch.py``'s ``train`` passes to each
function. The tests build that mesh (on a fake process group) and read the script's
calls, and compare both with what is drawn.
"""
from __future__ import annotations

import itertools

from ..planner.composed import DIM_NAMES, Layout
from .draw import box, rank_color

__all__ = ["OWNERS", "mesh_ranks", "group_of", "mesh_diagram"]

# the function of capstone_torch.py that takes each part of the mesh, in the order
# train applies them
OWNERS = (("apply_tp", ("tp",)), ("apply_pp", ("pp",)),
          ("apply_fsdp", ("dp_replicate", "dp_shard")))


def mesh_ranks(layout: Layout) -> dict[tuple[int, ...], int]:
    """{coordinates in DIM_NAMES' order: rank}."""
    coords = itertools.product(*(range(n) for n in layout.mesh_shape))
    return {c: rank for rank, c in enumerate(coords)}


def group_of(layout: Layout, rank: int, dims: tuple[str, ...]) -> list[int]:
    """The ranks that share every coordinate with ``rank`` but those of ``dims``: its
    group along those dimensions (what ``mesh[dims]`` is on that rank)."""
    unknown = [d for d in dims if d not in DIM_NAMES]
    if unknown:
        raise ValueError(f"{unknown}: the mesh's dimensions are {DIM_NAMES}")
    ranks = mesh_ranks(layout)
    mine = next(c for c, r in ranks.items() if r == rank)
    free = [DIM_NAMES.index(d) for d in dims]
    return sorted(r for c, r in ranks.items()
                  if all(c[i] == mine[i] for i in range(len(DIM_NAMES)) if i not in free))


def mesh_diagram(layout: Layout, example: int = 0):
    """One panel per pipeline stage; in each, a row per (replicate, shard) pair and a
    column per tensor-parallel rank, the rank's number in its cell (cells coloured by
    replicate group). Rank ``example``'s group along each function's dimensions is
    outlined, and the text under the panels says which function owns it."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    pp, rep, shard, tp = layout.mesh_shape
    ranks = mesh_ranks(layout)
    rows = rep * shard
    fig, axes = plt.subplots(1, pp, figsize=(max(3.2 * pp, 6.4), 1.8 + 0.5 * rows),
                             squeeze=False)
    outline = {"apply_tp": "#C44E52", "apply_fsdp": "#222222", "apply_pp": "#8172B3"}
    groups = {name: set(group_of(layout, example, dims)) for name, dims in OWNERS}
    for p, ax in enumerate(axes[0]):
        ax.set_xlim(-2.3, tp + 0.1)
        ax.set_ylim(rows + 0.1, -0.7)
        ax.axis("off")
        ax.set_title(f"pipeline stage {p}", fontsize=9)
        for r, s, t in itertools.product(range(rep), range(shard), range(tp)):
            rank = ranks[(p, r, s, t)]
            row = r * shard + s
            box(ax, t, row, 1, 1, f"rank {rank}", color=rank_color(r), alpha=0.35,
                gid=f"mesh-{p}-{r}-{s}-{t}", fontsize=8)
            for name, members in groups.items():
                if rank in members and len(members) > 1:
                    inset = {"apply_tp": 0.06, "apply_fsdp": 0.14, "apply_pp": 0.22}[name]
                    ax.add_patch(Rectangle((t + inset, row + inset), 1 - 2 * inset,
                                           1 - 2 * inset, fill=False, linewidth=1.6,
                                           edgecolor=outline[name],
                                           linestyle="-" if name != "apply_pp" else ":"))
        for r, s in itertools.product(range(rep), range(shard)):
            ax.text(-0.1, r * shard + s + 0.5, f"replicate {r}, shard {s}", ha="right",
                    va="center", fontsize=7, color=rank_color(r))
        for t in range(tp):
            ax.text(t + 0.5, -0.2, f"tp {t}", ha="center", fontsize=7)
    words = []
    for name, dims in OWNERS:
        members = group_of(layout, example, dims)
        where = ", ".join(f'"{d}"' for d in dims)
        line = f"{name}(model, mesh[{where}]): ranks {', '.join(map(str, members))}"
        if name == "apply_fsdp" and rep > 1 and shard > 1:      # HSDP
            within = group_of(layout, example, ("dp_shard",))
            across = group_of(layout, example, ("dp_replicate",))
            line += (f"\n(HSDP: sharded within ranks {', '.join(map(str, within))}, "
                     f"gradients all-reduced across ranks {', '.join(map(str, across))})")
        words.append(line)
    styles = {"apply_tp": "solid red", "apply_fsdp": "solid black",
              "apply_pp": "dotted purple"}
    text = "\n".join(w.replace("\n", f"  ({styles[n]} outline)\n", 1) if "\n" in w
                     else f"{w}  ({styles[n]} outline)" for w, (n, _) in zip(words, OWNERS))
    fig.text(0.5, 0.02, f"the groups of rank {example}, by the function that owns their "
             f"dimensions:\n{text}", ha="center", va="bottom", fontsize=7.5,
             gid="mesh-owners")
    fig.tight_layout(rect=(0, 0.27, 1, 1))
    return fig
