"""PyTorch's semi-automatic API on a 1-D mesh, in one launch (a launch costs seconds):

1. ``reshards``: every change of placement of one matrix, and the collectives DTensor
   runs for it;
2. ``tp_mlp``: a two-layer MLP split Megatron-style (first layer by columns, second by
   rows) with ``parallelize_module``, trained next to an unsplit copy of itself.

    torchrun --nproc_per_node 2 semi_auto_torch.py                 # CPU ranks, gloo
    torchrun --nproc_per_node gpu semi_auto_torch.py --device cuda  # every GPU, NCCL
"""
import argparse
import copy
import json
import logging
import os
import warnings

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import (DTensor, Partial, Replicate, Shard,
                                      distribute_tensor)
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                               parallelize_module)

# CommDebugMode's module tracker warns when a module's input needs no gradient
warnings.filterwarnings("ignore", message="Full backward hook")


def counts(comm: CommDebugMode) -> dict:
    """The collectives CommDebugMode saw, by name."""
    return {str(op).split(".")[-1]: n for op, n in comm.get_comm_counts().items()}


# ------------------------------------------------------------------ 1. reshards
CASES = [(Shard(0), Replicate()), (Partial(), Replicate()), (Shard(0), Shard(1)),
         (Replicate(), Shard(0)), (Partial(), Shard(0))]


def reshards(mesh, device: str) -> list[dict]:
    """Each reshard of CASES on one integer-valued 256 x 128 float32 matrix (so that
    sums are exact), built on every rank alike; Partial tensors from addends that differ
    from rank to rank and sum to the matrix."""
    rank, world = dist.get_rank(), mesh.size()
    gen = torch.Generator().manual_seed(0)
    g = torch.randint(-8, 8, (256, 128), generator=gen).float()
    parts = torch.randint(-4, 4, (world - 1, 256, 128), generator=gen).float()
    addend = (parts[rank] if rank < world - 1 else g - parts.sum(0)).to(device)
    g = g.to(device)
    # On a CPU mesh DTensor runs Shard -> Shard as an all-gather (gloo has no all-to-all)
    # and logs a warning about it on every rank, into the table below; the table's row
    # shows the all-gather it ran and the page says why, so the warning is not printed.
    logging.getLogger("torch.distributed.tensor._collective_utils").setLevel(logging.ERROR)
    if rank == 0:
        print(f"{world} ranks on {device}, a 256 x 128 float32 matrix; rank 0 sees "
              "(local shapes before -> after):")
    rows = []
    for src, dst in CASES:
        if src.is_partial():
            d = DTensor.from_local(addend, mesh, [src])
        else:
            d = distribute_tensor(g, mesh, [src])
        with CommDebugMode() as comm:
            out = d.redistribute(mesh, [dst])
        exact = torch.equal(out.full_tensor(), g)
        local_in, local_out = tuple(d.to_local().shape), tuple(out.to_local().shape)
        rows.append({"src": repr(src), "dst": repr(dst), "collectives": counts(comm),
                     "local_in": local_in, "local_out": local_out, "exact": exact})
        if rank == 0:
            ops = counts(comm)
            what = ", ".join(f"{op} x{n}" for op, n in ops.items()) or "nothing"
            print(f"  {src!r:>12} -> {dst!r:<13} {what:<27} {local_in} -> "
                  f"{local_out}, exact: {exact}", flush=True)
    return rows


# ------------------------------------------------------------------ 2. the split MLP
DIMS, BATCH, STEPS, LR = (64, 128, 32), 32, 5, 0.1


def mlp() -> torch.nn.Sequential:
    torch.manual_seed(0)   # the same initial weights on every rank
    return torch.nn.Sequential(torch.nn.Linear(DIMS[0], DIMS[1], bias=False),
                               torch.nn.ReLU(),
                               torch.nn.Linear(DIMS[1], DIMS[2], bias=False))


def tp_mlp(mesh, device: str) -> dict:
    reference = mlp().to(device)     # the unsplit model, trained on this rank alone
    # nn.Linear keeps its weight as (out, in): ColwiseParallel splits the output
    # features (Shard(0) of the weight), RowwiseParallel the input features (Shard(1))
    model = parallelize_module(copy.deepcopy(reference), mesh,
                               {"0": ColwiseParallel(), "2": RowwiseParallel()})
    gen = torch.Generator().manual_seed(1)     # the same batch on every rank
    x = torch.randn(BATCH, DIMS[0], generator=gen).to(device)
    t = torch.randn(BATCH, DIMS[2], generator=gen).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR)

    losses, ref_losses, phases = [], [], {}
    for _ in range(STEPS):
        with CommDebugMode() as comm:
            loss = torch.nn.functional.mse_loss(model(x), t)
        phases["forward"] = counts(comm)
        with CommDebugMode() as comm:
            opt.zero_grad()
            loss.backward()
        phases["backward"] = counts(comm)
        with CommDebugMode() as comm:
            opt.step()
        phases["optimizer step"] = counts(comm)
        ref_loss = torch.nn.functional.mse_loss(reference(x), t)
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        losses.append(loss.item())
        ref_losses.append(ref_loss.item())

    linears = [model[0], model[2]]
    full = [m.weight.full_tensor() for m in linears]    # gathers each weight's shards
    weight_diff = max((w - r.weight).abs().max().item()
                      for w, r in zip(full, [reference[0], reference[2]]))
    loss_diff = max(abs(a - b) for a, b in zip(losses, ref_losses))
    shapes = [list(m.weight.to_local().shape) for m in linears]
    if dist.get_rank() == 0:
        print(f"MLP {DIMS}, batch {BATCH}, {STEPS} SGD steps, float32, "
              f"{mesh.size()} ranks on {device}")
        for name, m in zip(("first (column-wise)", "second (row-wise)"), linears):
            print(f"  {name} layer: weight {tuple(m.weight.shape)} is "
                  f"{m.weight.placements}, rank 0 holds "
                  f"{tuple(m.weight.to_local().shape)}")
        print("  losses, split  :", [round(v, 6) for v in losses])
        print("  losses, unsplit:", [round(v, 6) for v in ref_losses])
        print(f"  largest difference: loss {loss_diff:.1e}, weight {weight_diff:.1e}")
        print("  collectives in one step (CommDebugMode):")
        for phase, ops in phases.items():
            print(f"    {phase}: {ops or 'none'}")
    return {"losses": losses, "ref_losses": ref_losses, "loss_diff": loss_diff,
            "weight_diff": weight_diff, "local_shapes": shapes, "collectives": phases}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", help="JSON file for the results (written by rank 0)")
    args = ap.parse_args()
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    # gloo for CPU ranks, NCCL for GPUs: named, since a machine with a GPU would start NCCL
    # alone, and CPU tensors could not travel
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    # a 1-D mesh of all ranks, over that process group
    mesh = init_device_mesh(args.device, (int(os.environ["WORLD_SIZE"]),))
    result = {"world": mesh.size(), "device": args.device,
              "reshards": reshards(mesh, args.device),
              "tp_mlp": tp_mlp(mesh, args.device)}
    if dist.get_rank() == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
