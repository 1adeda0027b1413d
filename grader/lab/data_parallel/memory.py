"""What each device holds at the end of ``nn.DataParallel``'s backward (the stand-in).

:func:`held_bytes` runs on a device and counts the bytes of the distinct tensors in each
group (parameters, their gradients, inputs, outputs; on the output device also the
targets and the gathered outputs with their gradient), from the tensors themselves
(``numel * element_size``); :class:`~grader.lab.data_parallel.phases.DataParallelTrainer` calls it
when ``track_memory`` is set. :func:`plot_memory` draws the counts as stacked bars.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["held_bytes", "plot_memory"]


def held_bytes(framework: str, groups: dict) -> dict:
    """Bytes of the distinct tensors in each group (parameters, their gradients, inputs,
    outputs...), counted from the tensors themselves."""
    from grader.lab.core.backends import get_backend

    be = get_backend(framework)
    seen: set[int] = set()

    def walk(v: Any) -> int:
        if v is None:
            return 0
        if isinstance(v, dict):
            return sum(walk(u) for k, u in v.items() if k != "model")
        if isinstance(v, (list, tuple)):
            return sum(walk(u) for u in v)
        if hasattr(v, "parameters") and callable(v.parameters):
            return sum(walk(p) for p in v.parameters())
        if isinstance(v, np.ndarray) or not hasattr(v, "shape"):
            return 0
        key = id(v)
        if key in seen:
            return 0
        seen.add(key)
        return be.nbytes(v)

    out = {}
    for name, v in groups.items():
        if name == "gradients":
            v = [p.grad for p in v.parameters()] if v is not None else None
        out[name] = walk(v)
    return out


def plot_memory(memory: Sequence[dict], names: Sequence[str], title: str = "",
                ax: Any = None) -> Any:
    """Stacked bars: the bytes of each group of tensors on each device, in KiB."""
    import matplotlib.pyplot as plt

    groups: list[str] = []
    for m in memory:
        groups += [g for g in m if g not in groups]
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 3.2))
    bottom = np.zeros(len(memory))
    for g in groups:
        vals = np.array([m.get(g, 0) for m in memory]) / 1024
        ax.bar(list(names), vals, bottom=bottom, label=g)
        bottom += vals
    ax.set_ylabel("KiB of tensors held")
    ax.legend(fontsize="small", frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        ax.set_title(title, fontsize="medium", loc="left")
    ax.figure.tight_layout()
    return ax
