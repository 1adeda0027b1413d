"""An MLP on a 2-D mesh of ranks: data parallel along "dp", tensor parallel along "tp",
each weight placed by a plan. Every plan trains next to an unsplit copy of the model
(they must agree), counts its collectives and times its steps. Then, in the same launch
(a launch costs seconds), ``sweep`` times bare collectives of several sizes, for the
chapter's cost model.

    torchrun --nproc_per_node 4 mesh2d_torch.py                  # 2 x 2 mesh, CPU, gloo
    torchrun --nproc_per_node 4 mesh2d_torch.py --plans 2x2:col,row,R 4x1:R,R,R
    torchrun --nproc_per_node 8 mesh2d_torch.py --device cuda --plans 2x4:col,row,R

A plan "DPxTP:p1,p2,..." gives the mesh's shape and one placement per layer: "R" (the
weight whole on every rank of a tp group), "col" (split by output features) or "row"
(split by input features). The batch is always split along "dp".
"""
import argparse
import contextlib
import copy
import json
import os
import time
import warnings

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import (Replicate, Shard, distribute_module,
                                      distribute_tensor)
from torch.distributed.tensor.debug import CommDebugMode

# CommDebugMode's module tracker warns when a module's input needs no gradient; PyTorch
# 2.13 deprecates all_gather_into_tensor for all_gather_single (the old name still runs)
warnings.filterwarnings("ignore", message="Full backward hook")
warnings.filterwarnings("ignore", message=".*all_gather_into_tensor.*deprecated")

# nn.Linear keeps its weight as (out, in): a column split is Shard(0), a row split
# Shard(1)
WEIGHT = {"R": Replicate(), "col": Shard(0), "row": Shard(1)}
NEEDS = {"R": "R", "col": "R", "row": "S"}     # the input layout each placement needs
# activations (batch, features): batch split along dp; features whole (R) or split (S)
LAYOUT = {"R": [Shard(0), Replicate()], "S": [Shard(0), Shard(1)]}


# the plans the chapter compares on 4 ranks: data parallel, no split at all, two
# tensor-parallel plans, and each of those on a 2 x 2 mesh
PLANS = ["4x1:R,R,R", "1x4:R,R,R", "1x4:col,row,R", "2x2:col,row,R", "1x4:col,R,row",
         "2x2:col,R,row"]


class MLP(torch.nn.Module):
    """Bias-free Linear layers with ReLU between them. Placed on a mesh (see `place`),
    its forward redistributes each output to the layout the next layer needs (the loss
    needs it whole), and DTensor runs the collective that takes."""

    def __init__(self, dims) -> None:
        super().__init__()
        torch.manual_seed(0)   # the same initial weights on every rank
        self.layers = torch.nn.ModuleList(torch.nn.Linear(i, o, bias=False)
                                          for i, o in zip(dims[:-1], dims[1:]))
        self.mesh, self.placements = None, None

    def forward(self, x):
        if self.mesh is not None:
            after = [NEEDS[p] for p in self.placements[1:]] + ["R"]
            x = x.redistribute(self.mesh, LAYOUT[NEEDS[self.placements[0]]])
        for k, layer in enumerate(self.layers):
            x = layer(x)
            relu = k < len(self.layers) - 1
            # ReLU acts element by element: on whole or split features alike, but not on
            # partial sums (the output of a "row" layer), which must be added up first
            partial = self.mesh is not None and self.placements[k] == "row"
            if relu and not partial:
                x = torch.relu(x)
            if self.mesh is not None:
                x = x.redistribute(self.mesh, LAYOUT[after[k]])
            if relu and partial:
                x = torch.relu(x)
        return x


def place(model: MLP, mesh, placements) -> MLP:
    """Each weight: replicated along dp, placed along tp by the plan."""
    def partition(name, module, mesh):
        if isinstance(module, torch.nn.Linear):
            k = int(name.split(".")[-1])
            spec = [Replicate(), WEIGHT[placements[k]]]
            weight = distribute_tensor(module.weight, mesh, spec)
            module.weight = torch.nn.Parameter(weight)

    model = distribute_module(model, mesh, partition)
    model.mesh, model.placements = mesh, placements
    return model


def parse(plan: str):
    shape, _, placements = plan.partition(":")
    dp, tp = (int(v) for v in shape.split("x"))
    return dp, tp, placements.split(",")


class Run:
    """One plan: its mesh, the placed model, an unsplit copy, and their optimizers."""

    def __init__(self, plan: str, dims, batch: int, device: str, lr=0.05) -> None:
        self.plan = plan
        dp, tp, placements = parse(plan)
        mesh = init_device_mesh(device, (dp, tp), mesh_dim_names=("dp", "tp"))
        self.reference = MLP(dims).to(device)   # unsplit, trained on this rank alone
        self.model = place(copy.deepcopy(self.reference), mesh, placements)
        gen = torch.Generator().manual_seed(1)  # the same global batch on every rank
        self.x = torch.randn(batch, dims[0], generator=gen).to(device)
        self.t = torch.randn(batch, dims[-1], generator=gen).to(device)
        # the batch split along dp (the rows each replica trains on), whole along tp
        self.xd = distribute_tensor(self.x, mesh, LAYOUT["R"])
        self.td = distribute_tensor(self.t, mesh, LAYOUT["R"])
        self.opt = torch.optim.SGD(self.model.parameters(), lr=lr)
        self.ref_opt = torch.optim.SGD(self.reference.parameters(), lr=lr)
        self.times, self.ref_times, self.collectives, self.loss_diff = [], [], {}, 0.0

    def step(self, count: bool = False) -> None:
        comm = {p: CommDebugMode() for p in ("forward", "backward", "optimizer step")}
        noop = contextlib.nullcontext()
        dist.barrier()
        t0 = time.perf_counter()
        with comm["forward"] if count else noop:
            loss = ((self.model(self.xd) - self.td) ** 2).mean()
        with comm["backward"] if count else noop:
            self.opt.zero_grad()
            loss.backward()
        with comm["optimizer step"] if count else noop:
            self.opt.step()
        dist.barrier()
        self.times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()     # the same step, unsplit, timed alike
        ref_loss = ((self.reference(self.x) - self.t) ** 2).mean()
        self.ref_opt.zero_grad()
        ref_loss.backward()
        self.ref_opt.step()
        dist.barrier()
        self.ref_times.append(time.perf_counter() - t0)
        if count:
            self.collectives = {p: {str(op).split(".")[-1]: n
                                    for op, n in c.get_comm_counts().items()}
                                for p, c in comm.items()}
            self.loss_diff = abs(loss.full_tensor().item() - ref_loss.item())

    def result(self) -> dict:
        weight_diff = max((m.weight.full_tensor() - r.weight).abs().max().item()
                          for m, r in zip(self.model.layers, self.reference.layers))
        return {"plan": self.plan, "collectives": self.collectives,
                "step_s": self.times[1:], "unsplit_step_s": self.ref_times[1:],
                "loss_diff": self.loss_diff, "weight_diff": weight_diff}


# bytes of the full tensor: 16 KiB, 256 KiB, 4 MiB. The largest is past the plans'
# largest collective (a 1 MiB weight gradient) so that the time the bytes take
# stands out of the latency even when other work slows every collective: with
# sizes that all take about a latency, a busy machine leaves nothing to fit.
SIZES = [2**14, 2**18, 2**22]


def timed(op: str, nbytes: int, group, device: str, repeats: int) -> float:
    """Seconds of one collective: the fastest of `repeats` on each rank (other work on
    the machine only ever adds time), then the slowest rank's."""
    p = dist.get_world_size(group)
    if op == "all_reduce":
        x = torch.ones(nbytes // 4, device=device)
        run = lambda: dist.all_reduce(x, group=group)  # noqa: E731
    else:    # every rank brings 1/p of the tensor and gets all of it
        x = torch.ones(nbytes // 4 // p, device=device)
        out = torch.empty(nbytes // 4, device=device)
        run = lambda: dist.all_gather_into_tensor(out, x, group=group)  # noqa: E731
    run()                                    # warm-up
    times = []
    for _ in range(repeats):
        dist.barrier(group=group)
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        run()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    slowest = torch.tensor([min(times)], device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    return slowest.item()


def sweep(device: str, repeats: int) -> list[dict]:
    """All-reduce and all-gather of each size in SIZES, over all ranks and over pairs of
    ranks (the pairs at once, as the tp groups of a (world/2) x 2 mesh run)."""
    world = dist.get_world_size()
    pairs = init_device_mesh(device, (world // 2, 2), mesh_dim_names=("dp", "tp"))
    rows = []
    for p, group in ((world, None), (2, pairs.get_group("tp"))):   # None: all ranks
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
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    # gloo for CPU ranks, NCCL for GPUs (a machine with a GPU would otherwise start NCCL alone)
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    dims = [int(v) for v in args.dims.split(",")]
    runs = [Run(p, dims, args.batch, args.device) for p in args.plans]
    for step in range(1 + args.steps):   # step 0 warms up and counts the collectives;
        for run in runs:                 # the plans take turns, so that a burst of load
            run.step(count=step == 0)    # on the machine slows all of them, not one
    results = [run.result() for run in runs]
    rows = [] if args.no_sweep else sweep(args.device, args.repeats)
    if dist.get_rank() == 0:
        print(f"MLP {dims}, batch {args.batch}, float32, {dist.get_world_size()} ranks "
              f"on {args.device};\ncollectives counted by CommDebugMode in one step:")
        for r in results:
            ms = min(r["step_s"]) * 1e3
            print(f"  {r['plan']:<16} {ms:7.2f} ms/step (fastest), vs unsplit: loss "
                  f"{r['loss_diff']:.0e}, weights {r['weight_diff']:.0e}")
            for phase, ops in r["collectives"].items():
                print(f"      {phase}: {ops or 'none'}")
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
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
