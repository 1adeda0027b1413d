"""Rank functions for the automatic-parallelism chapter, run through ``grader.lab.launch``.

Semi-automatic parallelism: the program says how each tensor is laid out over a mesh of
ranks, and the framework inserts the communication. Here, side by side:

- Paddle: ``ProcessMesh``, ``shard_tensor``, ``reshard``, ``shard_layer`` with
  ``Shard``/``Replicate``/``Partial`` placements;
- PyTorch: ``DeviceMesh``, ``distribute_tensor``, ``DTensor.redistribute``, placements,
  and ``CommDebugMode`` to count the collectives.

How the communication is *observed* (nothing here is inferred from the placements):

- PyTorch: a ``TorchDispatchMode`` sees every ``_c10d_functional`` collective DTensor
  runs, with the tensors it takes and returns; their sizes are the payload bytes.
  ``CommDebugMode`` (PyTorch's own counter) runs alongside and gives the same counts.
- Paddle: its reshard functions are C++; with ``GLOG_vmodule`` (see :data:`PADDLE_LOG_ENV`)
  each logs its name and the collective it calls (``Call `AllGather` in Resharding on CPU``).
  The rank reads those lines back from its own log; the payload bytes are the sizes of the
  local tensors that collective took and returned.

The planner's timed runs, with explicit collectives, are in ``grader.lab.plan_exec``.
"""
from __future__ import annotations

import os
import re
import time

import numpy as np

__all__ = ["PADDLE_LOG_ENV", "RESHARD_CASES", "reshard_rank", "mlp_tp_rank", "mlp_reference",
           "mlp_init", "mlp_data", "semi_auto_rank", "reshard_table", "sent_per_rank"]

_RESHARD_FILES = ["s_to_r", "p_to_r", "r_to_s", "s_to_s", "p_to_s", "r_to_p", "s_to_p",
                  "same_status", "nd_mesh", "x_to_r"]
PADDLE_LOG_ENV = {
    "GLOG_minloglevel": "0",
    "GLOG_vmodule": ",".join(f"{f}_reshard_function=10" for f in _RESHARD_FILES),
}
RESHARD_CASES = [("Shard(0)", "Replicate"), ("Partial", "Replicate"), ("Shard(0)", "Shard(1)"),
                 ("Replicate", "Shard(0)"), ("Partial", "Shard(0)")]


def _global_matrix(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    # integer-valued float32: partial sums add up exactly, so equality checks are exact
    return np.random.default_rng(seed).integers(-8, 8, (rows, cols)).astype(np.float32)


def _partial_part(g: np.ndarray, rank: int, world: int, seed: int = 1) -> np.ndarray:
    """Rank ``rank``'s addend of ``g``: different on every rank, summing to ``g``."""
    parts = [np.random.default_rng(seed + r).integers(-4, 4, g.shape).astype(np.float32)
             for r in range(world - 1)]
    parts.append(g - sum(parts))
    return parts[rank]


def _expected_local(g: np.ndarray, placement: str, rank: int, world: int) -> np.ndarray:
    if placement == "Replicate":
        return g
    axis = int(placement[-2])
    return np.split(g, world, axis=axis)[rank]


# ---------------------------------------------------------------- reshards, PyTorch
def _torch_placement(name: str):
    from torch.distributed.tensor import Partial, Replicate, Shard

    return {"Replicate": Replicate(), "Partial": Partial()}.get(name) or Shard(int(name[-2]))


def _torch_collective_recorder():
    from torch.utils._python_dispatch import TorchDispatchMode
    import torch

    class Recorder(TorchDispatchMode):
        """Records each functional collective with the bytes it takes and returns."""

        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[str, int, int]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func._schema.name
            if name.startswith("_c10d_functional::") and not name.endswith(("wait_tensor",
                                                                              "autograd")):
                size = lambda xs: sum(t.numel() * t.element_size()  # noqa: E731
                                      for t in xs if isinstance(t, torch.Tensor))
                flat = lambda x: x if isinstance(x, (list, tuple)) else [x]  # noqa: E731
                ins = [a for arg in args for a in flat(arg)]
                self.calls.append((name.split("::")[1], size(ins), size(flat(out))))
            return out

    return Recorder()


def _reshard_torch(rank: int, world: int, g: np.ndarray, cases) -> list[dict]:
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, distribute_tensor
    from torch.distributed.tensor.debug import CommDebugMode

    mesh = init_device_mesh("cpu", (world,))
    rows = []
    for src, dst in cases:
        if src == "Partial":
            local = torch.from_numpy(_partial_part(g, rank, world))
            d = DTensor.from_local(local, mesh, [_torch_placement("Partial")])
        else:
            d = distribute_tensor(torch.from_numpy(g), mesh, [_torch_placement(src)])
        rec, counter = _torch_collective_recorder(), CommDebugMode()
        with counter, rec:
            out = d.redistribute(mesh, [_torch_placement(dst)])
            got = out.to_local().numpy()
        rows.append({
            "src": src, "dst": dst, "collectives": rec.calls,
            "comm_debug_counts": {str(k).split(".")[-1]: v
                                  for k, v in counter.get_comm_counts().items()},
            "exact": bool(np.array_equal(got, _expected_local(g, dst, rank, world))),
            "note": "",
        })
    return rows


# ---------------------------------------------------------------- reshards, Paddle
def _own_log() -> str | None:
    try:
        return os.readlink("/proc/self/fd/2")
    except OSError:
        return None


def _log_since(path: str | None, offset: int) -> tuple[str, int]:
    if not path:
        return "", offset
    with open(path, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return text, offset + len(text.encode(errors="replace"))


def _paddle_placement(name: str):
    import paddle.distributed as dist

    return {"Replicate": dist.Replicate(), "Partial": dist.Partial()}.get(name) or \
        dist.Shard(int(name[-2]))


def _observed_reshard(d, mesh, placement, log: str | None):
    """``dist.reshard`` with what Paddle's log says it ran: (result, functions, collectives
    as (name, local bytes in, local bytes out))."""
    import paddle.distributed as dist

    sys_flush()
    offset = os.path.getsize(log) if log else 0
    in_bytes = int(np.prod(d._local_value().shape)) * 4
    out = dist.reshard(d, mesh, [placement])
    out_bytes = int(np.prod(out._local_value().shape)) * 4
    sys_flush()
    text, _ = _log_since(log, offset)
    funcs = re.findall(r"Call (\w+Reshard)\b", text)
    colls = [(c, in_bytes, out_bytes) for c in re.findall(r"Call `(\w+)` in Resharding", text)]
    return out, funcs, colls


def _reshard_paddle(rank: int, world: int, g: np.ndarray, cases) -> list[dict]:
    import paddle
    import paddle.distributed as dist
    from paddle.distributed.auto_parallel.api import dtensor_from_local

    paddle.set_device("cpu")   # CPU ranks on every machine (see the chapter), also with GPUs

    mesh = dist.ProcessMesh(list(range(world)), dim_names=["x"])
    log = _own_log()
    rows = []
    for src, dst in cases:
        if src == "Partial":
            d = dtensor_from_local(paddle.to_tensor(_partial_part(g, rank, world)), mesh,
                                   [_paddle_placement("Partial")])
        else:
            d = dist.shard_tensor(paddle.to_tensor(g), mesh, [_paddle_placement(src)])
        note = ""
        try:
            out, funcs, colls = _observed_reshard(d, mesh, _paddle_placement(dst), log)
        except NotImplementedError as exc:
            # Paddle 3.3's CPU build has no all_to_all / reduce_scatter kernel: go via Replicate
            msg = str(exc).strip().splitlines()[0]
            note = ("direct reshard fails on CPU: " + msg.split(" (at ")[0]
                    + "; done as two reshards via Replicate")
            mid, f1, c1 = _observed_reshard(d, mesh, dist.Replicate(), log)
            out, f2, c2 = _observed_reshard(mid, mesh, _paddle_placement(dst), log)
            funcs, colls = f1 + f2, c1 + c2
        got = out._local_value().numpy()
        rows.append({
            "src": src, "dst": dst, "reshard_functions": funcs, "collectives": colls,
            "exact": bool(np.array_equal(got, _expected_local(g, dst, rank, world))),
            "note": note, "log_seen": bool(log),
        })
    return rows


def sys_flush() -> None:
    import sys

    sys.stdout.flush()
    sys.stderr.flush()


def reshard_rank(rank: int, world: int, rows: int = 256, cols: int = 128,
                 cases=tuple(RESHARD_CASES)) -> list[dict]:
    """Each reshard of ``cases`` on a ``rows x cols`` float32 matrix: the collectives
    observed, their payload bytes, and whether the local result is exactly right."""
    g = _global_matrix(rows, cols)
    if os.environ["COURSE_FRAMEWORK"] == "torch":
        return _reshard_torch(rank, world, g, cases)
    return _reshard_paddle(rank, world, g, cases)


# ---------------------------------------------------------------- a sharded MLP, trained
def mlp_init(dims, seed: int = 0) -> list[np.ndarray]:
    """Weights ``[in, out]`` of a bias-free MLP, float32, scaled like PyTorch's default."""
    rng = np.random.default_rng(seed)
    return [(rng.uniform(-1, 1, (i, o)) / np.sqrt(i)).astype(np.float32)
            for i, o in zip(dims[:-1], dims[1:])]


def mlp_data(dims, batch: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch, dims[0])).astype(np.float32),
            rng.standard_normal((batch, dims[-1])).astype(np.float32))


def _torch_mlp(ws):
    import torch

    layers = []
    for k, w in enumerate(ws):
        lin = torch.nn.Linear(*w.shape, bias=False)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.T))      # torch keeps (out, in)
        layers += [lin] + ([torch.nn.ReLU()] if k < len(ws) - 1 else [])
    return torch.nn.Sequential(*layers)


def _paddle_mlp(ws):
    import paddle

    class MLP(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = paddle.nn.Linear(*ws[0].shape, bias_attr=False)
            self.fc2 = paddle.nn.Linear(*ws[1].shape, bias_attr=False)
            self.fc1.weight.set_value(ws[0])             # paddle keeps (in, out)
            self.fc2.weight.set_value(ws[1])

        def forward(self, x):
            return self.fc2(paddle.nn.functional.relu(self.fc1(x)))

    return MLP()


def mlp_reference(framework: str, dims=(64, 128, 32), batch: int = 32, steps: int = 5,
                  lr: float = 0.1) -> dict:
    """The unsharded model on one process: losses and final weights ``[in, out]``."""
    ws, (x, t) = mlp_init(dims), mlp_data(dims, batch)
    losses = []
    if framework == "torch":
        import torch

        model = _torch_mlp(ws)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        for _ in range(steps):
            loss = ((model(torch.from_numpy(x)) - torch.from_numpy(t)) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        final = [m.weight.detach().numpy().T.copy() for m in model if hasattr(m, "weight")]
    else:
        import paddle

        paddle.set_device("cpu")
        model = _paddle_mlp(ws)
        opt = paddle.optimizer.SGD(learning_rate=lr, parameters=model.parameters())
        for _ in range(steps):
            loss = ((model(paddle.to_tensor(x)) - paddle.to_tensor(t)) ** 2).mean()
            loss.backward()
            opt.step()
            opt.clear_grad()
            losses.append(float(loss))
        final = [model.fc1.weight.numpy(), model.fc2.weight.numpy()]
    return {"losses": losses, "weights": final}


def mlp_tp_rank(rank: int, world: int, dims=(64, 128, 32), batch: int = 32, steps: int = 5,
                lr: float = 0.1) -> dict:
    """Two-layer MLP, first layer split column-wise, second row-wise (Megatron-style), by
    the framework's semi-automatic API; trained ``steps`` SGD steps. Returns the losses,
    the full weights gathered back, the collectives of the last step, and how far all of it
    is from the unsharded model trained the same way on this rank alone."""
    fw = os.environ["COURSE_FRAMEWORK"]
    run = _mlp_tp_torch if fw == "torch" else _mlp_tp_paddle
    out = run(world, mlp_init(dims), *mlp_data(dims, batch), steps, lr)
    ref = mlp_reference(fw, dims, batch, steps, lr)
    out.update(
        ref_losses=ref["losses"],
        max_weight_diff=max(float(np.abs(a - b).max())
                            for a, b in zip(out["weights"], ref["weights"])),
        max_loss_diff=float(np.abs(np.subtract(out["losses"], ref["losses"])).max()))
    return out


def _mlp_tp_torch(world, ws, x, t, steps, lr) -> dict:
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    mesh = init_device_mesh("cpu", (world,))
    # nn.Sequential(Linear, ReLU, Linear): layer "0" split by columns, layer "2" by rows
    model = parallelize_module(_torch_mlp(ws), mesh,
                               {"0": ColwiseParallel(), "2": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        fwd, bwd, counter = (_torch_collective_recorder(), _torch_collective_recorder(),
                             CommDebugMode())
        with counter:
            with fwd:
                loss = ((model(torch.from_numpy(x)) - torch.from_numpy(t)) ** 2).mean()
            opt.zero_grad()
            with bwd:
                loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    linears = [m for m in model if hasattr(m, "weight")]
    return {"losses": losses,
            "weights": [m.weight.full_tensor().detach().numpy().T.copy() for m in linears],
            "local_shapes": [tuple(m.weight.to_local().shape) for m in linears],
            "collectives": {"forward": fwd.calls, "backward": bwd.calls,
                            "comm_debug_counts": {str(k).split(".")[-1]: v for k, v
                                                  in counter.get_comm_counts().items()}}}


def _mlp_tp_paddle(world, ws, x, t, steps, lr) -> dict:
    import paddle
    import paddle.distributed as dist

    paddle.set_device("cpu")

    mesh = dist.ProcessMesh(list(range(world)), dim_names=["x"])

    def shard_fn(name, layer, mesh):
        if name == "fc1":    # weight (in, out): a column split splits the out axis
            layer.weight = dist.shard_tensor(layer.weight, mesh, [dist.Shard(1)])
        elif name == "fc2":  # a row split splits the in axis
            layer.weight = dist.shard_tensor(layer.weight, mesh, [dist.Shard(0)])

    model = dist.shard_layer(_paddle_mlp(ws), mesh, shard_fn)
    opt = paddle.optimizer.SGD(learning_rate=lr, parameters=model.parameters())
    xd = dist.shard_tensor(paddle.to_tensor(x), mesh, [dist.Replicate()])
    td = dist.shard_tensor(paddle.to_tensor(t), mesh, [dist.Replicate()])
    log, losses = _own_log(), []
    for step in range(steps):
        sys_flush()
        offset = os.path.getsize(log) if log else 0
        loss = ((model(xd) - td) ** 2).mean()
        sys_flush()
        text_f, offset = _log_since(log, offset)
        loss.backward()
        sys_flush()
        text_b, _ = _log_since(log, offset)
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    found = lambda text: re.findall(r"Call `(\w+)` in Resharding", text)  # noqa: E731
    weights = (model.fc1.weight, model.fc2.weight)
    return {"losses": losses,
            "weights": [dist.reshard(w, mesh, [dist.Replicate()])._local_value().numpy()
                        for w in weights],
            "local_shapes": [tuple(w._local_value().shape) for w in weights],
            "collectives": {"forward": found(text_f), "backward": found(text_b)}}


def semi_auto_rank(rank: int, world: int) -> dict:
    """The chapter's two semi-automatic experiments in one launch (each launch costs
    seconds of start-up): the reshards, then the column/row MLP."""
    return {"reshards": reshard_rank(rank, world), "mlp": mlp_tp_rank(rank, world)}


# ---------------------------------------------------------------- reading the results
_KIND = {"all_gather_into_tensor": "all_gather", "AllGather": "all_gather",
         "all_reduce": "all_reduce", "AllReduce": "all_reduce",
         "reduce_scatter_tensor": "reduce_scatter", "ReduceScatter": "reduce_scatter",
         "all_to_all_single": "all_to_all", "AllToAll": "all_to_all"}


def sent_per_rank(op: str, in_bytes: int, out_bytes: int, world: int) -> float:
    """Bytes one rank sends in a ring implementation of ``op``, from the local sizes it
    took and returned; 0 for a local op (a slice, a concat)."""
    kind = _KIND.get(op)
    if kind is None:
        return 0.0
    full = {"all_gather": out_bytes, "reduce_scatter": in_bytes}.get(kind, in_bytes)
    factor = 2 if kind == "all_reduce" else 1
    return factor * (world - 1) / world * full


def reshard_table(rows: list[dict], world: int = 2) -> str:
    """The reshards one rank observed, as a text table."""
    lines = [f"{'reshard':<22} {'what ran (observed)':<40} {'local in -> out':>17} "
             f"{'sent/rank':>10} exact"]
    for r in rows:
        ops = [f"{op}" for op, _, _ in r["collectives"]] or ["nothing (local)"]
        io = (f"{r['collectives'][0][1] // 1024} -> {r['collectives'][-1][2] // 1024} KiB"
              if r["collectives"] else "")
        sent = sum(sent_per_rank(op, i, o, world) for op, i, o in r["collectives"])
        lines.append(f"{r['src'] + ' -> ' + r['dst']:<22} {' + '.join(ops):<40} {io:>17} "
                     f"{sent / 1024:7.0f} KiB {r['exact']}")
        if r.get("note"):
            lines.append(f"{'':<22} note: {r['note']}")
    return "\n".join(lines)
