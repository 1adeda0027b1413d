"""``nn.DataParallel``'s step, phase by phase, on the course's devices: the CPU stand-in.

One training step on ``k`` devices, with device 0 as the output device (the "server"):
scatter the batch (``torch.chunk``'s pieces), replicate the model, forward on every
device, gather the outputs on device 0, the loss there, backward on every replica, reduce
the gradients onto device 0, update there. The devices are those of
:func:`grader.lab.get_devices`: GPUs, or CPU worker processes standing in for them. Each
device clocks its work with the phase as label, so a chapter draws the step from the run's
own timestamps (:func:`plot_phases`, :func:`phase_table`). Everything a device runs is a
function of this module: workers import it by name.

The lesson itself (the step written in PyTorch or Paddle, ``torch.nn.parallel``'s own
parts) is in the chapter; this module only runs the same phases where the devices are
separate processes, so that they can be timed.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .memory import held_bytes
from .problem import (Problem, _bounds, _grads, _sgd, _tensor, build_model, model_weights,
                         mse, split_sizes)

__all__ = ["PHASES", "DataParallelTrainer", "phase_table", "plot_phases"]

PHASES = ("scatter", "replicate", "forward", "gather", "loss", "backward", "reduce", "update")
PHASE_COLORS = dict(zip(PHASES, ("#DD8452", "#C44E52", "#4C72B0", "#937860", "#8172B3",
                                 "#64B5CD", "#55A868", "#CCB974")))


# -- what each device runs (module-level: CPU workers import them by name) --------------------
def _replicate(framework: str, weights: Sequence[np.ndarray], device: str) -> Any:
    return build_model(framework, weights, device)


def _forward(framework: str, model: Any, x: Any) -> dict:
    # Keep the input and output with the replica: autograd needs them for backward.
    return {"model": model, "x": x, "out": model(x)}


def _output(framework: str, state: dict) -> np.ndarray:
    return state["out"].detach().cpu().numpy()


def _gathered(framework: str, outs: Sequence[np.ndarray], device: str) -> Any:
    """The outputs of every device, concatenated on the output device: (batch, d_out)."""
    from grader.lab.core.backends import get_backend

    return get_backend(framework).from_numpy(np.concatenate(outs), device)


def _loss(framework: str, out: Any, y: Any) -> dict:
    """On the output device: the loss over the whole batch, and its gradient with respect to
    the gathered outputs."""
    if framework == "torch":
        out.requires_grad_(True)
    else:
        out.stop_gradient = False
    loss = mse(out, y)
    loss.backward()
    return {"out": out, "loss": float(loss.item()), "grad": out.grad}


def _loss_value(framework: str, state: dict) -> float:
    return state["loss"]


def _grad_rows(framework: str, state: dict, start: int, stop: int) -> np.ndarray:
    return state["grad"][start:stop].detach().cpu().numpy()


def _backward(framework: str, state: dict, grad: np.ndarray) -> None:
    from grader.lab.core.backends import get_backend

    be = get_backend(framework)
    out = state["out"]
    out.backward(be.from_numpy(grad, be.tensor_device(out)))


def _replica_grads(framework: str, state: dict) -> list[np.ndarray]:
    return _grads(framework, state["model"])


def _reduce_add(framework: str, model: Any, grads: Sequence[Sequence[np.ndarray]]) -> None:
    """Add other devices' gradients into the model's own (device 0 already holds its own)."""
    total = [sum(g[i] for g in grads) for i in range(len(grads[0]))] if grads else None
    if total is None:
        return
    if framework == "torch":
        import torch

        with torch.no_grad():
            for p, g in zip(model.parameters(), total):
                p.grad += torch.from_numpy(np.ascontiguousarray(g.T if g.ndim == 2 else g)).to(p.device)
    else:
        import paddle

        for p, g in zip(model.parameters(), total):
            p.grad.set_value(p.grad + paddle.to_tensor(g, place=p.place))


def _weights(framework: str, model: Any) -> list[np.ndarray]:
    return model_weights(framework, model)


# -- the trainer ------------------------------------------------------------------------------
def _where(device: Any) -> str:
    """Where a device function should put tensors: a GPU for GPU devices, the CPU of the
    worker process for worker devices."""
    return getattr(device, "local_spec", "cpu")


def _free(device: Any, *handles: Any) -> None:
    from grader.lab.core.workers import Ref

    worker = getattr(device, "worker", None)
    for h in handles:
        if worker is not None and isinstance(h, Ref):
            worker.free(h)


class DataParallelTrainer:
    """``nn.DataParallel``'s step written out phase by phase over ``devices``.

    ``devices[0]`` holds the model (it is the output device and the "server"); the others
    receive a replica every step. ``step(x, y)`` trains on one global batch and returns the
    loss; ``weights()`` copies the parameters back. With ``track_memory`` each step also
    counts the bytes every device holds at the end of backward (one more round trip per
    device, so it is off when timing); :meth:`memory` returns the last count.
    """

    def __init__(self, devices: Sequence[Any], problem: Problem, track_memory: bool = False) -> None:
        self.devices = list(devices)
        self.track_memory = track_memory
        self._memory: list[dict] = []
        self.framework = self.devices[0].framework
        self.problem, self.lr = problem, problem.lr
        d0 = self.devices[0]
        self.model = d0.submit(_replicate, self.framework, problem.weights, _where(d0),
                               label="setup", kind="other").result()
        self._last: dict = {}

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        fw, devs, d0 = self.framework, self.devices, self.devices[0]
        self._release()
        bounds = _bounds(split_sizes(len(x), len(devs)))
        active = devs[:len(bounds)]  # a small batch may leave devices idle (see split_sizes)

        # 1. scatter: each device gets its rows (y goes to the output device only)
        xs = [d.submit(_tensor, fw, x[a:b], _where(d), label="scatter", kind="copy")
              for d, (a, b) in zip(active, bounds)]
        y0 = d0.submit(_tensor, fw, y, _where(d0), label="scatter", kind="copy")
        xs, y0 = [f.result() for f in xs], y0.result()

        # 2. replicate: device 0's parameters to every other device (replica 0 is the model)
        w = d0.submit(_weights, fw, self.model, keep=False, label="replicate", kind="copy").result() \
            if len(active) > 1 else None
        replicas = [self.model] + [
            d.submit(_replicate, fw, w, _where(d), label="replicate", kind="copy")
            for d in active[1:]]
        replicas = [replicas[0]] + [f.result() for f in replicas[1:]]

        # 3. forward on all devices at once: queue everywhere, then wait
        states = [d.submit(_forward, fw, m, xi, label="forward")
                  for d, m, xi in zip(active, replicas, xs)]
        states = [f.result() for f in states]

        # 4. gather the outputs onto device 0 ...
        outs = [d.submit(_output, fw, s, keep=False, label="gather", kind="copy")
                for d, s in zip(active, states)]
        outs = [f.result() for f in outs]
        gathered = d0.submit(_gathered, fw, outs, _where(d0), label="gather", kind="copy").result()
        # 5. ... where the loss over the whole batch and its gradient are computed
        loss_state = d0.submit(_loss, fw, gathered, y0, label="loss").result()

        # 6. backward: the output gradient scattered back, every replica back-propagates
        grads = [d0.submit(_grad_rows, fw, loss_state, a, b, keep=False, label="backward",
                           kind="copy") for a, b in bounds]
        grads = [g.result() for g in grads]
        done = [d.submit(_backward, fw, s, g, keep=False, label="backward")
                for d, s, g in zip(active, states, grads)]
        for f in done:
            f.result()

        # 7. reduce: the replicas' gradients summed into device 0's
        others = [d.submit(_replica_grads, fw, s, keep=False, label="reduce", kind="comm")
                  for d, s in zip(active[1:], states[1:])]
        others = [f.result() for f in others]
        d0.submit(_reduce_add, fw, self.model, others, keep=False, label="reduce",
                  kind="comm").result()

        loss = d0.submit(_loss_value, fw, loss_state, keep=False, label="loss").result()
        self._last = {"active": active, "xs": xs, "y": y0, "replicas": replicas,
                      "states": states, "gathered": gathered, "loss_state": loss_state}
        if self.track_memory:
            self._memory = self._count_memory()

        # 8. update on device 0; the next step replicates the new parameters
        d0.submit(_sgd, fw, self.model, self.lr, keep=False, label="update").result()
        return loss

    def _count_memory(self) -> list[dict]:
        """Bytes each device holds at the end of backward, before the update frees gradients."""
        fw, last = self.framework, self._last
        out = []
        for i, d in enumerate(self.devices):
            if i >= len(last["active"]):
                out.append({})
                continue
            groups = {"parameters": last["replicas"][i], "gradients": last["replicas"][i],
                      "inputs": last["xs"][i], "outputs": last["states"][i]}
            if i == 0:
                groups["targets"] = last["y"]
                groups["gathered outputs + their gradient"] = last["loss_state"]
            out.append(d.submit(held_bytes, fw, groups, keep=False, label="count",
                                kind="other").result())
        return out

    def memory(self) -> list[dict]:
        """Per device: bytes of tensors held at the end of the last tracked step's backward,
        by group (parameters, gradients, inputs, outputs; targets and gathered outputs on
        device 0)."""
        if not self._memory:
            raise RuntimeError("no step was counted: set track_memory=True and run a step")
        return self._memory

    def weights(self) -> list[np.ndarray]:
        return self.devices[0].submit(_weights, self.framework, self.model, keep=False,
                                      label="weights", kind="other").result()

    def _release(self) -> None:
        last = self._last
        if not last:
            return
        for i, d in enumerate(last["active"]):
            handles = [last["xs"][i], last["states"][i]] + ([last["replicas"][i]] if i else [])
            if i == 0:
                handles += [last["y"], last["gathered"], last["loss_state"]]
            _free(d, *handles)
        self._last = {}


# -- reading and drawing what the run recorded ------------------------------------------------
def phase_table(timeline: Any, steps: int) -> dict[str, dict[str, float]]:
    """Seconds per step spent in each phase on each device row of ``timeline``."""
    table: dict[str, dict[str, float]] = {}
    for iv in timeline.intervals:
        if iv.label in PHASES:
            row = table.setdefault(iv.row, {p: 0.0 for p in PHASES})
            row[iv.label] += iv.duration / steps
    return table


def plot_phases(timeline: Any, title: str = "", ax: Any = None, unit: str = "ms") -> Any:
    """One row per device, one colour per phase (the labels the devices clocked)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    scale = {"s": 1.0, "ms": 1e3}[unit]
    rows = timeline.rows
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.9 + 0.6 * len(rows)))
    t0 = timeline.start()
    for y, row in enumerate(rows):
        for iv in timeline.intervals:
            if iv.row == row and iv.label in PHASE_COLORS:
                ax.broken_barh([((iv.start - t0) * scale, max(iv.duration * scale, 1e-3))],
                               (y - 0.35, 0.7), facecolors=PHASE_COLORS[iv.label],
                               edgecolor="white", linewidth=0.3)
    ax.set_yticks(range(len(rows)), rows)
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    seen = [p for p in PHASES if any(iv.label == p for iv in timeline.intervals)]
    ax.legend(handles=[Patch(color=PHASE_COLORS[p], label=p) for p in seen], ncol=len(seen),
              fontsize="small", frameon=False, loc="lower left", bbox_to_anchor=(0, 1.0))
    if title:
        ax.set_title(title, fontsize="medium", loc="left", pad=22)
    ax.figure.tight_layout()
    return ax
