"""Every change of placement of one matrix on a 1-D mesh, and the collectives DTensor
runs.

    torchrun --nproc_per_node 2 reshard_torch.py               # CPU ranks, gloo
    torchrun --nproc_per_node 2 reshard_torch.py --device cuda # one GPU per rank, NCCL
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import (DTensor, Partial, Replicate, Shard,
                                      distribute_tensor)
from torch.distributed.tensor.debug import CommDebugMode

CASES = [(Shard(0), Replicate()), (Partial(), Replicate()), (Shard(0), Shard(1)),
         (Replicate(), Shard(0)), (Partial(), Shard(0))]


def start(device: str, ranks: int):
    if device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    # a 1-D mesh of all ranks; it starts the process group (gloo on CPU, NCCL on GPUs)
    return init_device_mesh(device, (ranks,), mesh_dim_names=("x",))


def matrix_and_addend(device: str, rank: int, world: int):
    """The same integer-valued 256 x 128 matrix on every rank (so that sums are exact),
    and this rank's addend of it: the addends differ and sum to the matrix."""
    gen = torch.Generator().manual_seed(0)
    g = torch.randint(-8, 8, (256, 128), generator=gen).float()
    parts = torch.randint(-4, 4, (world - 1, 256, 128), generator=gen).float()
    addend = parts[rank] if rank < world - 1 else g - parts.sum(0)
    return g.to(device), addend.to(device)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", help="JSON file for the results (written by rank 0)")
    args = ap.parse_args()
    world = int(os.environ["WORLD_SIZE"])
    mesh = start(args.device, world)
    rank = dist.get_rank()
    g, addend = matrix_and_addend(args.device, rank, world)

    if rank == 0:
        print(f"{world} ranks on {args.device}, a 256 x 128 float32 matrix; "
              "rank 0 sees:")
    rows = []
    for src, dst in CASES:
        if src.is_partial():   # a Partial tensor is built from each rank's addend
            d = DTensor.from_local(addend, mesh, [src])
        else:                  # the others from the full matrix, split or copied
            d = distribute_tensor(g, mesh, [src])
        with CommDebugMode() as comm:
            out = d.redistribute(mesh, [dst])
        counts = {str(op).split(".")[-1]: n for op, n in comm.get_comm_counts().items()}
        exact = torch.equal(out.full_tensor(), g)
        rows.append({"src": repr(src), "dst": repr(dst), "collectives": counts,
                     "local_in": list(d.to_local().shape),
                     "local_out": list(out.to_local().shape), "exact": exact})
        if rank == 0:
            what = ", ".join(f"{op} x{n}" for op, n in counts.items()) or "nothing"
            print(f"{src!r:>14} -> {dst!r:<14} {what:<27} local "
                  f"{tuple(d.to_local().shape)} -> {tuple(out.to_local().shape)}, "
                  f"exact: {exact}", flush=True)
    if rank == 0:
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": world, "device": args.device, "rows": rows}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
