"""A planner's plan, executed: the MLP of ``grader.lab.planner`` trained on N ranks with the
collectives the plan calls for, written out explicitly, timed, and every one logged.

Where ``grader.lab.sharding`` lets the framework insert the communication, this module
does it by hand, so that the run does exactly what the cost model assumes: the log of
``(op, where, bytes)`` it returns is the *measured* counterpart of ``planner.comm_plan``,
and the step times are what the planner's predictions are compared with. The same code
runs in both frameworks through a small shim (:class:`_Comm`). ``calibrate_rank`` measures
what the calibrated "this machine's CPU ranks" cluster needs: matmul rate and all-reduce
times.
"""
from __future__ import annotations

import os
import time

import numpy as np

from .sharding import mlp_data, mlp_init

__all__ = ["mlp_step_rank", "mlp_numpy_reference", "calibrate_rank"]


class _Comm:
    """The collectives a plan needs, over all ranks of the run, in either framework.

    Every call is logged as ``(op, bytes of the full tensor)``: the measured side of the
    planner's ``comm_plan``. Paddle 3.3's CPU build has no reduce_scatter kernel and gloo
    none in torch either, so ``reduce_scatter`` is done as an all-reduce plus a local slice
    (logged as ``reduce_scatter``; it costs an all-reduce here)."""

    def __init__(self, framework: str, rank: int, world: int) -> None:
        self.fw, self.rank, self.world, self.log = framework, rank, world, []
        if framework == "torch":
            import torch
            import torch.distributed as dist

            self.t, self.dist = torch, dist
        else:
            import paddle
            import paddle.distributed as dist

            self.t, self.dist = paddle, dist

    def tensor(self, a: np.ndarray):
        return self.t.from_numpy(a) if self.fw == "torch" else self.t.to_tensor(a)

    def nbytes(self, x) -> int:
        return int(np.prod(x.shape)) * 4

    def cols(self, x, p: int):
        """This rank's slice of the feature axis."""
        n = x.shape[1] // p
        return x[:, self.rank * n:(self.rank + 1) * n]

    def all_reduce(self, x, where: str):
        self.log.append(("all_reduce", where, self.nbytes(x)))
        self.dist.all_reduce(x)
        return x

    def all_gather(self, x, where: str):
        parts = [self.t.zeros_like(x) for _ in range(self.world)] if self.fw == "torch" else []
        self.dist.all_gather(parts, x)
        out = self.cat(parts, axis=1)
        self.log.append(("all_gather", where, self.nbytes(out)))
        return out

    def reduce_scatter(self, x, where: str):
        self.log.append(("reduce_scatter", where, self.nbytes(x)))
        self.dist.all_reduce(x)
        return self.cols(x, self.world)

    def cat(self, xs, axis: int = 0):
        return self.t.cat(xs, dim=axis) if self.fw == "torch" else self.t.concat(xs, axis=axis)

    def positive(self, x):
        """1.0 where ``x > 0``, else 0.0 (ReLU's derivative), in ``x``'s dtype."""
        return (x > 0).to(x.dtype) if self.fw == "torch" else (x > 0).astype(x.dtype)

    def barrier(self) -> None:
        self.dist.barrier()


def _convert(c: _Comm, x, have: str, need: str, tp: int, where: str):
    if tp == 1 or have == need:
        return x
    if have == "R":
        return c.cols(x, tp)                       # R -> S: each rank keeps its slice
    if have == "S":
        return c.all_gather(x, where)
    return c.all_reduce(x, where) if need == "R" else c.reduce_scatter(x, where)


def _plan_step(c: _Comm, ws_local, x, t, placements, tp: int, dp: int, batch: int, lr: float):
    """One SGD step of the MLP under ``placements`` (see grader.lab.planner). ``x``, ``t``:
    this replica's batch. Updates ``ws_local`` in place; returns the loss of this replica."""
    from .planner import _GIVES, _NEEDS

    grad_in = {"R": "R", "col": "P", "row": "S"}
    grad_out_need = {"R": "R", "col": "S", "row": "R"}
    L = len(placements)
    acts, masks = [], []
    a = _convert(c, x, "R", _NEEDS[placements[0]], tp, "input")
    for k, pl in enumerate(placements):
        acts.append(a)
        z = a @ ws_local[k]
        need = _NEEDS[placements[k + 1]] if k + 1 < L else "R"
        z = _convert(c, z, _GIVES[pl], need, tp, f"fwd after layer {k}")
        if k + 1 < L:
            masks.append(c.positive(z))
            a = z * masks[-1]
        else:
            a = z
    diff = a - t
    loss = float((diff * diff).mean())
    g = diff * (2.0 / (batch * t.shape[1]))        # d(mean over the global batch)/d out
    grads = [None] * L
    for k in range(L - 1, -1, -1):
        have = "R" if k == L - 1 else grad_in[placements[k + 1]]
        if k < L - 1:
            g = g * masks[k]
        g = _convert(c, g, have, grad_out_need[placements[k]], tp, f"bwd into layer {k}")
        grads[k] = acts[k].T @ g                   # (in, b) @ (b, out): this rank's dW
        if k > 0:
            g = g @ ws_local[k].T                  # (b, out) @ (out, in): dL/d input
    if dp > 1:   # one fused all-reduce of every gradient, as DDP's buckets do
        flat = c.all_reduce(c.cat([gr.reshape([-1]) for gr in grads]), "dp gradients")
        sizes = [int(np.prod(gr.shape)) for gr in grads]
        offsets = np.cumsum([0] + sizes)
        grads = [flat[offsets[k]:offsets[k + 1]].reshape(list(grads[k].shape))
                 for k in range(L)]
    for k in range(L):
        ws_local[k] -= lr * grads[k]
    return loss


def _local_weights(c: _Comm, ws, placements, tp: int):
    out = []
    for w, pl in zip(ws, placements):
        if tp > 1 and pl == "col":
            w = np.split(w, tp, axis=1)[c.rank % tp]
        elif tp > 1 and pl == "row":
            w = np.split(w, tp, axis=0)[c.rank % tp]
        out.append(c.tensor(np.array(w, dtype=np.float32, order="C")))  # a copy: updated in place
    return out


def mlp_step_rank(rank: int, world: int, dims, batch: int, strategies, steps: int = 3,
                  lr: float = 0.05) -> list[dict]:
    """Run each ``(dp, tp, placements)`` of ``strategies`` (``dp*tp == world``, one of them
    1) for ``1 + steps`` SGD steps with explicit collectives: the median step time, every
    collective with its tensor size, the losses, and the final full weights (rank 0)."""
    c = _Comm(os.environ["COURSE_FRAMEWORK"], rank, world)
    ws0, (x_all, t_all) = mlp_init(dims), mlp_data(dims, batch)
    results = []
    for dp, tp, placements in strategies:
        if dp * tp != world or min(dp, tp) != 1:
            raise ValueError(f"dp={dp} x tp={tp}: this runner needs dp*tp == {world}, "
                             "with one of them 1")
        rows = slice(rank * batch // dp, (rank + 1) * batch // dp) if dp > 1 else slice(None)
        x, t = c.tensor(x_all[rows]), c.tensor(t_all[rows])
        ws = _local_weights(c, ws0, placements, tp)
        times, losses = [], []
        for step in range(1 + steps):
            c.log.clear()
            c.barrier()
            t0 = time.perf_counter()
            losses.append(_plan_step(c, ws, x, t, placements, tp, dp, batch, lr))
            c.barrier()
            times.append(time.perf_counter() - t0)
        full = []
        for w, pl in zip(ws, placements):
            if tp > 1 and pl != "R":
                parts = [c.t.zeros_like(w) for _ in range(world)] if c.fw == "torch" else []
                c.dist.all_gather(parts, w)
                ax = 1 if pl == "col" else 0
                w = c.cat(parts, axis=ax)
            full.append(w.numpy().copy())
        results.append({"strategy": (dp, tp, tuple(placements)), "step_s": times[1:],
                        "collectives": list(c.log), "losses": losses, "weights": full})
    return results


def mlp_numpy_reference(dims, batch: int, steps: int, lr: float = 0.05) -> dict:
    """The same training, unsharded, in NumPy float32: the reference for every plan."""
    ws, (x, t) = mlp_init(dims), mlp_data(dims, batch)
    losses = []
    for _ in range(steps):
        acts, a = [], x
        for k, w in enumerate(ws):
            acts.append(a)
            a = a @ w
            if k < len(ws) - 1:
                a = np.maximum(a, 0)
        losses.append(float(((a - t) ** 2).mean()))
        g = (a - t) * (2.0 / a.size)
        for k in range(len(ws) - 1, -1, -1):
            dw = acts[k].T @ g
            if k > 0:
                g = (g @ ws[k].T) * (acts[k] > 0)
            ws[k] = ws[k] - lr * dw
    return {"losses": losses, "weights": ws}


def calibrate_rank(rank: int, world: int, dims, batch: int,
                   sizes=(2**12, 2**15, 2**18, 2**20, 2**22), repeats: int = 5) -> dict:
    """What this machine's ranks do: seconds per matmul of each layer's shape (rank 0) and
    the median time of an all-reduce of each size in ``sizes`` bytes (both ranks)."""
    c = _Comm(os.environ["COURSE_FRAMEWORK"], rank, world)
    rng = np.random.default_rng(rank)
    matmuls = []
    for i, o in zip(dims[:-1], dims[1:]):
        a = c.tensor(rng.standard_normal((batch, i)).astype(np.float32))
        w = c.tensor(rng.standard_normal((i, o)).astype(np.float32))
        _ = a @ w
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            _ = a @ w
            ts.append(time.perf_counter() - t0)
        matmuls.append({"shape": (batch, i, o), "s": float(np.median(ts)),
                        "flops": 2 * batch * i * o})
    reduces = []
    for n in sizes:
        x = c.tensor(np.ones(n // 4, np.float32))
        c.dist.all_reduce(x)
        ts = []
        for _ in range(repeats):
            c.barrier()
            t0 = time.perf_counter()
            c.dist.all_reduce(x)
            ts.append(time.perf_counter() - t0)
        reduces.append({"bytes": n, "s": float(np.median(ts))})
    return {"matmuls": matmuls, "all_reduce": reduces}
