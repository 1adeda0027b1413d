"""Paddle's semi-automatic API on a 1-D mesh, in one launch (a launch costs seconds):

1. ``reshards``: every change of placement of one matrix, and the collectives Paddle
   runs for it;
2. ``tp_mlp``: a two-layer MLP split Megatron-style (first layer by columns, second by
   rows) with ``dist.shard_layer``, trained next to an unsplit copy of itself.

    python -m paddle.distributed.launch --nproc_per_node 2 semi_auto_paddle.py
    python -m paddle.distributed.launch --gpus 0,1 semi_auto_paddle.py --device gpu

Paddle's reshard functions (C++) log each step they take when their glog level is 4 or
more (``Call `AllGather` in Resharding on CPU``). The script switches that log on and
prints a marker line (``== <what follows>``) before each reshard and each phase of the
MLP's last step, so that each rank's log (``log/workerlog.<rank>``) says which
collective belongs to which.
"""
import argparse
import json
import os
import sys
import traceback

RESHARDS = ["s_to_r", "p_to_r", "r_to_s", "s_to_s", "p_to_s", "r_to_p", "s_to_p"]
# glog reads these when paddle is imported
os.environ["GLOG_vmodule"] = ",".join(f"{f}_reshard_function=4" for f in RESHARDS)
os.environ["GLOG_minloglevel"] = "0"

import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.distributed as dist  # noqa: E402
from paddle.distributed.auto_parallel.api import dtensor_from_local  # noqa: E402


def mark(text: str) -> None:
    """A line in the log: the reshard lines below it belong to `text`."""
    sys.stderr.flush()
    print(f"== {text}", flush=True)


# ------------------------------------------------------------------ 1. reshards
CASES = [(dist.Shard(0), dist.Replicate()), (dist.Partial(), dist.Replicate()),
         (dist.Shard(0), dist.Shard(1)), (dist.Replicate(), dist.Shard(0)),
         (dist.Partial(), dist.Shard(0))]


def reshards(mesh) -> list[dict]:
    """Each reshard of CASES on one integer-valued 256 x 128 float32 matrix (so that
    sums are exact), built on every rank alike; Partial tensors from addends that differ
    from rank to rank and sum to the matrix."""
    rank, world = dist.get_rank(), dist.get_world_size()
    paddle.seed(0)
    g = paddle.randint(-8, 8, [256, 128]).astype("float32")
    parts = paddle.randint(-4, 4, [max(world - 1, 1), 256, 128]).astype("float32")
    addend = parts[rank] if rank < world - 1 else g - parts[: world - 1].sum(0)
    rows = []
    for src, dst in CASES:
        if src.is_partial():
            d = dtensor_from_local(addend, mesh, [src])
        else:
            d = dist.shard_tensor(g, mesh, [src])
        mark(f"{src} -> {dst}")
        error = ""
        try:
            out = dist.reshard(d, mesh, [dst])
            local_out = out._local_value().shape
            want = g if dst.is_replicated() else \
                paddle.split(g, world, dst.get_dim())[rank]
            exact = bool(paddle.equal_all(out._local_value(), want))
        except NotImplementedError as e:    # a kernel this build lacks
            error, local_out, exact = str(e).strip().splitlines()[0][:120], None, False
        sys.stderr.flush()
        print(f"   local {d._local_value().shape} -> {local_out}, exact: {exact}"
              + (f"\n   {error}" if error else ""), flush=True)
        rows.append({"src": str(src), "dst": str(dst), "exact": exact, "error": error})
    return rows


# ------------------------------------------------------------------ 2. the split MLP
DIMS, BATCH, STEPS, LR = (64, 128, 32), 32, 5, 0.1


class MLP(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        paddle.seed(0)   # the same initial weights on every rank
        self.fc1 = paddle.nn.Linear(DIMS[0], DIMS[1], bias_attr=False)
        self.fc2 = paddle.nn.Linear(DIMS[1], DIMS[2], bias_attr=False)

    def forward(self, x):
        return self.fc2(paddle.nn.functional.relu(self.fc1(x)))


def shard_fn(name, layer, mesh):
    # paddle.nn.Linear keeps its weight as (in, out): a column split is Shard(1),
    # a row split Shard(0)
    if name == "fc1":
        layer.weight = dist.shard_tensor(layer.weight, mesh, [dist.Shard(1)])
    elif name == "fc2":
        layer.weight = dist.shard_tensor(layer.weight, mesh, [dist.Shard(0)])


def tp_mlp(mesh) -> dict:
    mark("the split MLP")
    reference = MLP()                  # the unsplit model, trained on this rank alone
    model = dist.shard_layer(MLP(), mesh, shard_fn)
    paddle.seed(1)                     # the same batch on every rank
    x, t = paddle.randn([BATCH, DIMS[0]]), paddle.randn([BATCH, DIMS[2]])
    xd = dist.shard_tensor(x, mesh, [dist.Replicate()])
    td = dist.shard_tensor(t, mesh, [dist.Replicate()])
    opt = paddle.optimizer.SGD(learning_rate=LR, parameters=model.parameters())
    ref_opt = paddle.optimizer.SGD(learning_rate=LR, parameters=reference.parameters())

    losses, ref_losses = [], []
    for step in range(STEPS):
        last = step == STEPS - 1       # the log's markers: in the last step only
        if last:
            mark("forward")
        loss = paddle.nn.functional.mse_loss(model(xd), td)
        if last:
            mark("backward")
        loss.backward()
        if last:
            mark("optimizer step")
        opt.step()
        opt.clear_grad()
        if last:
            mark("end of step")
        ref_loss = paddle.nn.functional.mse_loss(reference(x), t)
        ref_loss.backward()
        ref_opt.step()
        ref_opt.clear_grad()
        losses.append(float(loss))
        ref_losses.append(float(ref_loss))

    pairs = [(model.fc1.weight, reference.fc1.weight),
             (model.fc2.weight, reference.fc2.weight)]
    full = [dist.reshard(w, mesh, [dist.Replicate()])._local_value() for w, _ in pairs]
    weight_diff = max(float((w - r).abs().max()) for w, (_, r) in zip(full, pairs))
    loss_diff = float(np.abs(np.subtract(losses, ref_losses)).max())
    shapes = [w._local_value().shape for w, _ in pairs]
    if dist.get_rank() == 0:
        print(f"MLP {DIMS}, batch {BATCH}, {STEPS} SGD steps, float32, "
              f"{dist.get_world_size()} ranks")
        for name, (w, _) in zip(("first (column-wise)", "second (row-wise)"), pairs):
            print(f"  {name} layer: weight {list(w.shape)} is {w.placements}, "
                  f"rank 0 holds {list(w._local_value().shape)}")
        print("  losses, split  :", [round(v, 6) for v in losses])
        print("  losses, unsplit:", [round(v, 6) for v in ref_losses])
        print(f"  largest difference: loss {loss_diff:.1e}, weight {weight_diff:.1e}")
    return {"losses": losses, "ref_losses": ref_losses, "loss_diff": loss_diff,
            "weight_diff": weight_diff, "local_shapes": shapes}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")   # "gpu": one GPU per rank, NCCL
    ap.add_argument("--out", help="JSON file for the results (written by rank 0)")
    ap.add_argument("--modes", action="store_true",
                    help="then try Paddle's automatic modes (auto_modes_paddle.py)")
    args = ap.parse_args()
    paddle.set_device(args.device)   # the launcher gives each rank its own GPU
    world = dist.get_world_size()
    mesh = dist.ProcessMesh(list(range(world)), dim_names=["x"])
    result = {"world": world, "device": args.device, "reshards": reshards(mesh),
              "tp_mlp": tp_mlp(mesh)}
    if dist.get_rank() == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    if args.modes:                # the next script, in this launch: it costs seconds
        import auto_modes_paddle
        mark("automatic modes")   # (what Paddle logs from here on belongs to them)
        if dist.get_rank() == 0:
            print("Paddle's automatic modes:", flush=True)
        auto_modes_paddle.try_all(world)


if __name__ == "__main__":
    # With the reshard log on, Paddle 3.3 corrupts its heap while the interpreter shuts
    # down ("corrupted size vs. prev_size") and the rank hangs: leave without teardown.
    status = 0
    try:
        main()
    except Exception:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
