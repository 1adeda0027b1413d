"""The small model assignment 6 trains, written once per framework with the same sizes and dtype.

A two-layer perceptron ``pred = tanh(x @ W1 + b1) @ W2 + b2`` with the mean squared error.
``local_step`` is what each replica runs on its chunk: the forward pass, the loss (the
*mean* over the chunk) and the gradients, returned as a dict with the parameters' names.
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

__all__ = ["IN", "HIDDEN", "OUT", "init_params", "make_batch", "local_step", "sgd", "to_numpy",
           "from_numpy", "framework_of"]

IN, HIDDEN, OUT = 5, 8, 1


def framework_of(tensor: Any) -> str:
    return "paddle" if type(tensor).__module__.startswith("paddle") else "torch"


def from_numpy(array: np.ndarray, framework: str) -> Any:
    from grader.lab.core.backends import get_backend

    return get_backend(framework).from_numpy(np.ascontiguousarray(array, dtype=np.float32), "cpu")


def to_numpy(tensor: Any) -> np.ndarray:
    if isinstance(tensor, np.ndarray):
        return tensor
    from grader.lab.core.backends import get_backend

    return get_backend(framework_of(tensor)).to_numpy(tensor)


def init_params(framework: str, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    shapes = {"W1": (IN, HIDDEN), "b1": (HIDDEN,), "W2": (HIDDEN, OUT), "b2": (OUT,)}
    return {k: from_numpy(0.5 * rng.standard_normal(s, dtype=np.float32), framework)
            for k, s in shapes.items()}


def make_batch(framework: str, rows: int = 10, seed: int = 1) -> tuple[Any, Any]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, IN), dtype=np.float32)
    y = np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)
    return from_numpy(x, framework), from_numpy(y, framework)


def local_step(params: dict[str, Any], x: Any, y: Any) -> tuple[Any, float, dict[str, Any]]:
    """Forward and backward on one chunk: ``(pred, loss, grads)``; loss is the chunk's mean."""
    if framework_of(x) == "torch":
        import torch

        leaves = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
        pred = torch.tanh(x @ leaves["W1"] + leaves["b1"]) @ leaves["W2"] + leaves["b2"]
        loss = ((pred - y) ** 2).mean()
        grads = torch.autograd.grad(loss, list(leaves.values()))
        return pred.detach(), float(loss.detach()), dict(zip(leaves, grads))
    import paddle

    from grader.lab.core.threads import framework_ready

    framework_ready()   # replicas run in parallel_apply's threads: Paddle's mode is per thread
    # Paddle's eager autograd is not thread-safe: two threads in paddle.grad at once abort
    # the process ("pure virtual method called"). parallel_apply runs replicas in threads,
    # so Paddle's replicas take turns here; PyTorch's autograd runs them concurrently.
    with _PADDLE_LOCK:
        leaves = {}
        for k, v in params.items():
            leaf = v.detach().clone()
            leaf.stop_gradient = False
            leaves[k] = leaf
        pred = paddle.tanh(x @ leaves["W1"] + leaves["b1"]) @ leaves["W2"] + leaves["b2"]
        loss = ((pred - y) ** 2).mean()
        grads = paddle.grad([loss], list(leaves.values()))
        return pred.detach(), float(loss.detach()), {k: g.detach() for k, g in zip(leaves, grads)}


_PADDLE_LOCK = threading.Lock()


def sgd(params: dict[str, Any], grads: dict[str, Any], lr: float) -> dict[str, Any]:
    """A new parameter dict ``p - lr * g`` (nothing updated in place)."""
    return {k: (p - lr * grads[k]).detach() for k, p in params.items()}
