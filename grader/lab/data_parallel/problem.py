"""The problem the data-parallel stand-in trains: data, initial weights and the model.

A regression batch and the weights of a two-layer perceptron ``Linear -> ReLU -> Linear``
are drawn once with NumPy in float32, so both frameworks start from the same numbers.
The weights are kept in one layout, ``W`` of shape ``(in, out)`` (Paddle's ``Linear``
layout; PyTorch's ``Linear`` stores the transpose). :func:`train_single` is the reference
every data-parallel run must match: one device, the whole batch, plain SGD.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["Problem", "make_problem", "split_sizes", "build_model", "model_weights", "mse",
           "train_single", "single_step", "max_abs_diff"]


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
        from grader.lab.core.backends import get_backend

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
    from grader.lab.core.backends import get_backend

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
    from grader.lab.core.backends import get_backend

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
