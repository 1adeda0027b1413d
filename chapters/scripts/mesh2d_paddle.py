"""An MLP on a 2-D mesh of ranks: data parallel along "dp", tensor parallel along "tp",
each weight placed by a plan. Every plan trains next to an unsplit copy of the model
(they must agree) and times its steps. Then, in the same launch (a launch costs
seconds), ``sweep`` times bare collectives of several sizes, for the chapter's cost
model.

    python -m paddle.distributed.launch --nproc_per_node 4 mesh2d_paddle.py
    python -m paddle.distributed.launch --nproc_per_node 4 mesh2d_paddle.py \\
        --plans 2x2:col,row 4x1:R,R
    python -m paddle.distributed.launch --gpus 0,1,2,3,4,5,6,7 mesh2d_paddle.py \\
        --device gpu --plans 2x4:col,row,R

A plan "DPxTP:p1,p2,..." gives the mesh's shape and one placement per layer: "R" (the
weight whole on every rank of a tp group), "col" (split by output features) or "row"
(split by input features). The batch is always split along "dp". With the reshard
functions' log on (as in reshard_paddle.py), each rank's log shows the collectives of a
plan's first step under the lines "== <plan> <phase>" this script prints.
"""
import argparse
import json
import os
import sys
import time
import traceback

RESHARDS = ["s_to_r", "p_to_r", "r_to_s", "s_to_s", "p_to_s", "r_to_p", "s_to_p"]
os.environ["GLOG_vmodule"] = ",".join(f"{f}_reshard_function=4" for f in RESHARDS)
os.environ["GLOG_minloglevel"] = "0"

import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.distributed as dist  # noqa: E402

# paddle.nn.Linear keeps its weight as (in, out): a column split is Shard(1), a row
# split Shard(0)
WEIGHT = {"R": dist.Replicate(), "col": dist.Shard(1), "row": dist.Shard(0)}
NEEDS = {"R": "R", "col": "R", "row": "S"}     # the input layout each placement needs
# activations (batch, features): batch split along dp; features whole (R) or split (S)
LAYOUT = {"R": [dist.Shard(0), dist.Replicate()], "S": [dist.Shard(0), dist.Shard(1)]}


# the plans the chapter compares on 4 ranks: data parallel, no split at all, two
# tensor-parallel plans, and each of those on a 2 x 2 mesh
PLANS = ["4x1:R,R,R", "1x4:R,R,R", "1x4:col,row,R", "2x2:col,row,R", "1x4:col,R,row",
         "2x2:col,R,row"]


class MLP(paddle.nn.Layer):
    """Bias-free Linear layers with ReLU between them. Placed on a mesh (see `place`),
    its forward reshards each output to the layout the next layer needs (the loss needs
    it whole), and Paddle runs the collective that takes."""

    def __init__(self, dims) -> None:
        super().__init__()
        paddle.seed(0)   # the same initial weights on every rank
        self.layers = paddle.nn.LayerList([paddle.nn.Linear(i, o, bias_attr=False)
                                           for i, o in zip(dims[:-1], dims[1:])])
        self.mesh, self.placements = None, None

    def forward(self, x):
        if self.mesh is not None:
            after = [NEEDS[p] for p in self.placements[1:]] + ["R"]
            x = dist.reshard(x, self.mesh, LAYOUT[NEEDS[self.placements[0]]])
        for k, layer in enumerate(self.layers):
            x = layer(x)
            relu = k < len(self.layers) - 1
            # ReLU acts element by element: on whole or split features alike, but not on
            # partial sums (the output of a "row" layer), which must be added up first
            partial = self.mesh is not None and self.placements[k] == "row"
            if relu and not partial:
                x = paddle.nn.functional.relu(x)
            if self.mesh is not None:
                x = dist.reshard(x, self.mesh, LAYOUT[after[k]])
            if relu and partial:
                x = paddle.nn.functional.relu(x)
        return x


def place(model: MLP, mesh, placements) -> MLP:
    """Each weight: replicated along dp, placed along tp by the plan."""
    def shard_fn(name, layer, mesh):
        if isinstance(layer, paddle.nn.Linear):
            spec = [dist.Replicate(), WEIGHT[placements[int(name.split(".")[-1])]]]
            layer.weight = dist.shard_tensor(layer.weight, mesh, spec)

    model = dist.shard_layer(model, mesh, shard_fn)
    model.mesh, model.placements = mesh, placements
    return model


def parse(plan: str):
    shape, _, placements = plan.partition(":")
    dp, tp = (int(v) for v in shape.split("x"))
    return dp, tp, placements.split(",")


def mark(text: str) -> None:
    sys.stderr.flush()
    print(f"== {text}", flush=True)


class Run:
    """One plan: its mesh, the placed model, an unsplit copy, and their optimizers."""

    def __init__(self, plan: str, dims, batch: int, lr: float = 0.05) -> None:
        self.plan = plan
        dp, tp, placements = parse(plan)
        mesh = dist.ProcessMesh(np.arange(dp * tp).reshape(dp, tp).tolist(),
                                dim_names=["dp", "tp"])
        self.reference = MLP(dims)              # unsplit, trained on this rank alone
        self.model = place(MLP(dims), mesh, placements)
        paddle.seed(1)                          # the same global batch on every rank
        self.x, self.t = paddle.randn([batch, dims[0]]), paddle.randn([batch, dims[-1]])
        # the batch split along dp (the rows each replica trains on), whole along tp
        self.xd = dist.shard_tensor(self.x, mesh, LAYOUT["R"])
        self.td = dist.shard_tensor(self.t, mesh, LAYOUT["R"])
        self.opt = paddle.optimizer.SGD(lr, parameters=self.model.parameters())
        self.ref_opt = paddle.optimizer.SGD(lr, parameters=self.reference.parameters())
        self.times, self.ref_times, self.loss_diff = [], [], 0.0

    def step(self, count: bool = False) -> None:
        dist.barrier()
        t0 = time.perf_counter()
        if count:
            mark(f"{self.plan} forward")
        loss = ((self.model(self.xd) - self.td) ** 2).mean()
        if count:
            mark(f"{self.plan} backward")
        loss.backward()
        if count:
            mark(f"{self.plan} optimizer step")
        self.opt.step()
        self.opt.clear_grad()
        if count:
            mark(f"{self.plan} done")
        dist.barrier()
        self.times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()     # the same step, unsplit, timed alike
        ref_loss = ((self.reference(self.x) - self.t) ** 2).mean()
        ref_loss.backward()
        self.ref_opt.step()
        self.ref_opt.clear_grad()
        dist.barrier()
        self.ref_times.append(time.perf_counter() - t0)
        if count:
            self.loss_diff = abs(float(loss) - float(ref_loss))

    def result(self) -> dict:
        mesh = self.model.mesh
        whole = [dist.Replicate(), dist.Replicate()]
        full = [dist.reshard(m.weight, mesh, whole)._local_value()
                for m in self.model.layers]
        weight_diff = max(float((w - r.weight).abs().max())
                          for w, r in zip(full, self.reference.layers))
        return {"plan": self.plan, "step_s": self.times[1:],
                "unsplit_step_s": self.ref_times[1:], "loss_diff": self.loss_diff,
                "weight_diff": weight_diff}


# bytes of the full tensor: 16 KiB, 256 KiB, 4 MiB. The largest is past the plans'
# largest collective (a 1 MiB weight gradient) so that the time the bytes take
# stands out of the latency even when other work slows every collective: with
# sizes that all take about a latency, a busy machine leaves nothing to fit.
SIZES = [2**14, 2**18, 2**22]


def sync(device: str) -> None:
    if device != "cpu":                      # a GPU runs asynchronously: wait for it
        paddle.device.synchronize()


def timed(op: str, nbytes: int, group, device: str, repeats: int) -> float:
    """Seconds of one collective: the fastest of `repeats` on each rank (other work on
    the machine only ever adds time), then the slowest rank's."""
    p = group.nranks
    if op == "all_reduce":
        x = paddle.ones([nbytes // 4])
        run = lambda: dist.all_reduce(x, group=group)  # noqa: E731
    else:    # every rank brings 1/p of the tensor and gets all of it
        x = paddle.ones([nbytes // 4 // p])
        run = lambda: dist.all_gather([], x, group=group)  # noqa: E731
    run()                                    # warm-up
    times = []
    for _ in range(repeats):
        dist.barrier(group=group)
        sync(device)
        t0 = time.perf_counter()
        run()
        sync(device)
        times.append(time.perf_counter() - t0)
    slowest = paddle.to_tensor([min(times)])
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    return slowest.item()


def sweep(device: str, repeats: int) -> list[dict]:
    """All-reduce and all-gather of each size in SIZES, over all ranks and over pairs of
    ranks (the pairs at once, as the tp groups of a (world/2) x 2 mesh run)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    # Every rank creates every pair's group, one at a time: on gloo, Paddle 3.3's groups
    # created at once by disjoint ranks can meet in the store and fail to connect
    pairs = []
    for i in range(world // 2):
        pairs.append(dist.new_group([2 * i, 2 * i + 1]))
        dist.barrier()
    rows = []
    for p, group in ((world, dist.get_group()), (2, pairs[rank // 2])):
        for op in ("all_reduce", "all_gather"):
            for nbytes in SIZES:
                rows.append({"op": op, "ranks": p, "bytes": nbytes,
                             "s": timed(op, nbytes, group, device, repeats)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--plans", nargs="+", default=PLANS)
    ap.add_argument("--dims", default="128,512,512,128", help="in,hidden...,out")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3, help="timed steps after a warm-up")
    ap.add_argument("--repeats", type=int, default=3, help="of each collective timed")
    ap.add_argument("--no-sweep", action="store_true", help="skip the collective sweep")
    ap.add_argument("--out", help="JSON file for the results (written by rank 0)")
    args = ap.parse_args()
    paddle.set_device(args.device)
    dist.init_parallel_env()      # the global group, for the barriers around each step
    dims = [int(v) for v in args.dims.split(",")]
    runs = [Run(p, dims, args.batch) for p in args.plans]
    for step in range(1 + args.steps):   # step 0 warms up and logs the collectives;
        for run in runs:                 # the plans take turns, so that a burst of load
            run.step(count=step == 0)    # on the machine slows all of them, not one
    results = [run.result() for run in runs]
    rows = [] if args.no_sweep else sweep(args.device, args.repeats)
    if dist.get_rank() == 0:
        print(f"MLP {dims}, batch {args.batch}, float32, {dist.get_world_size()} ranks "
              f"on {args.device}")
        for r in results:
            ms = min(r["step_s"]) * 1e3
            print(f"  {r['plan']:<16} {ms:7.2f} ms/step (fastest), vs unsplit: loss "
                  f"{r['loss_diff']:.0e}, weights {r['weight_diff']:.0e}")
        if rows:
            print(f"collectives timed, fastest of {args.repeats} (slowest rank):")
        for r in rows:
            print(f"  {r['op']:<10} over {r['ranks']} ranks, "
                  f"{r['bytes'] / 1024:6.0f} KiB: {r['s'] * 1e3:8.3f} ms")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": dist.get_world_size(), "dims": dims,
                           "batch": args.batch, "device": args.device,
                           "plans": results,
                           "sweep": {"world": dist.get_world_size(), "rows": rows}}, f)


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
