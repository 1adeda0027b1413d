"""Assignment 6: data parallelism by hand, graded against single-device training.

The student writes the five pieces ``torch.nn.DataParallel`` is made of (PyTorch or Paddle
tensors; the model and its ``local_step`` come from :mod:`grader.checks.a6_model`):

- ``scatter(batch, n) -> list``: split along dim 0 as ``torch.chunk`` does, which is what
  ``nn.DataParallel``'s scatter does: chunks of ``ceil(rows / n)`` rows, the last one what
  is left, no empty chunk (10 rows on 3 devices: 4, 4, 2); every sample kept once, in order;
- ``replicate(params, n) -> list[dict]``: ``n`` independent copies of the parameter dict;
- ``parallel_apply(fn, replicas, inputs) -> list``: ``fn(replicas[i], *inputs[i])`` for every
  ``i``, all at once (threads, as PyTorch's own ``parallel_apply`` does), results in order;
- ``gather(outputs) -> tensor``: the outputs concatenated along dim 0, in order;
- ``reduce_gradients(grads, counts) -> dict``: from each replica's gradient of its *chunk's
  mean* loss, the gradient of the mean loss over the whole batch (weights ``n_i / N``).

Each check exercises one piece, so pieces can earn points on their own; the last one trains
for a few steps with all of them and compares with single-device training.

This module holds what a student's notebook may import (the public checks and what
they share with the hidden ones); the graded checks are the course's, in
``exercises/hidden/a6_data_parallel.py`` (see :mod:`grader.grading.hidden`).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import a6_model as m
from .result import CheckResult
from .support import StudentError, call

__all__ = ["train_single", "train_dp", "public_scatter", "public_replicate",
           "public_parallel_apply", "public_gather", "public_reduce_gradients", "public_training",
           "ATOL", "RTOL"]

RTOL, ATOL = 1e-4, 1e-5     # float32; the data-parallel sums run in a different order
STEPS, LR, DEVICES, ROWS = 5, 0.1, 3, 10   # 10 rows on 3 devices: chunks of 4, 4 and 2


def train_single(framework: str, steps: int = STEPS) -> dict[str, np.ndarray]:
    params = m.init_params(framework)
    x, y = m.make_batch(framework, ROWS)
    for _ in range(steps):
        params = m.sgd(params, m.local_step(params, x, y)[2], LR)
    return {k: m.to_numpy(v) for k, v in params.items()}


def train_dp(pieces: dict[str, Callable], framework: str, steps: int = STEPS,
             devices: int = DEVICES) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Train with the student's pieces; returns the parameters and the last gathered predictions."""
    params = m.init_params(framework)
    x, y = m.make_batch(framework, ROWS)
    pred = None
    for _ in range(steps):
        xs, ys = pieces["scatter"](x, devices), pieces["scatter"](y, devices)
        replicas = pieces["replicate"](params, len(xs))
        outs = pieces["parallel_apply"](m.local_step, replicas, list(zip(xs, ys)))
        pred = pieces["gather"]([o[0] for o in outs])
        grads = pieces["reduce_gradients"]([o[2] for o in outs], [len(m.to_numpy(c)) for c in xs])
        params = m.sgd(params, grads, LR)
    return {k: m.to_numpy(v) for k, v in params.items()}, m.to_numpy(pred)


# ---- public checks: quick, lenient ("it runs and returns the right kind of thing") --------

def _public(name: str, fn: Callable, args: tuple, ok: Callable[[Any], bool], want: str,
            example: tuple[Callable[[Any], bool], str, str] | None = None) -> CheckResult:
    """``example``: ``(holds, what the notebook says, hint)``, an advisory finding (printed,
    not raised) when the answer runs but differs from what the notebook's text shows."""
    name = f"a6 (public): {name}"
    try:
        out = call(fn, *args)
        good = ok(out)
    except StudentError as e:
        return CheckResult(name, 0, 1, str(e), expected=want, hint="the message names the line of your function that raised")
    except Exception as e:  # noqa: BLE001 - the return value had the wrong shape
        return CheckResult(name, 0, 1, "unexpected return value", expected=want, seen=repr(e)[:200],
                           hint=want)
    if not good:
        return CheckResult(name, 0, 1, "unexpected return value", expected=want,
                           seen=repr(out)[:200], hint=want)
    if example is not None:
        holds, said, hint = example
        try:
            fine = holds(out)
        except Exception:  # noqa: BLE001 - an odd value simply does not match the example
            fine = False
        if not fine:
            return CheckResult(name, 0, 1, "not what the notebook's text shows", expected=said,
                               seen=repr(out)[:200], hint=hint, advisory=True)
        return CheckResult(name, 1, 1, f"runs, returns {want}, and {said}")
    return CheckResult(name, 1, 1, "runs and returns " + want)


def public_scatter(scatter: Callable, framework: str = "torch") -> CheckResult:
    x = m.from_numpy(np.arange(20, dtype=np.float32).reshape(10, 2), framework)
    return _public("scatter", scatter, (x, 3),
                   lambda out: 0 < len(out) <= 3 and all(len(m.to_numpy(c)) for c in out),
                   "a list of up to 3 non-empty tensors",
                   (lambda out: [len(m.to_numpy(c)) for c in out] == [4, 4, 2] and np.array_equal(
                       np.concatenate([m.to_numpy(c) for c in out]), m.to_numpy(x)),
                    "10 rows on 3 devices give chunks of 4, 4 and 2 rows, every row once, in "
                    "order", "Task 1's text: torch.chunk's sizes, ceil(rows / n) rows per chunk "
                    "and the rest in the last"))


def public_replicate(replicate: Callable, framework: str = "torch") -> CheckResult:
    return _public("replicate", replicate, (m.init_params(framework), 3),
                   lambda out: len(out) == 3 and all(isinstance(r, dict) for r in out),
                   "a list of 3 dicts")


def public_parallel_apply(parallel_apply: Callable) -> CheckResult:
    return _public("parallel_apply", parallel_apply, (lambda r, x: r + x, [1, 2], [(10,), (20,)]),
                   lambda out: len(list(out)) == 2, "a list with one result per replica",
                   (lambda out: list(out) == [11, 22], "fn(replicas[i], *inputs[i]) in replica "
                    "order: [1 + 10, 2 + 20] = [11, 22]", "call fn(replicas[i], *inputs[i]) and "
                    "keep the results in replica order (a thread's result by its index)"))


def public_gather(gather: Callable, framework: str = "torch") -> CheckResult:
    parts = [m.from_numpy(np.array(v, np.float32).reshape(-1, 1), framework)
             for v in ([0, 1], [2])]
    return _public("gather", gather, (parts,), lambda out: m.to_numpy(out).shape == (3, 1),
                   "one tensor of 3 rows",
                   (lambda out: m.to_numpy(out).ravel().tolist() == [0, 1, 2],
                    "replica 0's rows first: [0, 1] then [2]", "concatenate along dimension "
                    "0, in replica order"))


def public_reduce_gradients(reduce_gradients: Callable, framework: str = "torch") -> CheckResult:
    g = {"w": m.from_numpy(np.ones(2, np.float32), framework)}
    return _public("reduce_gradients", reduce_gradients, ([g, g], [1, 1]),
                   lambda out: m.to_numpy(out["w"]).shape == (2,), "a dict of tensors with the same names",
                   (lambda out: np.allclose(m.to_numpy(out["w"]), 1.0),
                    "two chunks of one row with the same gradient [1, 1]: the batch's mean-loss "
                    "gradient is that gradient, [1, 1]", "the gradient of the mean loss over "
                    "the whole batch: not the sum of the replicas' gradients, and averaged once"))


def public_training(pieces: dict[str, Callable], framework: str = "torch") -> CheckResult:
    def one_step_with_your_pieces():
        return train_dp(pieces, framework, steps=1)

    return _public("one data-parallel step", one_step_with_your_pieces, (),
                   lambda out: out[1].shape == (ROWS, m.OUT), f"parameters and ({ROWS}, 1) predictions")
