"""Time all-reduce and all-gather of several sizes, over all ranks and over pairs of
ranks (the pairs at the same time, as the tensor-parallel groups of a 2-D mesh run).

    torchrun --nproc_per_node 4 sweep_torch.py --out sweep.json           # CPU, gloo
    torchrun --nproc_per_node 4 sweep_torch.py --device cuda --out sweep.json  # NCCL
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

SIZES = [2**k for k in range(12, 23, 2)]     # bytes of the full tensor: 4 KiB .. 4 MiB


def timed(op: str, nbytes: int, group, device: str, repeats: int) -> float:
    """Median seconds of one collective, as the slowest rank of the group saw it."""
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
    slowest = torch.tensor([statistics.median(times)], device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    return slowest.item()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", help="JSON file for the results (written by rank 0)")
    args = ap.parse_args()
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    world = int(os.environ["WORLD_SIZE"])
    # the pairs are the "tp" groups of a (world/2) x 2 mesh: ranks 0-1, 2-3, ...
    mesh = init_device_mesh(args.device, (world // 2, 2), mesh_dim_names=("dp", "tp"))
    groups = {world: None, 2: mesh.get_group("tp")}  # None: all ranks
    rows = []
    for p, group in groups.items():
        for op in ("all_reduce", "all_gather"):
            for nbytes in SIZES:
                s = timed(op, nbytes, group, args.device, args.repeats)
                rows.append({"op": op, "ranks": p, "bytes": nbytes, "s": s})
    if dist.get_rank() == 0:
        print(f"{world} ranks on {args.device}, median of {args.repeats} "
              "(slowest rank):")
        for r in rows:
            print(f"  {r['op']:<10} over {r['ranks']} ranks, "
                  f"{r['bytes'] / 1024:6.0f} KiB: {r['s'] * 1e3:8.3f} ms")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"world": world, "device": args.device, "rows": rows}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
