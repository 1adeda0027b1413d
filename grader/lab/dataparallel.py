"""Data parallelism built from its parts, the way ``torch.nn.DataParallel`` does one step.

One training step on ``k`` devices, with device 0 as the output device (the "server"):

1. **scatter** the global batch: rows split into ``k`` chunks, one per device;
2. **replicate** the model: device 0's parameters copied to every other device
   (device 0's replica *is* the model, as in PyTorch, whose replica 0 shares its storage);
3. **forward** on every device at once (parallel apply);
4. **gather** the outputs onto device 0;
5. **loss** on device 0 over the whole batch, and its gradient with respect to the outputs;
6. **backward**: that gradient scattered back, each replica back-propagates its chunk;
7. **reduce** the replicas' gradients onto device 0 (summed: the loss was over the global
   batch, so the sum of the chunks' gradients is the full gradient);
8. **update** the parameters on device 0 (plain SGD).

The devices are those of :func:`grader.lab.get_devices`: GPUs, or CPU worker processes
standing in for them. Everything a device runs is a function of this module (workers import
it by name). Each device clocks its work with the phase as label, so the chapter draws the
step from the run's own timestamps, and :meth:`DataParallelTrainer.memory` counts the bytes
of the tensors each device holds.

The model is a two-layer perceptron ``Linear -> ReLU -> Linear`` built with each
framework's own layers. Its weights are kept as NumPy arrays in one layout, ``W`` of shape
``(in, out)`` (Paddle's ``Linear`` layout; PyTorch's ``Linear`` stores the transpose), so
both frameworks start from the same numbers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = [
    "PHASES", "Problem", "make_problem", "split_sizes", "build_model", "model_weights", "mse",
    "train_single", "single_step", "DataParallelTrainer", "max_abs_diff", "plot_phases",
    "plot_memory", "phase_table",
]

PHASES = ("scatter", "replicate", "forward", "gather", "loss", "backward", "reduce", "update")
PHASE_COLORS = dict(zip(PHASES, ("#DD8452", "#C44E52", "#4C72B0", "#937860", "#8172B3",
                                 "#64B5CD", "#55A868", "#CCB974")))


# -- the problem: data and initial weights, drawn once with NumPy -----------------------------
@dataclass(frozen=True)
class Problem:
    """A regression problem and the model's initial weights, identical for both frameworks."""

    x: np.ndarray              # (batch, d_in) float32
    y: np.ndarray              # (batch, d_out) float32
    weights: tuple             # W1 (d_in, hidden), b1 (hidden,), W2 (hidden, d_out), b2 (d_out,)
    lr: float = 0.05

    @property
    def sizes(self) -> str:
        (b, d_in), h, d_out = self.x.shape, self.weights[0].shape[1], self.y.shape[1]
        n = sum(w.size for w in self.weights)
        return (f"batch {b}, layers {d_in} -> {h} -> {d_out} ({n:,} float32 parameters, "
                f"{n * 4 / 2**20:.2f} MiB)")


def make_problem(batch: int = 64, d_in: int = 32, hidden: int = 64, d_out: int = 4,
                 seed: int = 0, lr: float = 0.05) -> Problem:
    rng = np.random.default_rng(seed)
    f32 = np.float32
    x = rng.standard_normal((batch, d_in)).astype(f32)
    y = rng.standard_normal((batch, d_out)).astype(f32)
    weights = (
        (rng.standard_normal((d_in, hidden)) / math.sqrt(d_in)).astype(f32),
        np.zeros(hidden, f32),
        (rng.standard_normal((hidden, d_out)) / math.sqrt(hidden)).astype(f32),
        np.zeros(d_out, f32),
    )
    return Problem(x, y, weights, lr)


def split_sizes(n: int, parts: int) -> list[int]:
    """Rows per device when ``n`` rows are scattered over ``parts`` devices.

    Like ``torch.chunk`` (what ``nn.DataParallel``'s scatter uses): chunks of
    ``ceil(n / parts)`` rows, the last one smaller, and *fewer than ``parts`` chunks* when
    ``n`` is small: 6 rows on 4 devices give 2, 2, 2 and the fourth device gets nothing.
    """
    if n < 1 or parts < 1:
        raise ValueError(f"cannot split {n} rows over {parts} devices")
    size = math.ceil(n / parts)
    sizes = [size] * (n // size)
    if n % size:
        sizes.append(n % size)
    return sizes


def _bounds(sizes: Sequence[int]) -> list[tuple[int, int]]:
    edges = np.cumsum([0, *sizes])
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


# -- the model, in each framework's own layers ------------------------------------------------
def build_model(framework: str, weights: Sequence[np.ndarray], device: str = "cpu") -> Any:
    """``Linear -> ReLU -> Linear`` holding ``weights`` (canonical ``(in, out)`` layout)."""
    w1, b1, w2, b2 = (np.ascontiguousarray(w, dtype=np.float32) for w in weights)
    if framework == "torch":
        import torch

        model = torch.nn.Sequential(torch.nn.Linear(*w1.shape), torch.nn.ReLU(),
                                    torch.nn.Linear(*w2.shape))
        with torch.no_grad():
            for p, w in zip(model.parameters(), (w1.T, b1, w2.T, b2)):
                p.copy_(torch.from_numpy(np.ascontiguousarray(w)))
        from .backends import get_backend

        return model.to(get_backend("torch").native_device(device))
    paddle = _paddle()

    model = paddle.nn.Sequential(paddle.nn.Linear(*w1.shape), paddle.nn.ReLU(),
                                 paddle.nn.Linear(*w2.shape))
    for p, w in zip(model.parameters(), (w1, b1, w2, b2)):
        p.set_value(w)
    if device != "cpu":
        model.to(device)
    return model


def _paddle() -> Any:
    """Paddle, imported through its adapter (which keeps its import-time notices quiet)."""
    from .backends import get_backend

    get_backend("paddle")
    import paddle

    return paddle


def model_weights(framework: str, model: Any) -> list[np.ndarray]:
    """The parameters as NumPy arrays in the canonical layout (a copy)."""
    out = []
    for p in model.parameters():
        a = p.detach().cpu().numpy().copy()
        out.append(a.T.copy() if framework == "torch" and a.ndim == 2 else a)
    return out


def _grads(framework: str, model: Any) -> list[np.ndarray]:
    out = []
    for p in model.parameters():
        a = p.grad.detach().cpu().numpy().copy()
        out.append(a.T.copy() if framework == "torch" and a.ndim == 2 else a)
    return out


def mse(out: Any, y: Any) -> Any:
    """Mean squared error, written once for both frameworks."""
    return ((out - y) ** 2).mean()


def _tensor(framework: str, array: np.ndarray, device: str = "cpu") -> Any:
    from .backends import get_backend

    return get_backend(framework).from_numpy(np.asarray(array), device)


def _zero_grads(framework: str, model: Any) -> None:
    for p in model.parameters():
        if framework == "torch":
            p.grad = None
        else:
            p.clear_gradient(False)


def _sgd(framework: str, model: Any, lr: float) -> None:
    """``p -= lr * p.grad`` for every parameter, then clear the gradients."""
    if framework == "torch":
        import torch

        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
    else:
        import paddle

        with paddle.no_grad():
            for p in model.parameters():
                p.set_value(p - lr * p.grad)
    _zero_grads(framework, model)


# -- the reference: one device, the whole global batch ----------------------------------------
def single_step(framework: str, model: Any, x: Any, y: Any, lr: float) -> float:
    """One plain training step on one device; returns the loss."""
    loss = mse(model(x), y)
    loss.backward()
    _sgd(framework, model, lr)
    return float(loss.item())


def train_single(framework: str, problem: Problem, steps: int, device: str = "cpu") -> dict:
    """Train on one device with the whole batch: the result data parallelism must match."""
    model = build_model(framework, problem.weights, device)
    x, y = _tensor(framework, problem.x, device), _tensor(framework, problem.y, device)
    losses = [single_step(framework, model, x, y, problem.lr) for _ in range(steps)]
    return {"weights": model_weights(framework, model), "losses": losses}


def max_abs_diff(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    return max(float(np.max(np.abs(np.asarray(u, np.float64) - np.asarray(v, np.float64))))
               for u, v in zip(a, b))


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
    from .backends import get_backend

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
    from .backends import get_backend

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


def _held_bytes(framework: str, groups: dict) -> dict:
    """Bytes of the distinct tensors in each group (parameters, their gradients, inputs,
    outputs...), counted from the tensors themselves."""
    from .backends import get_backend

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


# -- the trainer ------------------------------------------------------------------------------
def _where(device: Any) -> str:
    """Where a device function should put tensors: a GPU for GPU devices, the CPU of the
    worker process for worker devices."""
    return getattr(device, "local_spec", "cpu")


def _free(device: Any, *handles: Any) -> None:
    from .workers import Ref

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
            out.append(d.submit(_held_bytes, fw, groups, keep=False, label="count",
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
