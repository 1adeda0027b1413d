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

__all__ = ["mlp_step_rank", "mlp_numpy_reference", "calibrate_rank", "plan_experiment_rank",
           "chapter_rank", "calibrated", "compare"]


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

            paddle.set_device("cpu")   # the ranks are CPU processes, with or without GPUs
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


def mlp_step_rank(rank: int, world: int, dims, batch: int, strategies, steps: int = 5,
                  lr: float = 0.05) -> list[dict]:
    """Run each ``(dp, tp, placements)`` of ``strategies`` (``dp*tp == world``, one of them
    1) for ``1 + steps`` SGD steps with explicit collectives: the step times (the first,
    untimed warm-up, left out), every collective of the last step with its tensor size, the
    losses, and the final full weights. The strategies take turns, one step each, so that a
    burst of load on a shared machine slows all of them rather than one."""
    c = _Comm(os.environ["COURSE_FRAMEWORK"], rank, world)
    ws0, (x_all, t_all) = mlp_init(dims), mlp_data(dims, batch)
    states = []
    for dp, tp, placements in strategies:
        if dp * tp != world or min(dp, tp) != 1:
            raise ValueError(f"dp={dp} x tp={tp}: this runner needs dp*tp == {world}, "
                             "with one of them 1")
        rows = slice(rank * batch // dp, (rank + 1) * batch // dp) if dp > 1 else slice(None)
        states.append({"strategy": (dp, tp, tuple(placements)), "x": c.tensor(x_all[rows]),
                       "t": c.tensor(t_all[rows]), "ws": _local_weights(c, ws0, placements, tp),
                       "times": [], "losses": []})
    for step in range(1 + steps):
        for st in states:
            dp, tp, placements = st["strategy"]
            c.log.clear()
            c.barrier()
            t0 = time.perf_counter()
            st["losses"].append(_plan_step(c, st["ws"], st["x"], st["t"], placements, tp, dp,
                                           batch, lr))
            c.barrier()
            st["times"].append(time.perf_counter() - t0)
            st["log"] = list(c.log)
    results = []
    for st in states:
        dp, tp, placements = st["strategy"]
        full = []
        for w, pl in zip(st["ws"], placements):
            if tp > 1 and pl != "R":
                parts = [c.t.zeros_like(w) for _ in range(world)] if c.fw == "torch" else []
                c.dist.all_gather(parts, w)
                w = c.cat(parts, axis=1 if pl == "col" else 0)
            full.append(w.numpy().copy())
        results.append({"strategy": st["strategy"], "step_s": st["times"][1:],
                        "collectives": st["log"], "losses": st["losses"], "weights": full})
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
                   sizes=(2**12, 2**16, 2**20, 2**22, 2**23), repeats: int = 5) -> dict:
    """What this machine's ranks do, averaged over the ranks (so that every rank plans
    from the same figures): the median time of one unsharded training step of the MLP (no
    communication) with its FLOPs, and of an all-reduce of each size in ``sizes`` bytes.
    Seconds per matmul of each layer's shape are kept too, for comparison."""
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
        matmuls.append(float(np.median(ts)))
    # one whole step, unsharded: matmuls plus everything the model leaves out (ReLU, loss,
    # the framework's per-op overhead), so its rate is the one a step actually gets
    solo = _Comm(c.fw, 0, 1)
    ws = _local_weights(solo, mlp_init(dims), ["R"] * (len(dims) - 1), 1)
    x, t = (solo.tensor(a) for a in mlp_data(dims, batch))
    steps = []
    for _ in range(1 + repeats):
        t0 = time.perf_counter()
        _plan_step(solo, ws, x, t, ["R"] * (len(dims) - 1), 1, 1, batch, 0.0)
        steps.append(time.perf_counter() - t0)
    reduces = []
    for n in sizes:
        buf = c.tensor(np.ones(n // 4, np.float32))
        c.dist.all_reduce(buf)
        ts = []
        for _ in range(repeats):
            c.barrier()
            t0 = time.perf_counter()
            c.dist.all_reduce(buf)
            ts.append(time.perf_counter() - t0)
        reduces.append(float(np.median(ts)))
    mine = np.array(matmuls + [float(np.median(steps[1:]))] + reduces, np.float32)
    agreed = c.all_reduce(c.tensor(mine), "calibration").numpy() / world
    k = len(matmuls)
    flops = [2 * batch * i * o for i, o in zip(dims[:-1], dims[1:])]
    return {"matmuls": [{"shape": (batch, i, o), "s": float(s), "flops": f}
                        for (i, o), s, f in zip(zip(dims[:-1], dims[1:]), agreed[:k], flops)],
            "step": {"s": float(agreed[k]), "flops": sum(3 * f for f in flops) - flops[0]},
            "all_reduce": [{"bytes": n, "s": float(s)} for n, s in zip(sizes, agreed[k + 1:])]}


def calibrated(cal: dict, world: int, memory: float):
    """The "this machine's CPU ranks" cluster from ``calibrate_rank``'s measurements."""
    from .planner import calibrated_cluster, fit_link

    flops = cal["step"]["flops"] / cal["step"]["s"]
    latency, bandwidth = fit_link([(r["bytes"], r["s"]) for r in cal["all_reduce"]], world)
    return calibrated_cluster(world, flops, bandwidth, latency, memory)


def compare(dims, batch: int, runs: list[dict], cluster) -> tuple[str, list[dict]]:
    """Predicted against measured step time (and collectives) for each run of
    ``mlp_step_rank``: a text table and its rows."""
    from .planner import Strategy, comm_plan, predict

    rows, lines = [], [f"{'strategy':<30} {'predicted ms':>12} {'measured ms':>12} "
                       f"{'(range)':>13} {'error':>7}  collectives as planned"]
    for run in runs:
        dp, tp, pl = run["strategy"]
        pred = predict(list(dims), batch, Strategy(dp, tp, tuple(pl)), cluster)
        measured = float(np.median(run["step_s"]))
        planned = sorted((c.op, c.size) for c in comm_plan(list(dims), pl, batch, tp, dp))
        seen = sorted((op, size) for op, _, size in run["collectives"])
        err = (pred.step_s - measured) / measured
        rows.append({"strategy": str(pred.strategy), "predicted_s": pred.step_s,
                     "measured_s": measured, "error": err, "bytes_match": planned == seen})
        spread = f"{min(run['step_s']) * 1e3:.0f}-{max(run['step_s']) * 1e3:.0f}"
        lines.append(f"{str(pred.strategy):<30} {pred.step_s * 1e3:12.2f} {measured * 1e3:12.2f} "
                     f"{spread:>13} {err:+7.0%}  {'yes' if planned == seen else 'NO'}")
    return "\n".join(lines), rows


def plan_experiment_rank(rank: int, world: int, dims, batch: int, strategies,
                         steps: int = 5, memory: float = 8 * 2**30) -> dict:
    """One launch for the chapter: calibrate, let the planner pick a strategy from that
    calibration (every rank picks the same: the figures are averaged over the ranks), then
    run the given strategies and the pick."""
    from .planner import best_strategy

    cal = calibrate_rank(rank, world, dims, batch)
    best, _ = best_strategy(list(dims), batch, calibrated(cal, world, memory))
    pick = (best.strategy.dp, best.strategy.tp, best.strategy.placements)
    todo = [tuple((dp, tp, tuple(pl))) for dp, tp, pl in strategies]
    if pick not in todo and min(pick[:2]) == 1:
        todo.append(pick)
    runs = mlp_step_rank(rank, world, dims, batch, todo, steps)
    return {"calibration": cal, "pick": pick, "runs": runs, "load_average": os.getloadavg()}


def chapter_rank(rank: int, world: int, dims, batch: int, strategies, steps: int = 4) -> dict:
    """Everything the automatic-parallelism chapter runs on the ranks, in one launch (a
    launch costs seconds of process start-up, Paddle's most): the semi-automatic
    experiments, then the planner's experiment."""
    from .sharding import semi_auto_rank

    return {"semi": semi_auto_rank(rank, world),
            "plan": plan_experiment_rank(rank, world, dims, batch, strategies, steps)}
